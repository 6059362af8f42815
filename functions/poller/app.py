"""poller λ (EventBridge schedule, every minute): sweep + morning number first, then the due orders."""

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.sweep_service, bootstrap.poll_service, bootstrap.refund_service)

STOP_WITH_MS_LEFT = 10_000  # stop taking new orders with 10 s left; the rest stays due
REFUND_BATCH = 50


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    swept = bootstrap.sweep_service().run()
    polled = bootstrap.poll_service().run(
        out_of_time=lambda: context.get_remaining_time_in_millis() < STOP_WITH_MS_LEFT
    )
    refunds = bootstrap.refund_service()  # refunds ride the same schedule: PENDING re-sent, ACCEPTED queried
    summary = {
        "requeued": swept.requeued,
        "swept_to_person": swept.to_person,
        "pending_over_10m": swept.stale,
        "manual_over_24h": swept.aged,
        "orders_read": polled.read,
        "orders_polled": polled.claimed,
        "outcomes": polled.outcomes,
        "refunds": refunds.poll_due(REFUND_BATCH),
        "refund_tasks": refunds.work_tasks(REFUND_BATCH),
    }
    logger.info("poller run", extra=summary)
    return summary
