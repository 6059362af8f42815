"""refunds λ: POST /refunds (create, R26–R28) and GET /refunds/{refund_no}. IAM-authorised in template.yaml.

Routed by Powertools' HTTP resolver (tally.api.edge.resolver, validation on: `?mchid=` is a typed query
parameter); requests and answers are the models of tally/api/models.py (docs/openapi.json): 201 for a new
refund, 200 for the same refund_no with the same terms (the existing refund), 409 `refund_terms_differ` naming
the term. Errors are the one shape of docs/errors.md (400, 403, 404, 409, 503 busy).
`scheduled` is the poller's entry (poll_due + work_tasks); the poller handler calls the same two methods.
"""

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from tally import bootstrap
from tally.api import models
from tally.api.edge import parse, resolver, respond, to_response
from tally.apigw import HttpRequest
from tally.observability import logger, metrics
from tally.service.callers import caller_of, merchants_named

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.callers, bootstrap.refund_service)

app = resolver(what="refunds", retry_hint="internal error, retry with the same refund_no")


@app.post("/refunds")
def create_refund():
    event = app.current_event.raw_event
    caller = caller_of(event)  # R53: the signed caller acts only for its own merchants, reads included
    body = HttpRequest.from_event(event).json()
    bootstrap.callers().require(caller, merchants_named(body))
    request = parse(models.RefundRequest, body)
    refund, created = bootstrap.refund_service().create(request.model_dump(exclude_none=True))
    return to_response(respond(201 if created else 200, models.Refund, refund))


@app.get("/refunds/<refund_no>")
def show_refund(refund_no: str, mchid: Annotated[str | None, Query()] = None):
    event = app.current_event.raw_event
    caller, callers = caller_of(event), bootstrap.callers()
    # `?mchid=` (the caller's merchant): another tenant's refund number is then simply not found (R39)
    refund_no = HttpRequest.from_event(event).path_params["refund_no"]  # as API Gateway decoded it
    if mchid is not None:
        callers.require(caller, [mchid])
    refund = bootstrap.refund_service().show(refund_no, mchid)
    callers.require(caller, [refund["mchid"]])
    return to_response(respond(200, models.Refund, refund))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return app.resolve(event, context)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def scheduled(event, context):
    """Test-invokable poller entry: `{"limit": 50}` → what poll_due and work_tasks did."""
    limit = int((event or {}).get("limit", 50))
    service = bootstrap.refund_service()
    return {"poll_due": service.poll_due(limit), "work_tasks": service.work_tasks(limit)}
