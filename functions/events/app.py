"""events λ: GET /events?mchid=M[&after=CURSOR][&limit=N] (IAM auth): a merchant's events for a backend that
cannot take inbound HTTP; without `after`, from where this caller left off (docs/webhooks.md "Pull")."""

from tally import bootstrap
from tally.apigw import HttpRequest, answer, json_response
from tally.observability import logger, metrics


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return answer(lambda: _handle(event), what="events")


def _handle(event):
    request = HttpRequest.from_event(event)
    iam = (event.get("requestContext") or {}).get("authorizer", {}).get("iam") or {}
    principal = str(iam.get("userArn") or iam.get("userId") or "anonymous")
    q = request.query
    return json_response(
        200, bootstrap.event_feed().read(principal, q.get("mchid", ""), q.get("after"), q.get("limit"))
    )
