"""heartbeat λ (EventBridge schedule, every minute): a synthetic WeChat Pay callback through the public API;
HeartbeatAgeAlarm fires when none is booked within 3 minutes (service/heartbeat.py)."""

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.heartbeat)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return bootstrap.heartbeat().beat()
