"""One error tree (tally/errors.py) mapped to HTTP once (tally/apigw.answer), issue #19 item 4."""

from __future__ import annotations

import ast
import importlib
import json
import pathlib

import pytest
from tally import errors
from tally.apigw import BadRequest, HttpResponse, answer
from tally.channels.alipay import bills as ali_bills
from tally.channels.alipay import wire as ali
from tally.channels.retry import with_retries
from tally.channels.wechatpay_v2 import refunds as wx2r
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v3 import wire as wx
from tally.console.actions import ActionRefused
from tally.domain.refunds import ExceedsRefundable
from tally.service import orders, refunds, story
from tally.service.apply import RetryLater
from tally.service.manual import ManualError
from tally.service.merchants import UnknownMerchant
from tally.service.queue import QueueError
from tally.service.recon import ReconError
from tally.service.recon_sources import DownloadFailed

from tally_cli.common import UsageError

ROOT = pathlib.Path(__file__).resolve().parents[2]

TREE = {
    errors.InvalidRequest: [
        BadRequest,
        orders.InvalidOrder,
        refunds.InvalidRefund,
        ali.FormError,
        wx2.XmlError,
        QueueError,
        UsageError,
    ],
    errors.NotFound: [orders.NotFound, refunds.NotFound, story.NotFound, UnknownMerchant],
    errors.Conflict: [
        orders.OrderConflict,
        refunds.RefundConflict,
        ExceedsRefundable,
        ManualError,
        ReconError,
        ActionRefused,
    ],
    errors.Busy: [refunds.Busy],
    errors.RetryLater: [RetryLater],
    errors.ChannelError: [
        wx.WeChatCallError,
        wx2.WeChatV2CallError,
        wx2r.V2ChannelError,
        ali.AlipayCallError,
        ali.TradeNotExist,
        ali_bills.AlipayError,
        DownloadFailed,
        orders.PrepayFailed,
    ],
    errors.SignatureError: [wx.WeChatSignatureError, wx2.SignatureError, ali.SignatureError],
    errors.ParseError: [wx.DecryptError, wx2.ParseError, ali.ParseError],
}


@pytest.mark.parametrize("node", list(TREE), ids=lambda c: c.__name__)
def test_every_module_error_sits_under_its_node_of_the_one_tree(node):
    assert issubclass(node, errors.TallyError)
    for cls in TREE[node]:
        assert issubclass(cls, node), f"{cls.__module__}.{cls.__name__} is not a {node.__name__}"


def test_builtin_bases_are_kept_for_callers_that_catch_them():
    assert issubclass(orders.InvalidOrder, ValueError) and issubclass(BadRequest, ValueError)
    assert issubclass(orders.NotFound, LookupError) and issubclass(UnknownMerchant, LookupError)
    assert issubclass(refunds.Busy, RuntimeError) and issubclass(ExceedsRefundable, ValueError)
    for person_facing in (QueueError, ManualError, ReconError, ActionRefused, UsageError):
        assert issubclass(person_facing, ValueError), person_facing  # console / CLI catch ValueError


def test_the_two_outcome_enums_say_which_transaction_they_report():
    from tally.service.apply import PaymentApplied
    from tally.service.refunds import RefundApplied

    assert PaymentApplied.BOOKED.value == "BOOKED" and RefundApplied.FORGED.value == "FORGED"
    assert not hasattr(refunds, "Applied")  # one name per outcome, no alias


def test_signature_errors_keep_their_reason_and_v3_its_probe_flag():
    err = wx.WeChatSignatureError("bad", probe=True, unknown_serial="S1")
    assert (err.reason, err.probe, err.unknown_serial, err.code) == ("bad", True, "S1", "signature")
    assert ali.SignatureError("no sign").reason == "no sign" == str(ali.SignatureError("no sign"))


def test_retryable_is_an_attribute_of_the_tree_and_only_the_tree_is_retried():
    assert errors.Busy().retryable and errors.RetryLater().retryable and not errors.NotFound().retryable
    assert wx.WeChatCallError("x", retryable=True).retryable and not wx.WeChatCallError("x").retryable
    calls = []

    def foreign():  # an exception outside the tree that happens to carry the attribute: a bug, not retried
        calls.append(1)
        err = RuntimeError("bug")
        err.retryable = True  # type: ignore[attr-defined]
        raise err

    with pytest.raises(RuntimeError):
        with_retries(foreign, attempts=3, sleep=lambda s: None)
    assert len(calls) == 1


def test_channel_errors_keep_the_channels_own_code():
    assert wx.WeChatCallError("x", status=400, code="PARAM_ERROR").code == "PARAM_ERROR"
    assert wx.WeChatCallError("x", status=503).word == "HTTP_5XX"  # no code from WeChat: a local pseudo-code
    assert (
        ali.AlipayCallError("x", code="40004", sub_code="ACQ.TRADE_NOT_EXIST").sub_code
        == "ACQ.TRADE_NOT_EXIST"
    )


def _status_body(event):
    return event["statusCode"], json.loads(event["body"])


@pytest.mark.parametrize(
    ("exc", "status", "code", "fields"),
    [
        (orders.InvalidOrder("amount_cent must be an integer"), 400, "invalid_request", []),
        (BadRequest("body is not JSON"), 400, "invalid_request", [("body", "not_json")]),
        (refunds.NotFound("no refund R1", code="refund_not_found"), 404, "refund_not_found", []),
        (
            orders.OrderConflict("DEMO1 exists with other terms", "amount_cent"),
            409,
            "order_terms_differ",
            [("amount_cent", "differs")],
        ),
        (refunds.Busy("contention"), 503, "busy", []),
    ],
)
def test_apigw_answer_maps_the_tree_to_http_once_in_one_shape(exc, status, code, fields):
    """docs/errors.md: one body, a stable machine code, the message, every field at fault."""

    def raises():
        raise exc

    got_status, body = _status_body(answer(raises, what="t"))
    assert got_status == status and set(body) == {"error"}
    assert (body["error"]["code"], body["error"]["message"]) == (code, str(exc))
    assert [(e["field"], e["code"]) for e in body["error"]["errors"]] == fields


def test_apigw_answer_keeps_the_rich_bodies():
    order = {"mchid": "1900000109", "out_trade_no": "DEMO000001"}

    def prepay():
        raise orders.PrepayFailed(order, "HTTP 500 SYSTEM_ERROR")

    assert _status_body(answer(prepay, what="t")) == (
        502,
        {
            "error": {
                "code": "prepay_failed",
                "message": "prepay failed: HTTP 500 SYSTEM_ERROR",
                "errors": [],
                "order": order,
            }
        },
    )

    def exceeds():
        raise ExceedsRefundable(101, 100)

    status, body = _status_body(answer(exceeds, what="t"))
    error = body["error"]
    assert status == 409 and error["refundable_cent"] == 100 and error["amount_cent"] == 101
    assert (
        error["code"] == "exceeds_refundable"
        and error["message"] == "amount 1.01 yuan exceeds refundable 1.00 yuan"
    )


def test_apigw_answer_counts_everything_else_as_a_500(monkeypatch):
    counted = []
    monkeypatch.setattr("tally.apigw.count", lambda name, **kw: counted.append(name))

    def bug():
        raise KeyError("mchid")

    def channel():  # a TallyError with no HTTP meaning is not an answer either
        raise wx.WeChatCallError("HTTP 500", status=500, retryable=True)

    assert _status_body(answer(bug, what="t", retry_hint="retry")) == (
        500,
        {"error": {"code": "internal_error", "message": "retry", "errors": []}},
    )
    assert _status_body(answer(channel, what="t"))[0] == 500
    assert counted == ["ApiFailed", "ApiFailed"]
    assert answer(lambda: HttpResponse(204), what="t")["statusCode"] == 204


def _handlers():
    return sorted((ROOT / "functions").glob("*/app.py"))


# notify answers in each channel's own ACK format (text/xml, text/plain, JSON), chosen by the route
# (service/ingest.failure_for_path), not with the API's JSON errors: its one `except BadRequest` is that.
NOT_JSON_API = {"notify"}


def _caught(handler: ast.ExceptHandler) -> list[str]:
    if handler.type is None:
        return []
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [t.id if isinstance(t, ast.Name) else ast.unparse(t) for t in types]


def test_no_handler_maps_errors_to_http_itself():
    """A handler that catches an error with an HTTP meaning, or answers an error status itself, maps errors
    again: that is tally.apigw.answer's job."""
    checked = 0
    for path in _handlers():
        name = path.parent.name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = importlib.import_module(f"functions.{name}.app")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "json_response" and node.args:
                status = node.args[0]
                assert not (isinstance(status, ast.Constant) and int(status.value) >= 400), (
                    f"{path.relative_to(ROOT)}:{node.lineno} answers {status.value} itself"
                )
            if isinstance(node, ast.ExceptHandler) and name not in NOT_JSON_API:
                for caught in _caught(node):
                    cls = getattr(module, caught, None)
                    http = isinstance(cls, type) and issubclass(cls, errors.TallyError) and cls.http_status
                    assert not http, f"{path.relative_to(ROOT)}:{node.lineno} maps {caught} to HTTP itself"
        checked += 1
    assert checked >= 8
