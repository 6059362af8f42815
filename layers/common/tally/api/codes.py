"""Every error code the merchant's API answers, with its HTTP status, what it means and what the caller does:
the source of docs/errors.md and of the `code` enum in docs/openapi.json (`make openapi`). The codes are
raised in tally/errors.py, tally/apigw.py and the services; tests/unit/test_api_reference.py checks that
each one raised there is listed here. No pydantic here: this table is plain data."""

from __future__ import annotations

from typing import NamedTuple


class Code(NamedTuple):
    status: int
    means: str
    then: str  # what the caller does


ERROR_CODES: dict[str, Code] = {
    "invalid_request": Code(
        400,
        "The body or a field is wrong: `errors` lists every field at fault at once (`body` when the body "
        "itself is unusable: not JSON, over 16 KiB, nested deeper than 8 levels).",
        "Fix every listed field and send again. Not retryable as is.",
    ),
    "forbidden": Code(
        403,
        "The request is not signed by an IAM principal, or the signed principal may not act for the merchant "
        "it names (R53, `tally merchant allow`).",
        "Sign with SigV4 (service `execute-api`) as a principal registered for that merchant.",
    ),
    "order_not_found": Code(
        404,
        "No such order for this merchant (`mchid`, `out_trade_no`).",
        "Check both; create the order first. Another merchant's orders are never found.",
    ),
    "refund_not_found": Code(
        404,
        "No such refund for this merchant (or, without `?mchid=`, the number is used by several merchants).",
        "Check `refund_no`; pass `?mchid=` with your merchant id.",
    ),
    "merchant_not_found": Code(
        404,
        "The merchant is not configured on this channel (or is not a sub-merchant of the combine merchant).",
        "Have an operator add it (`tally merchant add`), or correct `mchid` / `channel`.",
    ),
    "not_found": Code(
        404,
        "Something else the request names does not exist (the generic 404; the three above are the usual).",
        "Read `message`; check the identifiers.",
    ),
    "order_terms_differ": Code(
        409,
        "The `out_trade_no` exists with other terms; `errors[0].field` names the first term that differs "
        "(amount_cent, currency, description, expire_minutes, prepay, channel, combine_out_trade_no).",
        "Re-post the stored terms (a retry answers 200 with the order), or use a new `out_trade_no`.",
    ),
    "refund_terms_differ": Code(
        409,
        "The `refund_no` exists for another order or amount; `errors[0].field` names it (out_trade_no or "
        "amount_cent).",
        "Re-post the stored terms (a retry answers 200 with the refund), or use a new `refund_no`.",
    ),
    "refund_no_spent": Code(
        409,
        "The refund with this `refund_no` failed at the channel; a failed number is never sent again (R29).",
        "Refund again with a new `refund_no`.",
    ),
    "order_not_paid": Code(
        409,
        "The order is not PAID (waiting, closed or failed): only a paid order is refunded.",
        "Wait until GET /orders shows PAID; nothing was reserved.",
    ),
    "exceeds_refundable": Code(
        409,
        "The amount is more than is left to refund (paid − refunded − in flight, R27); the body carries "
        "`refundable_cent` and `amount_cent`.",
        "Refund at most `refundable_cent`, or wait for in-flight refunds to end.",
    ),
    "merchant_not_ready": Code(
        409,
        "The merchant's credentials failed the live check with its channel (R47): it takes no order.",
        "Have an operator fix the credentials and run `tally merchant check --live`.",
    ),
    "conflict": Code(
        409,
        "The request cannot be done as asked (e.g. refunds are not wired for the order's channel).",
        "Read `message`; not retryable as is.",
    ),
    "internal_error": Code(
        500,
        "Tally failed (counted and alarmed, R40).",
        "Retry the same request: orders and refunds are idempotent on `out_trade_no` / `refund_no`.",
    ),
    "prepay_failed": Code(
        502,
        "The order is stored but the channel's prepay failed; the body carries the stored `order`.",
        "Re-post the same order later: the prepay is tried again for a waiting order.",
    ),
    "busy": Code(
        503,
        "Contention on the order did not settle in time.",
        "Retry the same request (the same `refund_no`); nothing is doubled.",
    ),
}

# the `code` of each entry of `errors` (a field at fault)
FIELD_CODES: dict[str, str] = {
    "missing": "a required field is absent",
    "wrong_type": "the value has the wrong JSON type (a string for a number, a decimal for cents, …)",
    "bad_format": "the text does not match the field's pattern (allowed characters, length)",
    "bad_length": "the text or list is too short or too long",
    "out_of_range": "the number is outside the allowed range (cents from 1 to 100000000000)",
    "not_allowed": "the value is not one of the allowed values",
    "unknown_field": "the API has no such field (a misspelling?): nothing was done",
    "differs": "on a 409: the term differs from the stored order or refund",
    "exceeds_refundable": "on a 409: the amount is more than is left to refund",
    "too_large": "the body is over 16 KiB",
    "too_deep": "the body nests deeper than 8 levels",
    "not_json": "the body is not a JSON object",
    "not_encoded": "the body is not valid UTF-8 / base64",
    "invalid": "any other check of the field failed (`message` says which)",
}
