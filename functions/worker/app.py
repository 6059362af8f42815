"""worker λ: SQS batch of raw keys → apply each; failures reported per message (partial batch).

The partial batch response is built here, as functions/outbox does it: Powertools' BatchProcessor pulled in
asyncio and every event data class (~70 ms of the worker's cold start, docs/cost.md) for a loop of ten lines."""

import json

from tally import bootstrap
from tally.observability import M, count, logger, metrics
from tally.service.apply import RetryLater


def apply_record(record):
    message = json.loads(record["body"])
    if "refund_raw_key" in message:
        return apply_refund_record(message["refund_raw_key"], message["status"])
    raw_key = message["raw_key"]
    logger.append_keys(raw_key=raw_key)  # correlation id on every line about this record
    try:
        return bootstrap.apply_service().apply(raw_key, message.get("notice")).value
    except RetryLater as exc:
        logger.info("apply deferred", extra={"raw_key": raw_key, "reason": str(exc)})
        raise
    except Exception:
        count(M.APPLY_FAILED)
        logger.exception("apply failed", extra={"raw_key": raw_key})
        raise


def apply_refund_record(key, status):
    """A refund report (notification or query) → RefundService.apply_notification (R29)."""
    try:
        return bootstrap.refund_service().apply_notification(key, status).value
    except RetryLater as exc:
        logger.info("refund apply deferred", extra={"refund_raw_key": key, "reason": str(exc)})
        raise
    except Exception:
        count(M.APPLY_FAILED)
        logger.exception("refund apply failed", extra={"refund_raw_key": key, "status": status})
        raise


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    """Every record is tried; the ones that raised are reported by messageId, so SQS redelivers only those
    (ReportBatchItemFailures, template.yaml). A batch where every record failed is reported like any other."""
    failures = []
    for record in event["Records"]:
        try:
            apply_record(record)
        except Exception:  # noqa: BLE001 - redelivered; a failed apply is counted and logged above, a body that
            # does not parse ends in ApplyDLQ (ApplyDLQAlarm)
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
