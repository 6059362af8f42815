"""console λ: the operations console's pages and actions (docs/console.md). Everything is in tally.console."""

from tally.console.app import handle
from tally.observability import logger, metrics


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return handle(event)
