"""outbox-parked λ: the OutboxDLQ → every stream record Lambda gave up on gets one more attempt, and one that still
fails becomes an EventGenerationFailed event and a case; a case's `replay` republishes from the row (R20)."""

import json

from tally import bootstrap
from tally.observability import logger, metrics


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    service = bootstrap.parked_records()
    failures = []
    for record in event.get("Records", []):
        try:
            body = json.loads(record["body"])
            service.handle(body if isinstance(body, dict) else {"unreadable": body})
        except Exception:  # noqa: BLE001 - the message stays on the queue (OutboxDLQAlarm watches its age)
            logger.exception(
                "parked outbox message not handled; retried", extra={"message_id": record["messageId"]}
            )
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
