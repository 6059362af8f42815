"""orders λ: POST /orders (register + Native prepay) and GET /orders/{mchid}/{out_trade_no}.

IAM-authorised in template.yaml; the signed caller acts only for the merchants its principal is registered with
(R53, service/callers.py), checked before anything is read or written. Requests and answers are the models of
tally/api/models.py (docs/openapi.json): 201 for a new order, 200 for an identical re-post (a retry, whatever the
order's state), 409 `order_terms_differ` naming the term that differs. Errors become HTTP in one place,
tally.apigw.answer, in the one shape of docs/errors.md."""

from tally import bootstrap
from tally.api import models
from tally.api.edge import api_answer, order_request, order_view, respond
from tally.apigw import HttpRequest, json_response
from tally.observability import logger, metrics
from tally.service.callers import caller_of, merchants_named


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return api_answer(lambda: _handle(event), what="orders")


def _handle(event):
    caller = caller_of(event)
    service = bootstrap.order_service()
    request = HttpRequest.from_event(event)
    if request.method == "POST":
        body = request.json()
        bootstrap.callers().require(caller, merchants_named(body))
        order = order_request(body)
        view, created = service.register(order.model_dump(exclude_none=True))
        return json_response(201 if created else 200, order_view(view))
    params = request.path_params
    bootstrap.callers().require(caller, [params["mchid"]])
    # the merchant's return page (R24): asks the channel once about an unpaid order; every other reader
    # (CLI, console) is read-only (R42, docs/story.md)
    view = service.show(params["mchid"], params["out_trade_no"], ask_channel=True)
    return respond(200, models.OrderDetail, view)
