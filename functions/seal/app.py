"""seal λ (EventBridge schedule, daily at 00:30 Asia/Shanghai): seal yesterday's decision journal
(service/audit.py, docs/audit.md). A run that fails is alarmed (SealErrorsAlarm); the next run seals the day."""

from tally import bootstrap
from tally.observability import logger, metrics


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    day = (event or {}).get("day")  # a person may seal a given closed day by hand
    service = bootstrap.audit_service()
    sealed = service.seal_day(day) if day else service.seal_due()
    logger.info("seal run", extra={"sealed": sealed})
    return {"sealed": sealed}
