"""API Gateway's IAM authorizer, locally: a route with `Authorizer: AWS_IAM` takes only requests signed with
SigV4 (service `execute-api`) by a key this stack knows, as AWS does: a missing, malformed, stale or wrong
signature is 403 `{"message":"Forbidden"}` and the function never runs. A verified caller reaches the function
as `requestContext.authorizer.iam` (its `userArn` is what R53 checks: service/callers.py).

The signature is recomputed with botocore's SigV4 signer (the reference implementation the AWS SDKs share)
over exactly the headers the caller signed, the path and query as sent and the body's SHA-256."""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tally_local.lambda_io import iam_context

LOCAL_ACCOUNT = "123456789012"
LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY = "testing", "testing"  # the stack's fake credentials (FAKE_CREDENTIALS)
LOCAL_BACKEND_ARN = f"arn:aws:iam::{LOCAL_ACCOUNT}:user/tally-local-backend"
MAX_SKEW_S = 300  # API Gateway refuses a signature more than 5 minutes from its clock ("Signature expired")

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/(?P<service>[^/,\s]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;_.-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class LocalIdentity:
    access_key: str
    secret_key: str
    user_arn: str


@dataclass
class IamAuthorizer:
    region: str
    identities: dict[str, LocalIdentity] = field(default_factory=dict)

    def add(self, access_key: str, secret_key: str, user_arn: str) -> None:
        self.identities[access_key] = LocalIdentity(access_key, secret_key, user_arn)

    def verify(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> str | None:
        """The verified caller's ARN, or None (then the answer is 403)."""
        parsed = _AUTHORIZATION.match(headers.get("authorization", ""))
        amz_date = headers.get("x-amz-date", "")
        if parsed is None or parsed["service"] != "execute-api" or parsed["region"] != self.region:
            return None
        identity = self.identities.get(parsed["key"])
        signed = parsed["signed"].split(";")
        if identity is None or "host" not in signed or not amz_date.startswith(parsed["date"]):
            return None
        try:
            when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            return None
        if abs((datetime.now(UTC) - when).total_seconds()) > MAX_SKEW_S:
            return None
        if any(name not in headers for name in signed):
            return None
        url = f"http://{headers['host']}{path}" + (f"?{query}" if query else "")
        request = AWSRequest(method=method, url=url, data=body, headers={n: headers[n] for n in signed})
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(
            Credentials(identity.access_key, identity.secret_key, headers.get("x-amz-security-token")),
            "execute-api",
            self.region,
        )
        expected = signer.signature(
            signer.string_to_sign(request, signer.canonical_request(request)), request
        )
        if not hmac.compare_digest(expected, parsed["signature"]):
            return None
        return identity.user_arn

    def authorize(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Any:
        """`requestContext.authorizer` for a verified caller, or None."""
        arn = self.verify(method, path, query, headers, body)
        if arn is None:
            return None
        access_key = _AUTHORIZATION.match(headers["authorization"])["key"]  # type: ignore[index]
        return {"iam": iam_context(arn, access_key)}


def local_authorizer(region: str) -> IamAuthorizer:
    """The stack's IAM authorizer, knowing the fake credentials every local tool signs with."""
    authorizer = IamAuthorizer(region)
    authorizer.add(LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY, LOCAL_BACKEND_ARN)
    return authorizer


def signed_headers(
    method: str,
    url: str,
    data: bytes | None,
    headers: dict[str, str],
    *,
    region: str = "us-east-1",
    access_key: str = LOCAL_ACCESS_KEY,
    secret_key: str = LOCAL_SECRET_KEY,
) -> dict[str, str]:
    """`headers` plus the SigV4 ones for the local API (what examples/signed_call.py does against AWS)."""
    request = AWSRequest(method=method, url=url, data=data, headers=dict(headers))
    SigV4Auth(Credentials(access_key, secret_key), "execute-api", region).add_auth(request)
    return dict(request.headers.items())
