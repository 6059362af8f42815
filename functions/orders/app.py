"""orders λ: POST /orders (register + Native prepay) and GET /orders/{mchid}/{out_trade_no}."""

from tally import bootstrap
from tally.apigw import BadRequest, HttpRequest, json_response
from tally.observability import M, count, logger, metrics
from tally.service.orders import InvalidOrder, NotFound, OrderConflict, PrepayFailed


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    service = bootstrap.order_service()
    try:
        request = HttpRequest.from_event(event)
        if request.method == "POST":
            return json_response(201, service.create(request.json())).to_event()
        params = request.path_params
        # the merchant's return page (R24): asks the channel once about an unpaid order; every other reader
        # (CLI, console) is read-only (R42, docs/story.md)
        view = service.show(params["mchid"], params["out_trade_no"], ask_channel=True)
        return json_response(200, view).to_event()
    except (BadRequest, InvalidOrder) as exc:
        return json_response(400, {"error": str(exc)}).to_event()
    except NotFound as exc:
        return json_response(404, {"error": str(exc)}).to_event()
    except OrderConflict as exc:
        return json_response(409, {"error": str(exc)}).to_event()
    except PrepayFailed as exc:
        return json_response(502, {"error": f"prepay failed: {exc}", "order": exc.order}).to_event()
    except Exception as exc:  # noqa: BLE001 - R40: no input answers 500 without a metric and an alarm
        count(M.API_FAILED)
        logger.exception("orders request failed", extra={"error": type(exc).__name__})
        return json_response(500, {"error": "internal error, retry"}).to_event()
