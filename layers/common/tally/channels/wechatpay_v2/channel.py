"""WeChat Pay API v2 as a `Channel` (channels/registry.py).

v2 reports the same WeChat transactions and refund numbers as v3, so it stores v3's channel ("wechatpay"):
its words are translated to v3's before a table is read, and v3's tables decide (wire.py docstring). It has
its own route (/notify/wechatpay-v2/), metric value, order word, order `api` and merchant rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tally.channels.registry import ChannelNames
from tally.channels.wechatpay_v3.channel import API_BASE, CA_FILE  # the same gateway as v3
from tally.i18n import N_

if TYPE_CHECKING:
    from tally.channels.bill_source import Bill, BillSource
    from tally.channels.registry import PullClient, RefundClient
    from tally.channels.wechatpay_v2.merchant import Desk
    from tally.domain.fundflow import FundFlowTerms
    from tally.domain.notifications import Outcome, PaymentNotice
    from tally.domain.refunds import RefundEvent


def _desk(merchants: Any) -> Desk:
    """The merchant desk (merchant.py imports the wire module: imported on first use, not at cold start)."""
    from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk

    return wechatpay_v2_desk(merchants)


@dataclass(frozen=True)
class WeChatPayV2(ChannelNames):
    ack_content_type: str = "text/xml"

    def outcome_of(self, state: str) -> Outcome | None:
        from tally.channels.wechatpay_v3.wire import TRADE_STATE  # v3's table: v2 shares its channel

        return TRADE_STATE.get(state)

    def refund_event_of(self, status: str) -> RefundEvent | None:
        from tally.channels.wechatpay_v3.refunds import REFUND_STATUS  # v2 words are translated first

        return REFUND_STATUS.get(status)

    def ack_success(self) -> tuple[int, str]:
        from tally.channels.wechatpay_v2 import wire

        return wire.ack_success()

    def ack_failure(self, status: int, message: str) -> tuple[int, str]:
        from tally.channels.wechatpay_v2 import wire

        return wire.ack_failure(status, message)

    def pull(self, merchants: Any, *, attempts: int, sleep: Callable[[float], None]) -> PullClient:
        from tally.channels.wechatpay_v2.pull import WeChatPayV2Pull

        return WeChatPayV2Pull(merchants, attempts=attempts, sleep=sleep)

    def paid_by_transaction(
        self, merchants: Any, mchid: str, transaction_id: str
    ) -> tuple[PaymentNotice, bytes]:
        """Never asked: v2's payments are stored as "wechatpay", whose owner (v3) answers recon's question."""
        from tally import errors

        raise errors.ChannelError(
            "WeChat Pay v2 has no query by transaction_id here: v3's answers (stored wechatpay)"
        )

    def refund_client(
        self, merchants: Any, settings: Any, clock: Callable[[], float], merchant_id: str
    ) -> RefundClient:
        """The merchant's v2 refund client: /secapi/pay/refund with mutual TLS when its secret carries the API
        client certificate (tally merchant add wechatpay-v2 --client-cert …)."""
        from tally.channels.wechatpay_v2.refunds import (
            WeChatPayV2RefundClient,
            WeChatV2Refunds,
            client_tls,
        )

        mchid = merchant_id
        v2 = _desk(merchants).wechatpay_v2(mchid)
        client = WeChatPayV2RefundClient(
            merchants.setting(API_BASE),
            mchid=mchid,
            api_key=v2.api_key,
            appid=str(v2.row.get("appid") or ""),
            timeout_s=settings.http_timeout_s,
            tls=client_tls(v2.client_cert, v2.client_key or "", merchants.setting(CA_FILE) or None)
            if v2.client_cert
            else None,
        )
        return WeChatV2Refunds(client, v2.notify_url, clock=clock)

    def bill_source(self, merchants: Any) -> BillSource | None:
        """The stored "wechatpay" bill (v2's payments are in the same bill as v3's): v3's `/v3/bill/tradebill` or
        v2's `/pay/downloadbill`, as the merchant's records say (R44, channels/wechatpay_v2/bills.py)."""
        from tally.channels.wechatpay_v2.bills import WeChatBillChoice, WeChatV2BillSource
        from tally.channels.wechatpay_v3.bills import WeChatBillSource

        return WeChatBillChoice(merchants, WeChatBillSource(merchants), WeChatV2BillSource(merchants))

    def open_bill(self, data: bytes) -> Bill | None:
        return None

    def fund_flow_source(self, merchants: Any) -> Any:
        """The stored "wechatpay" fund flow (R45): v3's `/v3/bill/fundflowbill` or v2's `/pay/downloadfundflow`,
        picked by the same records as the trade bill (channels/wechatpay_v2/fundflow_source.py)."""
        from tally.channels.wechatpay_v2.fundflow_source import WeChatFundFlowChoice, WeChatV2FundFlowSource
        from tally.channels.wechatpay_v3.fundflow_source import WeChatFundFlowSource

        return WeChatFundFlowChoice(
            merchants, WeChatFundFlowSource(merchants), WeChatV2FundFlowSource(merchants)
        )

    def merchant(self, merchants: Any, merchant_id: str) -> Any:
        return _desk(merchants).wechatpay_v2(merchant_id)

    def redact_body(self, text: str, hide: Callable[[str], str]) -> str:
        """`<req_info>`: a refund report encrypted with md5(API key) (channel-spec §4)."""
        import re

        return re.sub(
            r"(<req_info>)(.*?)(</req_info>)",
            lambda m: m.group(1) + hide(m.group(2)) + m.group(3),
            text,
            flags=re.S,
        )

    def order_refusal(self, merchant: Any, prepay: bool) -> str | None:
        """`/pay/unifiedorder` needs the appid: a merchant configured without one takes no prepay order."""
        if prepay and not merchant.appid:
            return "prepay for a wechatpay_v2 merchant needs its appid (tally merchant add --appid)"
        return None

    def fund_flow_terms(self) -> FundFlowTerms:
        from tally.channels.wechatpay_v3.channel import CHANNEL as V3

        return V3.fund_flow_terms()  # the same merchant platform, settlement cycle and accounts as v3's

    def prepay(
        self, merchants: Any, merchant: Any, order: dict[str, Any], *, expire_minutes: int, expire_s: float
    ) -> dict[str, str]:
        """`/pay/unifiedorder` (trade_type NATIVE) → code_url."""
        code_url = (
            _desk(merchants)
            .wechatpay_v2_client(merchant)
            .unified_order(
                out_trade_no=order["out_trade_no"],
                total_fee=order["amount_cent"],
                body=order["description"],
                notify_url=merchant.notify_url,
                time_expire=expire_s,
            )
        )
        return {"code_url": code_url}


CHANNEL = WeChatPayV2(
    name="wechatpay_v2",
    label=N_("WeChat Pay v2"),
    stored="wechatpay",
    route="wechatpay-v2",
    order_word="wechatpay_v2",
    api="wechatpay_v2",
    merchant_kind="wechatpay_v2",
    merchant_param="mchid",
    currencies=("CNY",),
    reconciled=True,  # its payments are in the merchant's WeChat bill (stored "wechatpay")
    environment=(API_BASE, CA_FILE),
)
