"""Domain rules with no AWS: money (R14), the transit table (R16, R17, R19, R24), entry checks (R12, R13)."""

import ast
import pathlib

import pytest
from tally.domain.money import MoneyError, cents, format_cents, yuan_to_cents
from tally.domain.notifications import OrderFacts, PaymentNotice, mismatches
from tally.domain.orders import TRANSIT, Event, Status, Verdict, transit

ROOT = pathlib.Path(__file__).resolve().parents[2]


def notice(**over):
    base = dict(
        channel="wechatpay",
        transaction_id="4200000001",
        out_trade_no="ORDER0001",
        mchid="1900000001",
        sp_mchid=None,
        trade_state="SUCCESS",
        order_total_cent=100,
        paid_cent=100,
        currency="CNY",
        success_time="2026-11-30T10:00:00+08:00",
    )
    base.update(over)
    return PaymentNotice(**base)


def facts(**over):
    base = dict(
        mchid="1900000001",
        sp_mchid=None,
        currency="CNY",
        amount_cent=100,
        status=Status.WAIT_PAY,
        transaction_id=None,
    )
    base.update(over)
    return OrderFacts(**base)


class TestMoneyR14:
    def test_R14_yuan_strings_convert_exactly(self):
        assert yuan_to_cents("0.01") == 1
        assert yuan_to_cents("12.30") == 1230
        assert yuan_to_cents("19.99") == 1999  # float(19.99)*100 == 1998.9999999999998
        assert yuan_to_cents("-0.04") == -4

    @pytest.mark.parametrize("bad", ["1.005", "1e2", "abc", "", "1,00", " ", "0.1.1"])
    def test_R14_inexact_or_garbage_yuan_is_refused(self, bad):
        with pytest.raises(MoneyError):
            yuan_to_cents(bad)

    @pytest.mark.parametrize("bad", [1.0, "100", True, None, 99.99])
    def test_R14_cents_must_be_integers_never_floats(self, bad):
        with pytest.raises(MoneyError):
            cents(bad)

    def test_format_cents(self):
        assert format_cents(1230) == "12.30"
        assert format_cents(-5) == "-0.05"

    def test_a_stored_amount_not_known_is_said_as_the_caller_asks(self):
        from tally.domain.money import format_stored

        assert format_stored(1230) == "12.30" and format_stored("-5") == "-0.05"
        assert format_stored(None) == "" and format_stored(None, "-") == "-"


class TestTransitR17:
    def test_R17_pay_on_waiting_order_is_ok(self):
        decision = transit(Status.WAIT_PAY, Event.PAY, "tx1", None)
        assert decision.verdict is Verdict.OK and decision.new_status is Status.PAID

    def test_R17_same_voucher_again_is_duplicate(self):
        assert transit(Status.PAID, Event.PAY, "tx1", "tx1").verdict is Verdict.DUPLICATE

    def test_R17_second_transaction_on_paid_order_is_illegal_double_payment(self):
        decision = transit(Status.PAID, Event.PAY, "tx2", "tx1")
        assert decision.verdict is Verdict.ILLEGAL and decision.needs_refund_task
        assert "double payment" in decision.reason

    def test_R17_paid_after_close_is_illegal_and_needs_refund_task(self):
        decision = transit(Status.CLOSED, Event.PAY, "tx1", None)
        assert decision.verdict is Verdict.ILLEGAL and decision.needs_refund_task

    def test_R24_paid_order_never_moves_back(self):
        for event in (Event.CLOSE, Event.REVOKE, Event.PAY_ERROR):
            decision = transit(Status.PAID, event, "tx9", "tx1")
            assert decision.verdict is Verdict.ILLEGAL and not decision.needs_refund_task

    def test_R16_table_is_explicit_and_paid_is_terminal_for_every_event(self):
        assert not [k for k in TRANSIT if k[0] is Status.PAID]
        assert all(isinstance(s, Status) and isinstance(e, Event) for s, e in TRANSIT)


class TestEntryCheckR12R13:
    def test_R12_matching_notice_has_no_mismatch(self):
        assert mismatches(notice(), facts()) == []

    @pytest.mark.parametrize(
        "field,value",
        [("order_total_cent", 1), ("currency", "USD"), ("mchid", "1900000002"), ("sp_mchid", "1600000001")],
    )
    def test_R12_merchant_currency_amount_mismatch_is_found(self, field, value):
        assert mismatches(notice(**{field: value}), facts())

    def test_R13_coupon_reduced_payer_amount_is_not_a_mismatch(self):
        # The order amount is compared; the payer amount (after a coupon) is what gets booked.
        assert mismatches(notice(order_total_cent=100, paid_cent=80), facts()) == []

    def test_R13_payer_amount_above_order_amount_is_a_mismatch(self):
        assert mismatches(notice(paid_cent=101), facts())


def test_domain_imports_nothing_impure():
    """DESIGN §2 dependency rule: domain → stdlib only; service never imported by domain or store."""
    allowed_roots = {
        "__future__",
        "dataclasses",
        "decimal",
        "enum",
        "re",
        "typing",
        "collections",
        "datetime",
        "tally",
        "array",
        "csv",
        "io",
        "json",
        "contextvars",
        "hashlib",
        "ipaddress",
    }  # ipaddress: which addresses a webhook may reach (webhooks.py, parsing text, no lookup); hashlib: a bill layout's fingerprint (bill_layout.py, a digest of text); array: recon's compact bill index; contextvars: its partitioned path's watcher (no I/O); csv+io: the statement's CSV text in a StringIO; json: Alipay's
    # fund_bill_list arrives as a JSON string inside the form (parsing text, no file, no network)
    for path in (ROOT / "layers/common/tally/domain").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed_roots, f"{path.name} imports {name}"
                if name.startswith("tally."):
                    assert name.startswith("tally.domain"), f"{path.name} imports {name}"
    for layer in ("domain", "store", "channels"):
        for path in (ROOT / "layers/common/tally" / layer).glob("*.py"):
            assert "tally.service" not in path.read_text(), f"{layer}/{path.name} depends on service"
