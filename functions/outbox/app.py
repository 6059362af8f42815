"""outbox λ: DynamoDB Streams (orders, refunds) → EventBridge; a failed record is retried, then parked in the DLQ.

The loop stops at the first record that fails and reports only it: Lambda restarts the shard from the lowest
reported sequence number, so nothing after it is published before it. Powertools' BatchProcessor is not used
here: it tries every record of the batch and reports each failure, so a later change of the same order would
reach the bus before the earlier change that failed, and again when the stream retries from that one
(docs/design.md §7.1)."""

from tally import bootstrap
from tally.observability import M, count, logger, metrics
from tally.service.outbox import PublishFailed

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.outbox_service)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    service = bootstrap.outbox_service()
    failures = []
    for record in event.get("Records", []):
        try:
            service.publish_record(record)
        except Exception as exc:  # noqa: BLE001 - reported as a failure (retried), counted once, never swallowed
            if not isinstance(exc, PublishFailed):  # the bus refused it: the service counted it already (L6)
                count(M.OUTBOX_FAILED)
            logger.exception(
                "outbox record not published; retried by the stream",
                extra={"sequence": record.get("dynamodb", {}).get("SequenceNumber")},
            )
            failures.append({"itemIdentifier": record["dynamodb"]["SequenceNumber"]})
            break  # stream order: stop at the first failure, the rest is retried after it
    return {"batchItemFailures": failures}
