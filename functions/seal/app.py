"""seal λ (EventBridge schedule, daily at 00:30 Asia/Shanghai): seal yesterday's decision journal, then verify
yesterday and older sealed days again as an auditor would (service/audit.py, docs/audit.md). A day that does not
verify is a case and AuditMismatch (alarmed); a run that fails is alarmed (SealErrorsAlarm) and the next run
seals the day."""

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.audit_service)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    day = (event or {}).get("day")  # a person may seal a given closed day by hand
    service = bootstrap.audit_service()
    sealed = service.seal_day(day) if day else service.seal_due()
    checked = (
        service.check_day(day) if day else service.check_due()
    )  # the tamper alarm: AuditMismatch + a case
    logger.info("seal run", extra={"sealed": sealed, "not_verified": checked})
    return {"sealed": sealed, "not_verified": checked}
