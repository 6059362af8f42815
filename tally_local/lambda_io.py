"""What Lambda's surroundings produce and consume locally: API Gateway payload-2.0 events in, and the
Powertools EMF metric lines out. One builder and the EMF readers for the stack, the demo and the tests."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any


def http_event(
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    path_params: dict[str, str],
    *,
    route: str | None = None,
    base64_body: bool = True,
    request_id: str | None = None,
    time_ms: int | None = None,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """An HTTP API payload-2.0 event, as API Gateway hands it to a function. Without `route` the routeKey is
    the path with each path parameter's value put back as `{name}` (what API Gateway matched)."""
    route_key = f"{method} {route or route_of(path, path_params)}"
    context: dict[str, Any] = {
        "http": {
            "method": method,
            "path": path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": "Mozilla/4.0",
        },
        "requestId": request_id or str(uuid.uuid4()),
        "routeKey": route_key,
        "stage": "$default",
    }
    if time_ms is not None:
        context["timeEpoch"] = time_ms
    return {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": "",
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": context,
        "pathParameters": path_params,
        "body": base64.b64encode(body).decode() if base64_body else body.decode(),
        "isBase64Encoded": base64_body,
    }


def route_of(path: str, path_params: dict[str, str]) -> str:
    """`/orders/1900000109/T1` with {"mchid": "1900000109", "out_trade_no": "T1"} → `/orders/{mchid}/{out_trade_no}`."""
    names = {value: name for name, value in reversed(list(path_params.items()))}
    return "/".join(f"{{{names[s]}}}" if s in names and s else s for s in path.split("/"))


def emf_metrics(text: str) -> Iterator[tuple[str, int | float]]:
    """(name, value) for every metric in the EMF lines of `text` (values of one flush are summed)."""
    for line in text.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                for metric in directive["Metrics"]:
                    value = blob[metric["Name"]]
                    yield metric["Name"], sum(value) if isinstance(value, list) else value


def emf_series(text: str) -> Iterator[tuple[str, int | float, dict[str, str]]]:
    """(name, value, dimensions) for every series CloudWatch would update from the EMF lines of `text`:
    one per metric and dimension set of a blob (a blob with 3 dimension sets updates 3 series)."""
    for line in text.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                for names in directive["Dimensions"]:
                    dims = {name: blob[name] for name in names}
                    for metric in directive["Metrics"]:
                        value = blob[metric["Name"]]
                        yield metric["Name"], sum(value) if isinstance(value, list) else value, dims
