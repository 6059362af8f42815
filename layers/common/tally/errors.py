"""One error tree for the whole layer (issue #19 item 4).

Every exception Tally raises on purpose is a `TallyError`: `code` is a short machine word for what went
wrong, `retryable` says whether the same call may succeed later (channels/retry.py retries only those), and
`http_status` is the answer an API handler gives for it (None: not an answer; a handler that meets it
answers 500, counts ApiFailed and logs it, R40). `tally.apigw.answer` is the one place that turns these
into HTTP; handlers never map exceptions themselves (tests/unit/test_errors.py).

    TallyError
    ├── InvalidRequest   400  the request is wrong (bad JSON, a field out of range)
    ├── Forbidden        403  the signed caller may not act for that merchant (R53)
    ├── NotFound         404  no such order / refund / merchant
    ├── Conflict         409  exists with other terms, or cannot be done as asked
    ├── Busy             503  contention did not settle: retry the same request (retryable)
    ├── RetryLater       -    not applicable yet: leave it for the queue's redelivery (retryable)
    ├── ChannelError     -    a channel call failed (`retryable` per answer; a channel's own code)
    ├── SignatureError   -    not proven to come from the channel (R4): the notify ACK formats answer it
    └── ParseError       -    signed or trusted but unusable (R5)

A module's own exception keeps its name and subclasses the node that says what it is (and, where callers
catch it by a builtin, that builtin too: `class InvalidOrder(InvalidRequest, ValueError)`).
"""

from __future__ import annotations

from typing import Any


class TallyError(Exception):
    """The root: `code`, `retryable`, and the HTTP answer (`http_status`, `payload`).

    An answer's body is always `{"error": {"code", "message", "errors": [{"field", "code", "message"}], …}}`
    (docs/errors.md): `code` is the stable machine word (a raise may name a narrower one than its class,
    `NotFound(…, code="order_not_found")`), `errors` every field at fault (empty when none is), and a
    subclass adds what the caller needs (`details`: the refundable amount, the stored order)."""

    code: str = "error"
    retryable: bool = False
    http_status: int | None = None  # None: not an answer a caller may see (500 + ApiFailed)
    fields: tuple[dict[str, str], ...] = ()

    def __init__(
        self,
        message: str = "",
        *,
        retryable: bool | None = None,
        code: str | None = None,
        fields: tuple[dict[str, str], ...] | list[dict[str, str]] = (),
    ):
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        if code is not None:
            self.code = code
        if fields:
            self.fields = tuple(fields)

    def details(self) -> dict[str, Any]:
        """What a subclass adds to the error object beside code, message and errors."""
        return {}

    def payload(self) -> dict[str, Any]:
        """The JSON body of the HTTP answer."""
        return error_body(self.code, str(self), list(self.fields), **self.details())


def error_body(
    code: str, message: str, fields: list[dict[str, str]] | None = None, **details: Any
) -> dict[str, Any]:
    """The one error shape every API answer uses (docs/errors.md)."""
    return {"error": {"code": code, "message": message, "errors": list(fields or []), **details}}


def field_error(field: str, code: str, message: str) -> dict[str, str]:
    return {"field": field, "code": code, "message": message}


class InvalidRequest(TallyError):
    code = "invalid_request"
    http_status = 400


class Forbidden(TallyError, PermissionError):
    code = "forbidden"
    http_status = 403


class NotFound(TallyError, LookupError):
    code = "not_found"
    http_status = 404


class Conflict(TallyError):
    code = "conflict"
    http_status = 409


class Busy(TallyError, RuntimeError):
    """Contention did not settle: retry the same request (HTTP 503)."""

    code = "busy"
    retryable = True
    http_status = 503


class RetryLater(TallyError):
    """Not applicable yet (order not found, contention): leave handled=0 and let SQS redeliver."""

    code = "retry_later"
    retryable = True


class ChannelError(TallyError):
    """A channel call failed. Channel modules subclass it; their `code` is the channel's own code."""

    code = "channel_error"


class SignatureError(TallyError):
    """Not proven to come from the channel (R4). `reason` is for a person; `cause`, one of REJECTION_CAUSES, is
    what the work queue groups a kept rejection by (R40), named by the channel's code where it refuses."""

    code = "signature"

    def __init__(self, reason: str, *, cause: str = "bad_signature"):
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


REJECTION_CAUSES = (
    "missing_signature",  # the signature (or a header it needs) is not there
    "stale_timestamp",  # signed outside the channel's time window
    "unknown_serial",  # signed with a key id the merchant's keys do not hold
    "unsupported_sign_type",  # a signature scheme Tally refuses
    "undecryptable",  # a signed part that does not decrypt with the merchant's key
    "bad_signature",  # the signature does not verify
    "too_large",  # refused before any check: over the body limit
    "unknown_merchant",  # no merchant of that id is configured
    "unparseable",  # not a message of the channel's format at all
)


class ParseError(TallyError):
    """Trusted (signed) but unusable: not retryable (R5)."""

    code = "parse"


def is_retryable(exc: BaseException) -> bool:
    """True only for a TallyError that says so: anything else (a bug, a KeyError) is never retried."""
    return isinstance(exc, TallyError) and exc.retryable
