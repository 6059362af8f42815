"""orders λ: POST /orders (register + Native prepay) and GET /orders/{mchid}/{out_trade_no}.

IAM-authorised in template.yaml; the signed caller acts only for the merchants it is registered with (R53,
service/callers.py), checked before anything is read or written. Errors become HTTP in one place,
tally.apigw.answer (tally/errors.py: 400 invalid, 403 forbidden, 404 not found, 409 conflict, 502 prepay failed
with the stored order; anything else 500 + ApiFailed)."""

from tally import bootstrap
from tally.apigw import HttpRequest, answer, json_response
from tally.observability import logger, metrics
from tally.service.callers import caller_of, merchants_named


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    return answer(lambda: _handle(event), what="orders")


def _handle(event):
    caller = caller_of(event)
    service = bootstrap.order_service()
    request = HttpRequest.from_event(event)
    if request.method == "POST":
        body = request.json()
        bootstrap.callers().require(caller, merchants_named(body))
        return json_response(201, service.create(body))
    params = request.path_params
    bootstrap.callers().require(caller, [params["mchid"]])
    # the merchant's return page (R24): asks the channel once about an unpaid order; every other reader
    # (CLI, console) is read-only (R42, docs/story.md)
    return json_response(200, service.show(params["mchid"], params["out_trade_no"], ask_channel=True))
