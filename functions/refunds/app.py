"""refunds λ: POST /refunds (create, R26–R28) and GET /refunds/{refund_no}. IAM-authorised in template.yaml.

`scheduled` is the poller's entry (poll_due + work_tasks); the poller handler calls the same two methods.
"""

from tally import bootstrap
from tally.apigw import BadRequest, HttpRequest, json_response
from tally.domain.refunds import ExceedsRefundable
from tally.observability import M, count, logger, metrics
from tally.service.refunds import Busy, InvalidRefund, NotFound, RefundConflict


@metrics.log_metrics
def handler(event, context):
    service = bootstrap.refund_service()
    try:
        request = HttpRequest.from_event(event)
        if request.method == "POST":
            refund, created = service.create(request.json())
            return json_response(201 if created else 200, refund).to_event()
        # `?mchid=` (the caller's merchant): another tenant's refund number is then simply not found (R39)
        refund_no = request.path_params["refund_no"]
        return json_response(200, service.show(refund_no, request.query.get("mchid"))).to_event()
    except (BadRequest, InvalidRefund) as exc:
        return json_response(400, {"error": str(exc)}).to_event()
    except ExceedsRefundable as exc:
        return json_response(
            409,
            {
                "error": f"exceeds refundable: {exc}",
                "refundable_cent": exc.refundable_cent,
                "amount_cent": exc.amount_cent,
            },
        ).to_event()
    except RefundConflict as exc:
        return json_response(409, {"error": str(exc)}).to_event()
    except NotFound as exc:
        return json_response(404, {"error": str(exc)}).to_event()
    except Busy as exc:
        return json_response(503, {"error": str(exc)}).to_event()
    except Exception as exc:  # noqa: BLE001 - R40: no input answers 500 without a metric and an alarm
        count(M.API_FAILED)
        logger.exception("refunds request failed", extra={"error": type(exc).__name__})
        return json_response(500, {"error": "internal error, retry with the same refund_no"}).to_event()


@metrics.log_metrics
def scheduled(event, context):
    """Test-invokable poller entry: `{"limit": 50}` → what poll_due and work_tasks did."""
    limit = int((event or {}).get("limit", 50))
    service = bootstrap.refund_service()
    return {"poll_due": service.poll_due(limit), "work_tasks": service.work_tasks(limit)}
