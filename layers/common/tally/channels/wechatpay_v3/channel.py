"""WeChat Pay API v3 as a `Channel` (channels/registry.py): its spellings, tables, ACKs and pull."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from tally import errors
from tally.channels.registry import ChannelNames, ChannelVariable
from tally.channels.wechatpay_v3.headers import REPLAY_HEADERS
from tally.i18n import N_

if TYPE_CHECKING:
    from tally.channels.bill_source import Bill, BillSource
    from tally.channels.registry import CombinePayments, PullClient, RefundClient, Synthetic
    from tally.channels.wechatpay_v3.merchant import Desk
    from tally.domain.fundflow import FundFlowTerms
    from tally.domain.notifications import Outcome, PaymentNotice
    from tally.domain.refunds import RefundEvent


API_BASE = ChannelVariable("WECHATPAY_API_BASE", "https://api.mch.weixin.qq.com", lambda url: url.rstrip("/"))
CA_FILE = ChannelVariable(
    "TALLY_WECHATPAY_CA_FILE"
)  # trust these CAs for WeChat's TLS (tests: the simulator)


@cache
def _trade_states() -> dict[str, Outcome]:
    """The wire's trade_state table, imported on the first callback (not at cold start) and then kept: the import
    statement costs ~1.6 µs a call, and outcome_of is asked on every callback."""
    from tally.channels.wechatpay_v3.wire import TRADE_STATE

    return TRADE_STATE


def _desk(merchants: Any) -> Desk:
    """The merchant desk (merchant.py imports the wire module: imported on first use, not at cold start)."""
    from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

    return wechatpay_v3_desk(merchants)


@cache
def _fund_flow_terms() -> FundFlowTerms:
    """The fund flow by default (R45), built on first use (not at cold start) and then kept."""
    from tally.domain.fundflow import FundFlowTerms, SettlementLag

    # a payment's money reaches the basic account by the merchant's settlement cycle (T+1 by default, T+7 for
    # some industries: configurable per merchant), its fee netted in the same row; a refund debits it when made
    return FundFlowTerms(
        SettlementLag(1, 0, 1, 0, "WeChat Pay settlement cycle T+1 (merchant platform default)"),
        accounts=("BASIC", "OPERATION", "FEES"),
        default_accounts=("BASIC",),
    )


@dataclass(frozen=True)
class WeChatPayV3(ChannelNames):
    ack_content_type: str = "application/json"

    def outcome_of(self, state: str) -> Outcome | None:
        return _trade_states().get(state)

    def refund_event_of(self, status: str) -> RefundEvent | None:
        from tally.channels.wechatpay_v3.refunds import REFUND_STATUS

        return REFUND_STATUS.get(status)

    def ack_success(self) -> tuple[int, str]:
        from tally.channels.wechatpay_v3 import wire

        return wire.ack_success()

    def ack_failure(self, status: int, message: str) -> tuple[int, str]:
        from tally.channels.wechatpay_v3 import wire

        return wire.ack_failure(status, message)

    def pull(self, merchants: Any, *, attempts: int, sleep: Callable[[float], None]) -> PullClient:
        from tally.channels.wechatpay_v3.pull import WeChatPayV3Pull

        return WeChatPayV3Pull(merchants, attempts=attempts, sleep=sleep)

    def paid_by_transaction(
        self, merchants: Any, mchid: str, transaction_id: str
    ) -> tuple[PaymentNotice, bytes]:
        """GET /v3/pay/transactions/id/{transaction_id} with the merchant's own credentials."""
        import json
        import urllib.parse

        from tally.channels.wechatpay_v3 import wire

        client = _desk(merchants).client(_desk(merchants).wechatpay(mchid))
        path = (
            f"/v3/pay/transactions/id/{urllib.parse.quote(transaction_id, safe='')}"
            f"?mchid={urllib.parse.quote(mchid, safe='')}"
        )
        resource = client.request("GET", path, None)
        notice = wire.to_payment_notice(resource, source="recon")
        return notice, json.dumps(resource, ensure_ascii=False).encode()

    def refund_client(
        self, merchants: Any, settings: Any, clock: Callable[[], float], merchant_id: str
    ) -> RefundClient:
        from tally.channels.wechatpay_v3.refunds import WeChatRefunds

        merchant = _desk(merchants).wechatpay(
            merchant_id
        )  # UnknownMerchant: no v3 credentials (then v2's, R26)
        return WeChatRefunds(_desk(merchants).client(merchant), merchant.notify_url)

    def bill_source(self, merchants: Any) -> BillSource | None:
        """None: the stored "wechatpay" bill is v2's channel's to give (channels/wechatpay_v2/channel.py), the choice
        of v3's `/v3/bill/tradebill` or v2's `/pay/downloadbill` as the merchant's records say (R44). v2 may build
        on v3's package; v3 never imports v2's."""
        return None

    def fund_flow_source(self, merchants: Any) -> Any:
        """None: like the trade bill, the stored "wechatpay" fund flow is v2's channel's to give
        (channels/wechatpay_v2/fundflow_source.py: v3's `/v3/bill/fundflowbill` or v2's `/pay/downloadfundflow`, as
        the merchant's records say)."""
        return None

    def open_fund_flow(self, data: bytes, account: str) -> Any:
        from tally.channels.bill_source import gunzip, lines_of
        from tally.channels.wechatpay_v3.fundflow import WeChatFundFlowParser

        return WeChatFundFlowParser(lines_of(gunzip(data)), account=account)

    def open_bill(self, data: bytes) -> Bill | None:
        from tally.channels.wechatpay_v3.bills import WeChatBill

        return WeChatBill(data)

    def merchant(self, merchants: Any, merchant_id: str) -> Any:
        return _desk(merchants).wechatpay(merchant_id)

    def refresh_certificates(
        self, merchants: Any, merchant_ids: list[str], max_age_s: float
    ) -> dict[str, bool]:
        """GET /v3/certificates for cert-mode merchants (merchant.py Desk.refresh_platform_certificates)."""
        return dict(_desk(merchants).refresh_platform_certificates(merchant_ids, max_age_s))

    def synthetic(self) -> Synthetic | None:
        """A v3 callback signed and encrypted the way WeChat does it (channels/wechatpay_v3/heartbeat.py)."""
        from tally.channels.wechatpay_v3 import heartbeat

        return heartbeat.SYNTHETIC

    def security_echo(self, merchants: Any, merchant_id: str, notify_url: str, message: str) -> str | None:
        """POST /v3/security/echo: the channel answers signed, then calls `notify_url` back with a signed
        SECURITY_ECHO.SUCCESS (echo.py)."""
        from tally.channels.wechatpay_v3.echo import security_echo

        return security_echo(merchants, merchant_id, notify_url, message)

    def fund_flow_terms(self) -> FundFlowTerms:
        return _fund_flow_terms()

    def prepay(
        self, merchants: Any, merchant: Any, order: dict[str, Any], *, expire_minutes: int, expire_s: float
    ) -> dict[str, str]:
        """Native prepay → code_url; a sub-merchant's order is placed with its provider's credentials (R11)."""
        from datetime import datetime

        from tally.domain.clock import CHINA  # the channels' clock: Beijing time

        client = _desk(merchants).client(merchant)
        terms = {
            "description": order["description"],
            "out_trade_no": order["out_trade_no"],
            "notify_url": merchant.notify_url,
            "amount_cent": order["amount_cent"],
            "currency": order["currency"],
            "time_expire": datetime.fromtimestamp(expire_s, CHINA).isoformat(timespec="seconds"),
        }
        if merchant.sp_mchid:  # service provider: its credentials sign, the order is the sub-merchant's (R11)
            code_url = client.partner_native_prepay(
                sp_appid=merchant.appid,
                sub_mchid=order["mchid"],
                sub_appid=merchant.row.get("sub_appid"),
                **terms,
            )
        else:
            code_url = client.native_prepay(appid=merchant.appid, **terms)
        return {"code_url": code_url}

    def combine(self) -> CombinePayments:
        return self

    def combine_merchant(self, merchants: Any, mchid: str, sub_mchids: Sequence[str]) -> Any:
        """A direct merchant whose sub-orders are all its own, or a service provider whose sub-orders belong to
        its sub-merchants (R11): a sub-order of any other merchant is refused before anything is stored."""
        desk = _desk(merchants)
        try:
            top = desk.wechatpay(mchid)
        except errors.NotFound:
            raise errors.NotFound(
                f"wechatpay merchant {mchid} is not configured (tally merchant add)",
                code="merchant_not_found",
            ) from None
        if top.sp_mchid:
            raise errors.InvalidRequest(
                "a combine order is placed by a direct merchant or by a service provider"
            )
        for sub_mchid in sub_mchids:
            if sub_mchid == mchid:
                continue
            try:
                owner = desk.wechatpay(sub_mchid).sp_mchid
            except errors.NotFound:
                owner = None
            if owner != mchid:  # not said whether it exists: another tenant's merchant is simply not found
                raise errors.NotFound(
                    f"merchant {sub_mchid} is not a sub-merchant of {mchid}", code="merchant_not_found"
                )
        return top

    def combine_prepay(
        self,
        merchants: Any,
        merchant: Any,
        combine_out_trade_no: str,
        sub_orders: list[dict[str, Any]],
        *,
        expire_s: float,
    ) -> dict[str, str]:
        """Combine Native prepay (wechatpay_v3/combine.py) with the combine merchant's credentials: a direct
        merchant's own, or a service provider's with its sub-merchants' orders as sub_orders (R11)."""
        from datetime import datetime

        from tally.channels.wechatpay_v3 import combine
        from tally.domain.clock import CHINA

        code_url = combine.native_prepay(
            _desk(merchants).client(merchant),
            combine_appid=merchant.appid,
            combine_out_trade_no=combine_out_trade_no,
            sub_orders=sub_orders,
            notify_url=merchant.notify_url,
            time_expire=datetime.fromtimestamp(expire_s, CHINA).isoformat(timespec="seconds"),
        )
        return {"code_url": code_url}


CHANNEL = WeChatPayV3(
    name="wechatpay_v3",
    label=N_("WeChat Pay v3"),
    stored="wechatpay",
    route="wechatpay",
    order_word="wechatpay",
    api=None,
    merchant_kind="wechatpay",
    merchant_param="mchid",
    currencies=None,
    reconciled=True,
    replay_headers=REPLAY_HEADERS,
    environment=(API_BASE, CA_FILE),
)
