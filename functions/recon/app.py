"""recon λ: the daily schedule (EventBridge) and bills dropped into S3 by hand (EventBridge "Object Created")."""

from tally import bootstrap
from tally.observability import M, count, logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.recon_service)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    service = bootstrap.recon_service()
    try:
        if event.get("source") == "aws.s3":
            key = event["detail"]["object"]["key"]
            run = service.from_s3_event(key)
            return {"runs": [_brief(run)] if run else []}
        if event.get("action") in ("partition", "merge"):  # the Distributed Map's steps (docs/recon.md)
            from tally.service import recon_map

            if event["action"] == "partition":
                return recon_map.child(service, event)
            return {"runs": [_brief(recon_map.merge(service, event))]}
        if (
            event.get("action") == "run"
        ):  # a direct invoke: {"action": "run", "channel", "mchid", "bill_date"}
            return {"runs": [_brief(service.run(event["channel"], event["mchid"], event["bill_date"]))]}
        runs = [_brief(run) for run in service.scheduled()]
        count(M.RECON_RUN_COMPLETED)  # the tick's heartbeat, also with nothing due or no merchant (R46)
        return {"runs": runs}
    except Exception:
        count(M.RECON_FAILED)
        logger.exception("recon failed", extra={"event_source": event.get("source")})
        raise


def _brief(run):
    return {k: run.get(k) for k in ("pk", "pass", "status", "reason", "open_diffs", "report_key")}
