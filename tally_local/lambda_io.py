"""What Lambda's surroundings produce and consume locally: API Gateway payload-2.0 events in, and the
Powertools EMF metric lines out. One builder and the EMF readers for the stack, the demo and the tests. And
Lambda's own Invoke for the functions a state machine calls (`invoke_route`)."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

INVOKE_ROUTE = "POST /_local/lambda/{function}"
log = logging.getLogger(__name__)


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
    caller: str | None = None,
) -> dict[str, Any]:
    """An HTTP API payload-2.0 event, as API Gateway hands it to a function. Without `route` the routeKey is
    the path with each path parameter's value put back as `{name}` (what API Gateway matched). `caller`: the
    IAM principal (ARN) API Gateway's IAM authorizer verified, as `requestContext.authorizer.iam`."""
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
    if caller is not None:
        context["authorizer"] = {"iam": iam_context(caller)}
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


def iam_context(user_arn: str, access_key: str = "ASIALOCALCALLER00000") -> dict[str, Any]:
    """`requestContext.authorizer.iam` as API Gateway's IAM authorizer fills it for a verified SigV4 caller."""
    account = user_arn.split(":")[4] if user_arn.count(":") >= 5 else ""
    user_id = "AIDA" + account + user_arn.rsplit("/", 1)[-1].upper()[:8]
    return {
        "accessKey": access_key,
        "accountId": account,
        "callerId": user_id,
        "cognitoIdentity": None,
        "principalOrgId": None,
        "userArn": user_arn,
        "userId": user_id,
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


def invoke_route(invoke: dict[str, Callable[[dict[str, Any]], Any]]) -> Callable[[dict[str, Any], Any], Any]:
    """The front door's handler for INVOKE_ROUTE: Lambda's Invoke for the functions in `invoke` ({logical id:
    the function's Target.invoke}, each its own warm container). moto's Lambda backend posts here
    (moto_fixes.local_lambda_invoke): the payload is the event; the handler's return value is the answer; a
    raised error answers as Lambda does, `{"errorMessage", "errorType"}` with X-Amz-Function-Error: Unhandled."""

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        name = event["pathParameters"]["function"]
        body = event.get("body") or ""
        raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
        target = invoke.get(name)
        if target is None:
            return {"statusCode": 404, "body": json.dumps({"message": f"no local function {name}"})}
        try:
            result = target(json.loads(raw or b"{}"))
        except Exception as exc:  # noqa: BLE001 - what Lambda reports as an unhandled function error
            log.warning("local invoke of %s failed: %s: %s", name, type(exc).__name__, exc)
            error = {"errorMessage": str(exc), "errorType": type(exc).__name__}
            return {
                "statusCode": 200,
                "headers": {"content-type": "application/json", "x-amz-function-error": "Unhandled"},
                "body": json.dumps(error),
            }
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json"},
            "body": json.dumps(result),
        }

    return handler
