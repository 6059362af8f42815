"""A merchant backend calling Tally's IAM-authorised API (POST /orders, GET /orders/…, POST /refunds …).

    pip install boto3
    TALLY_API_URL=https://abc123.execute-api.us-east-1.amazonaws.com/ python signed_call.py

The caller's credentials (its IAM role, with the stack output MerchantBackendPolicyArn attached, or a profile)
come from the usual boto3 chain. Requests are signed with SigV4 for the service `execute-api`; the body is
signed as sent, so send exactly the bytes that were signed.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from urllib.parse import urlsplit

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest


def signed_request(method: str, url: str, body: dict | None = None, *, session=None, region=None):
    """(url, headers, data) of a SigV4-signed request to the HTTP API."""
    session = session or boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise SystemExit(
            "no AWS credentials: give the backend's role (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; "
            "testing / testing for `make run`)"
        )
    region = region or session.region_name or urlsplit(url).hostname.split(".")[2]
    data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
    request = AWSRequest(method=method, url=url, data=data, headers={"content-type": "application/json"})
    SigV4Auth(credentials, "execute-api", region).add_auth(request)
    return request.url, dict(request.headers), data


def call(method: str, url: str, body: dict | None = None, **kwargs) -> tuple[int, dict]:
    target, headers, data = signed_request(method, url, body, **kwargs)
    req = urllib.request.Request(target, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:  # noqa: S310 - the stack's own API URL
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


if __name__ == "__main__":
    api = os.environ.get("TALLY_API_URL", "").rstrip("/")
    if not api:
        raise SystemExit("set TALLY_API_URL to the stack's API URL (make run: http://127.0.0.1:3000)")
    status, order = call(
        "POST",
        f"{api}/orders",
        {
            "mchid": "1900000109",
            "out_trade_no": "DEMO000001",
            "amount_cent": 1999,
            "description": "coffee",
            "prepay": True,
        },
    )
    print(status, json.dumps(order, ensure_ascii=False, indent=2))
    # 201 created, 200 the same order posted again (a retry). Any error is one body (docs/errors.md):
    # {"error": {"code": "invalid_request", "message": "…", "errors": [{"field", "code", "message"}, …]}}
    error = order.get("error")
    if isinstance(error, dict):
        print(f"error {error['code']}: {error['message']}", file=sys.stderr)
        for field in error["errors"]:
            print(f"  {field['field']}: {field['code']} ({field['message']})", file=sys.stderr)
    sys.exit(0 if status in (200, 201) else 1)
