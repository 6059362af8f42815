"""outbox-parked λ: the OutboxDLQ → every stream record Lambda gave up on gets one more attempt, and one that still
fails becomes an EventGenerationFailed event and a case; a case's `replay` republishes from the row (R20).

Powertools' BatchProcessor reports each message that raised (ReportBatchItemFailures, template.yaml): the DLQ is a
standard queue and each parked message is handled on its own, so no order is kept across a failure."""

import json

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.outbox_service)

# an all-failed batch is reported, not raised: the messages stay on the queue (OutboxDLQAlarm watches its age)
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def handle_message(record: SQSRecord):
    try:
        body = json.loads(record.body)
        bootstrap.parked_records().handle(body if isinstance(body, dict) else {"unreadable": body})
    except Exception:
        logger.exception(
            "parked outbox message not handled; retried", extra={"message_id": record.message_id}
        )
        raise


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return process_partial_response(
        event=event, record_handler=handle_message, processor=processor, context=context
    )
