"""orders λ: POST /orders (register + Native prepay) and GET /orders/{mchid}/{out_trade_no}.

IAM-authorised in template.yaml; the signed caller acts only for the merchants its principal is registered with
(R53, service/callers.py), checked before anything is read or written. Routed by Powertools' HTTP resolver
(tally.api.edge.resolver, validation on); requests and answers are the models of tally/api/models.py
(docs/openapi.json): 201 for a new order, 200 for an identical re-post (a retry, whatever the order's state),
409 `order_terms_differ` naming the term that differs. Every error is the one shape of docs/errors.md."""

from tally import bootstrap
from tally.api import models
from tally.api.edge import order_request, order_view, resolver, respond, to_response
from tally.apigw import HttpRequest, json_response
from tally.observability import logger, metrics
from tally.service.callers import caller_of, merchants_named

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.callers, bootstrap.order_service)

app = resolver(what="orders")


@app.post("/orders")
def create_order():
    event = app.current_event.raw_event
    caller = caller_of(event)
    body = HttpRequest.from_event(event).json()
    bootstrap.callers().require(caller, merchants_named(body))
    order = order_request(body)
    view, created = bootstrap.order_service().register(order.model_dump(exclude_none=True))
    return to_response(json_response(201 if created else 200, order_view(view)))


@app.get("/orders/<mchid>/<out_trade_no>")
def show_order(mchid: str, out_trade_no: str):
    event = app.current_event.raw_event
    params = HttpRequest.from_event(event).path_params  # as API Gateway decoded them
    bootstrap.callers().require(caller_of(event), [params["mchid"]])
    # the merchant's return page (R24): asks the channel once about an unpaid order; every other reader
    # (CLI, console) is read-only (R42, docs/story.md)
    view = bootstrap.order_service().show(params["mchid"], params["out_trade_no"], ask_channel=True)
    return to_response(respond(200, models.OrderDetail, view))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return app.resolve(event, context)
