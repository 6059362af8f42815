"""Alipay as a `Channel` (channels/registry.py): its spellings, tables, ACKs and pull."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from tally.channels.registry import ChannelNames, ChannelVariable
from tally.i18n import N_

if TYPE_CHECKING:
    from tally.channels.alipay.merchant import Desk
    from tally.channels.bill_source import Bill, BillSource
    from tally.channels.registry import PullClient, RefundClient
    from tally.domain.fundflow import FundFlowTerms
    from tally.domain.notifications import Outcome, PaymentNotice
    from tally.domain.refunds import RefundEvent


GATEWAY = ChannelVariable("ALIPAY_GATEWAY", "https://openapi.alipay.com/gateway.do")


def _desk(merchants: Any) -> Desk:
    """The merchant desk (merchant.py imports the wire module: imported on first use, not at cold start)."""
    from tally.channels.alipay.merchant import alipay_desk

    return alipay_desk(merchants)


@cache
def _fund_flow_terms() -> FundFlowTerms:
    """The fund flow by default (R45), built on first use (not at cold start) and then kept."""
    from tally.domain.fundflow import FundFlowTerms, SettlementLag

    # the money is in the merchant's Alipay balance at payment (账务明细 on T), one balance account
    return FundFlowTerms(
        SettlementLag(0, 0, 0, 0, "Alipay: funds enter the account balance at payment"),
        accounts=("ALIPAY",),
        default_accounts=("ALIPAY",),
    )


@dataclass(frozen=True)
class Alipay(ChannelNames):
    ack_content_type: str = "text/plain"

    def outcome_of(self, state: str) -> Outcome | None:
        from tally.channels.alipay.wire import TRADE_STATUS

        return TRADE_STATUS.get(state)

    def refund_event_of(self, status: str) -> RefundEvent | None:
        from tally.channels.alipay.refunds import REFUND_STATUS

        return REFUND_STATUS.get(status)

    def ack_success(self) -> tuple[int, str]:
        from tally.channels.alipay import wire

        return wire.ack_success()

    def ack_failure(self, status: int, message: str) -> tuple[int, str]:
        from tally.channels.alipay import wire

        return wire.ack_failure(status, message)

    def pull(self, merchants: Any, *, attempts: int, sleep: Callable[[float], None]) -> PullClient:
        from tally.channels.alipay.pull import AlipayPull

        return AlipayPull(merchants, attempts=attempts, sleep=sleep)

    def paid_by_transaction(
        self, merchants: Any, mchid: str, transaction_id: str
    ) -> tuple[PaymentNotice, bytes]:
        """alipay.trade.query by trade_no with the merchant's own app; a paid answer books receipt_amount (R13)."""
        import dataclasses
        import json

        from tally.channels.alipay import wire

        merchant = _desk(merchants).alipay(mchid)
        answer = _desk(merchants).alipay_client(merchant).trade_query(trade_no=transaction_id)
        notice = dataclasses.replace(
            wire.to_payment_notice({**answer, "app_id": merchant.sp_mchid or mchid, "auth_app_id": mchid}),
            source="recon",
        )
        return notice, json.dumps(answer, ensure_ascii=False).encode()

    def refund_client(
        self, merchants: Any, settings: Any, clock: Callable[[], float], merchant_id: str
    ) -> RefundClient:
        from tally.channels.alipay.refunds import AlipayRefunds

        merchant = _desk(merchants).alipay(merchant_id)
        return AlipayRefunds(
            _desk(merchants).alipay_client(merchant), mchid=merchant_id, sp_mchid=merchant.sp_mchid
        )

    def bill_source(self, merchants: Any) -> BillSource | None:
        from tally.channels.alipay.bills import AlipayBillSource

        return AlipayBillSource(merchants)

    def fund_flow_source(self, merchants: Any) -> Any:
        """账务明细 (`bill_type=signcustomer`, R45): channels/alipay/fundflow_source.py."""
        from tally.channels.alipay.fundflow_source import AlipayFundFlowSource

        return AlipayFundFlowSource(merchants)

    def open_fund_flow(self, data: bytes, account: str) -> Any:
        """A kept 账务明细 file (the zip's member as served; a whole zip dropped by hand is opened too)."""
        from tally.channels.alipay.bills import open_zip
        from tally.channels.alipay.fundflow import DETAIL_SUFFIX, SUMMARY_SUFFIX, AlipayFundFlowParser
        from tally.channels.bill_source import lines_of

        if data[:2] == b"PK":
            data = open_zip(data, DETAIL_SUFFIX, SUMMARY_SUFFIX).detail
        return AlipayFundFlowParser(lines_of(data))

    def open_bill(self, data: bytes) -> Bill | None:
        from tally.channels.alipay.bills import AlipayBill

        return AlipayBill(data)

    def merchant(self, merchants: Any, merchant_id: str) -> Any:
        return _desk(merchants).alipay(merchant_id)

    def fund_flow_terms(self) -> FundFlowTerms:
        return _fund_flow_terms()

    def prepay(
        self, merchants: Any, merchant: Any, order: dict[str, Any], *, expire_minutes: int, expire_s: float
    ) -> dict[str, str]:
        """alipay.trade.precreate → qr_code (the buyer scans it); it expires in `expire_minutes`."""
        qr_code = (
            _desk(merchants)
            .alipay_client(merchant)
            .precreate(
                out_trade_no=order["out_trade_no"],
                amount_cent=order["amount_cent"],
                subject=order["description"],
                notify_url=merchant.notify_url,
                timeout_express=f"{expire_minutes}m",
            )
        )
        return {"qr_code": qr_code}


CHANNEL = Alipay(
    name="alipay",
    label=N_("Alipay"),
    stored="alipay",
    route="alipay",
    order_word="alipay",
    api=None,
    merchant_kind="alipay",
    merchant_param="app_id",
    currencies=("CNY",),
    reconciled=True,
    environment=(GATEWAY,),
)
