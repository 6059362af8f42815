"""webhooks λ: the FIFO delivery queue → one signed POST per message to the merchant's endpoint (docs/webhooks.md).

A failed attempt keeps its message invisible for the backoff and is reported, with the later messages of its
group (the same endpoint and order), so one order's events arrive in the order they happened."""

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.webhook_deliverer)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    kept = bootstrap.webhook_deliverer().handle_batch(event.get("Records", []))
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in kept]}
