"""events λ: GET /events?mchid=M[&after=CURSOR][&limit=N] (IAM auth): a merchant's events for a backend that
cannot take inbound HTTP; without `after`, from where this caller left off (docs/webhooks.md "Pull"). The
signed caller reads only the merchants it is registered for (R53, service/callers.py)."""

from tally import bootstrap
from tally.apigw import HttpRequest, answer, json_response
from tally.observability import logger, metrics
from tally.service.callers import caller_of

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.callers, bootstrap.webhook_endpoints)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return answer(lambda: _handle(event), what="events")


def _handle(event):
    caller = caller_of(event)
    request = HttpRequest.from_event(event)
    q = request.query
    if q.get("mchid"):  # none named: the feed's own 400
        bootstrap.callers().require(caller, [q["mchid"]])
    return json_response(
        200, bootstrap.event_feed().read(caller, q.get("mchid", ""), q.get("after"), q.get("limit"))
    )
