"""notify λ: a channel's callback → verify, store raw, enqueue, ACK. Lean imports: this runs on WeChat's 5 s clock."""

from tally import bootstrap
from tally.apigw import BadRequest, HttpRequest, HttpResponse
from tally.observability import M, count, logger, metrics

ROUTES = {"/notify/wechatpay/": "wechatpay_v3"}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    try:
        request = HttpRequest.from_event(event)
    except BadRequest as exc:
        count(M.NOTIFY_REJECTED)
        logger.warning("unusable notify event", extra={"reason": str(exc)})
        return HttpResponse(400, '{"code":"FAIL","message":"bad request"}').to_event()
    service = bootstrap.ingest_service()
    for prefix, method in ROUTES.items():
        if request.path.startswith(prefix):
            return getattr(service, method)(request).to_event()
    count(M.NOTIFY_REJECTED)
    return HttpResponse(404, '{"code":"FAIL","message":"unknown channel"}').to_event()
