"""keys λ (EventBridge schedule, hourly): WeChat platform certificates downloaded and stored for every
container, certificates expiring within 7 days counted (docs/channels.md "Key rotation")."""

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.key_rotation_service)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    report = bootstrap.key_rotation_service().run()
    logger.info("key rotation run", extra=report)
    return report
