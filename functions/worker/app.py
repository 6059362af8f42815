"""worker λ: SQS batch of raw keys → apply each; failures reported per message (partial batch).

Powertools' BatchProcessor tries every record and reports the ones that raised by messageId, so SQS redelivers
only those (ReportBatchItemFailures, template.yaml). The apply queue is a standard queue and every apply is
idempotent by its raw key, so the records of a batch are independent: no order to keep across a failure."""

import json

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from tally import bootstrap
from tally.observability import M, count, logger, metrics
from tally.service.apply import RetryLater

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.apply_service)

# a batch where every record failed is reported like any other (not raised: that would redeliver the whole
# batch, the records that were booked too)
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def apply_record(record: SQSRecord):
    """One message: a raw key to apply, or a refund report. A body that does not parse raises: redelivered,
    then ApplyDLQ (ApplyDLQAlarm)."""
    message = json.loads(record.body)
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
    return process_partial_response(
        event=event, record_handler=apply_record, processor=processor, context=context
    )
