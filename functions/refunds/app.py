"""refunds λ: POST /refunds (create, R26–R28) and GET /refunds/{refund_no}. IAM-authorised in template.yaml.

Requests and answers are the models of tally/api/models.py (docs/openapi.json): 201 for a new refund, 200 for
the same refund_no with the same terms (the existing refund), 409 `refund_terms_differ` naming the term.
`scheduled` is the poller's entry (poll_due + work_tasks); the poller handler calls the same two methods.
"""

from tally import bootstrap
from tally.api import models
from tally.api.edge import api_answer, parse, respond
from tally.apigw import HttpRequest
from tally.observability import metrics
from tally.service.callers import caller_of, merchants_named


@metrics.log_metrics
def handler(event, context):
    # errors become HTTP in tally.apigw.answer (docs/errors.md: 400, 403, 404, 409, 503 busy)
    return api_answer(
        lambda: _handle(event), what="refunds", retry_hint="internal error, retry with the same refund_no"
    )


def _handle(event):
    caller = caller_of(event)  # R53: the signed caller acts only for its own merchants, reads included
    callers = bootstrap.callers()
    service = bootstrap.refund_service()
    request = HttpRequest.from_event(event)
    if request.method == "POST":
        body = request.json()
        callers.require(caller, merchants_named(body))
        refund, created = service.create(parse(models.RefundRequest, body).model_dump(exclude_none=True))
        return respond(201 if created else 200, models.Refund, refund)
    # `?mchid=` (the caller's merchant): another tenant's refund number is then simply not found (R39)
    refund_no, mchid = request.path_params["refund_no"], request.query.get("mchid")
    if mchid is not None:
        callers.require(caller, [mchid])
    refund = service.show(refund_no, mchid)
    callers.require(caller, [refund["mchid"]])
    return respond(200, models.Refund, refund)


@metrics.log_metrics
def scheduled(event, context):
    """Test-invokable poller entry: `{"limit": 50}` → what poll_due and work_tasks did."""
    limit = int((event or {}).get("limit", 50))
    service = bootstrap.refund_service()
    return {"poll_due": service.poll_due(limit), "work_tasks": service.work_tasks(limit)}
