"""notify λ: a channel's callback → verify, store raw, enqueue, ACK. Lean imports: this runs on WeChat's 5 s clock."""

import importlib

from tally import bootstrap
from tally.apigw import BadRequest, HttpRequest, route_key
from tally.channels import registry
from tally.observability import M, count, lean_lambda_context, logger, metrics
from tally.service.ingest import failure_for_path


def _notify_steps():
    """Every channel's notify step (channels/<name>/notify.py and its wire module: cryptography), imported at
    init: the registry then finds it in sys.modules on the first callback."""
    for channel in registry.all_channels():
        importlib.import_module(f"tally.channels.{channel.name}.notify")


# clients, services and the channels' verify code built and imported at init, not in the first callback
bootstrap.at_init(bootstrap.ingest_service, _notify_steps)


@lean_lambda_context  # inject_lambda_context(clear_state=True)'s keys at a quarter of its CPU
@metrics.log_metrics
def handler(event, context):
    path = str((event or {}).get("rawPath") or "")[:200]
    try:
        return _route(event)
    except Exception as exc:  # noqa: BLE001 - R40: no input answers 500 without a metric and an alarm
        count(M.NOTIFY_FAILED)
        logger.exception("notify failed", extra={"path": path, "error": type(exc).__name__})
        route = route_key(event).partition(" ")[2] if isinstance(event, dict) else ""
        return failure_for_path(route or path, 500, "not stored, retry").to_event()  # the route's ACK format


def _route(event):
    try:
        request = HttpRequest.from_event(event)
    except BadRequest as exc:
        count(M.NOTIFY_REJECTED)
        logger.warning("unusable notify event", extra={"reason": str(exc)})
        return failure_for_path(route_key(event).partition(" ")[2], 400, "bad request").to_event()
    # by routeKey, as in template.yaml (never rawPath: a custom domain's path mapping prefixes it)
    channel = registry.for_notify(request.route, request.path_params)
    if channel is not None:
        return bootstrap.ingest_service().notify(channel, request).to_event()
    count(M.NOTIFY_REJECTED)
    return failure_for_path(request.route.partition(" ")[2], 404, "unknown channel").to_event()
