"""The simulated channels, one table entry each: how a channel's books record an order and a payment,
how it signs and delivers a notification, what its success ACK looks like, and what the product can
do with it (pull, refunds, reconciliation).

A channel plugs into the simulation by one entry in `KINDS` (and refunds by one entry in
`tests/sim/refunds.py: DESKS`). The channel's books live in the channel simulator
(`tally_local/simulator/`), served over real HTTP on 127.0.0.1, so the poller's queries, the refund
API and the trade bill read the same books the notifications come from.

Simulated time: the simulator modules read `time.time()` / `datetime.now()`; `use_clock` points them
at the simulation's clock (both ends of every signed exchange agree on "now", as they do in life).
"""

from __future__ import annotations

import datetime as _dt
import types
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

if TYPE_CHECKING:
    from tests.sim.scenario import Payment

CHINA = timezone(timedelta(hours=8))


def cst(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, CHINA)


def use_clock(clock: Any) -> Callable[[], None]:
    """Make the channel simulator read the simulation's clock (its own modules only: no product code).
    Returns the function that gives the simulator its real clock back (other tests share the process)."""
    import time as _time

    from tally_local.simulator import _crypto, kernel

    class SimDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # noqa: D102 - datetime's signature
            return _dt.datetime.fromtimestamp(clock(), tz)

    fake_dt = types.ModuleType("datetime")
    fake_dt.__dict__.update({k: getattr(_dt, k) for k in dir(_dt) if not k.startswith("__")})
    fake_dt.datetime = SimDatetime
    fake_time = types.SimpleNamespace(
        time=clock, monotonic=_time.monotonic, sleep=_time.sleep, perf_counter=_time.perf_counter
    )
    saved = [
        (module, name, getattr(module, name))
        for module in (kernel,)  # the simulator reads the time only through its kernel
        for name in ("time", "dt")
        if hasattr(module, name)
    ]
    for module, name, _ in saved:
        setattr(module, name, fake_time if name == "time" else fake_dt)
    del _crypto  # certificates keep real validity dates (issued once per process)

    def restore() -> None:
        for module, name, original in saved:
            setattr(module, name, original)

    return restore


@dataclass(frozen=True)
class Route:
    path: str
    params: dict[str, str]
    headers: dict[str, str]


class ChannelKind:
    """One channel of the simulation. Subclasses fill in the wire format; the runner stays generic."""

    name = ""  # the table key (and what a failing seed's timeline says)
    order_channel = ""  # the orders λ's `channel` field
    raw_prefix = ""  # raw rows are keyed `<raw_prefix>#<transaction id>` (R7)
    pool: tuple[str, ...] = ()  # merchant ids, configured once per process
    pull = False  # the poller can query it (PullChannels has an entry): a lost callback gets booked
    closes = False  # the poller closes its expired orders at the channel (so a late payment can happen)
    recon = False  # its trade bill is reconciled by the simulation (R31-R36)
    query_faults = False  # the simulator can fail its queries on demand

    def __init__(self, sim: Any):
        self.sim = sim

    def setup(self, directory: Any, api_base: str) -> None:
        raise NotImplementedError

    def tx_id(self, seed: int, n: int) -> str:
        raise NotImplementedError

    def record_order(self, mid: str, out_trade_no: str, total: int) -> None:
        """The channel knows the order (the QR code was shown): queries answer 'not paid yet'."""
        raise NotImplementedError

    def take_payment(self, p: Payment, *, double: bool) -> None:
        """The channel's books: the order is paid by p (a second transaction when `double`)."""
        raise NotImplementedError

    def is_closed(self, mid: str, out_trade_no: str) -> bool:
        return False

    def notification(self, p: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        raise NotImplementedError

    def route(self, mid: str) -> Route:
        raise NotImplementedError

    def acked(self, response: dict[str, Any]) -> bool:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the previous day's books (the merchants stay)."""


# ---------------------------------------------------------------------------------------------- WeChat Pay v3


class WeChatV3(ChannelKind):
    name = "wechatpay_v3"
    order_channel = "wechatpay"
    raw_prefix = "wechatpay"
    pool = ("1900000101", "1900000102", "1900000103")
    pull = closes = recon = query_faults = True

    def setup(self, directory: Any, api_base: str) -> None:
        m = self.sim.register_test_merchant()
        for mchid in self.pool:
            self.sim.register_merchant(
                mchid, m["apiv3_key"], m["merchant_public_key_pem"], m["merchant_serial"], appid=m["appid"]
            )
            wechatpay_v3_desk(directory).add_wechatpay(
                mchid=mchid,
                apiv3_key=m["apiv3_key"],
                merchant_key_pem=m["merchant_private_key_pem"],
                merchant_serial=m["merchant_serial"],
                appid=m["appid"],
                notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
                public_key=self.sim.public_key_pem,
                public_key_id=self.sim.public_key_id,
            )

    def tx_id(self, seed: int, n: int) -> str:
        return f"4200000{seed % 10**12:012d}{n:09d}"

    def record_order(self, mid: str, out_trade_no: str, total: int) -> None:
        sim = self.sim
        with sim._lock:
            sim._orders.setdefault(
                (mid, out_trade_no),
                {
                    "appid": sim.merchant(mid).appid,
                    "mchid": mid,
                    "out_trade_no": out_trade_no,
                    "description": "sim order",
                    "notify_url": f"http://127.0.0.1:9/notify/wechatpay/{mid}",
                    "attach": "",
                    "time_expire": None,
                    "amount": {"total": total, "currency": "CNY"},
                    "code_url": "weixin://sim",
                    "trade_state": "NOTPAY",
                    "created_at": sim._now_rfc3339(),
                    "_expire_at": None,
                },
            )

    def take_payment(self, p: Payment, *, double: bool) -> None:
        o, sim = p.order, self.sim
        resource = sim.transaction_resource(
            o.mchid,
            o.out_trade_no,
            p.reported_total,
            payer_total=p.payer_total,
            transaction_id=p.transaction_id,
            openid=f"oSIM{p.transaction_id[-24:]}",
            success_time=cst(p.paid_s).isoformat(timespec="seconds"),
        )
        self.record_order(o.mchid, o.out_trade_no, p.reported_total)
        with sim._lock:
            # A second transaction for one out_trade_no: the channel's books (and bill) hold both; queries
            # by out_trade_no keep answering the first.
            key = (o.mchid, o.out_trade_no if not double else f"{o.out_trade_no}#2")
            order = sim._orders.setdefault(key, dict(sim._orders[(o.mchid, o.out_trade_no)]))
            order["trade_state"] = "SUCCESS"
            order["transaction"] = resource
            sim._by_transaction_id[p.transaction_id] = key

    def is_closed(self, mid: str, out_trade_no: str) -> bool:
        order = self.sim._orders.get((mid, out_trade_no))
        return bool(order and order["trade_state"] == "CLOSED")

    def notification(self, p: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        o = p.order
        with self.sim._lock:
            key = self.sim._by_transaction_id[p.transaction_id]
            resource = dict(self.sim._orders[key]["transaction"])
        success = resource["success_time"]
        return self.sim.build_notification(
            o.mchid,
            resource,
            timestamp=int(now),
            nonce=f"N{seq:031d}",
            resource_nonce=f"R{seq:011d}",
            notification_id=f"00000000-0000-4000-8000-{seq:012d}",
            create_time=success,
        )

    def route(self, mid: str) -> Route:
        return Route(f"/notify/wechatpay/{mid}", {"mchid": mid}, {})

    def acked(self, response: dict[str, Any]) -> bool:
        return response.get("statusCode") in (200, 204)

    def reset(self) -> None:
        sim = self.sim
        with sim._lock:
            sim._orders.clear()
            sim._by_transaction_id.clear()
            sim._refunds.clear()
            sim._refund_plans.clear()
            sim._faults.clear()
            sim.requests.clear()
            sim._deliveries.clear()
        sim.bills._refunds.clear()
        sim.bills._files.clear()
        sim.bills._faults.clear()


# ---------------------------------------------------------------------------------------------- Alipay


class Alipay(ChannelKind):
    name = "alipay"
    order_channel = "alipay"
    raw_prefix = "alipay"
    pool = ("2021000000000301", "2021000000000302")
    pull = closes = True

    @property
    def ali(self) -> Any:
        return self.sim.alipay

    def setup(self, directory: Any, api_base: str) -> None:
        for app_id in self.pool:
            m = self.ali.register_test_merchant("public_key", app_id)
            alipay_desk(directory).add_alipay(
                app_id=app_id,
                app_private_key=m["app_private_key_pem"],
                notify_url=f"http://127.0.0.1:9/notify/alipay/{app_id}",
                alipay_public_key=m["alipay_public_key_pem"],
            )

    def tx_id(self, seed: int, n: int) -> str:
        return f"2026010122001{seed % 10**10:010d}{n:05d}"

    def record_order(self, mid: str, out_trade_no: str, total: int) -> None:
        with self.ali._lock:
            self.ali.orders.setdefault(
                (mid, out_trade_no),
                {
                    "app_id": mid,
                    "owner": mid,
                    "out_trade_no": out_trade_no,
                    "total": total,
                    "subject": "sim order",
                    "notify_url": f"http://127.0.0.1:9/notify/alipay/{mid}",
                    "status": None,
                    "trade_no": None,
                    "qr_code": "https://qr.alipay.com/sim",
                },
            )

    def take_payment(self, p: Payment, *, double: bool) -> None:
        o = p.order
        self.record_order(o.mchid, o.out_trade_no, p.reported_total)
        with self.ali._lock:
            key = (o.mchid, o.out_trade_no if not double else f"{o.out_trade_no}#2")
            order = self.ali.orders.setdefault(key, dict(self.ali.orders[(o.mchid, o.out_trade_no)]))
            order.update(
                trade_no=p.transaction_id,
                status="TRADE_SUCCESS",
                receipt=p.payer_total,
                total=p.reported_total,
                gmt_payment=cst(p.paid_s).strftime("%Y-%m-%d %H:%M:%S"),
            )

    def is_closed(self, mid: str, out_trade_no: str) -> bool:
        order = self.ali.orders.get((mid, out_trade_no))
        return bool(order and order["status"] == "TRADE_CLOSED")

    def notification(self, p: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        o = p.order
        paid = cst(p.paid_s).strftime("%Y-%m-%d %H:%M:%S")
        params = self.ali.notification_params(
            o.mchid,
            o.out_trade_no,
            p.reported_total,
            trade_no=p.transaction_id,
            receipt_amount=p.payer_total,
            gmt_payment=paid,
            gmt_create=paid,
            notify_time=cst(now).strftime("%Y-%m-%d %H:%M:%S"),
            notify_id=f"2026{seq:028d}",
            buyer_id="2088000000000001",
            seller_id="2088000000000002",
        )
        return {}, self.ali.build_notification(params)

    def route(self, mid: str) -> Route:
        return Route(
            f"/notify/alipay/{mid}",
            {"app_id": mid},
            {"content-type": "application/x-www-form-urlencoded; charset=utf-8"},
        )

    def acked(self, response: dict[str, Any]) -> bool:
        return response.get("statusCode") == 200 and response.get("body") == "success"

    def reset(self) -> None:
        with self.ali._lock:
            self.ali.orders.clear()
            self.ali.deliveries.clear()
            self.ali.requests.clear()


# ---------------------------------------------------------------------------------------------- WeChat Pay v2


class WeChatV2(ChannelKind):
    name = "wechatpay_v2"
    order_channel = "wechatpay_v2"
    raw_prefix = "wechatpay"  # v2 and v3 report the same WeChat transactions (one number space)
    pool = ("1900000201", "1900000202")
    pull = closes = (
        True  # v2 orders carry api=wechatpay_v2: the poller queries (/pay/orderquery) and closes them
    )

    @property
    def v2(self) -> Any:
        return self.sim.wechatpay_v2

    def setup(self, directory: Any, api_base: str) -> None:
        for i, mch_id in enumerate(self.pool):
            m = self.v2.register_test_merchant(mch_id, ("MD5", "HMAC-SHA256")[i % 2])
            wechatpay_v2_desk(directory).add_wechatpay_v2(
                mchid=mch_id,
                api_key=m["api_key"],
                notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{mch_id}",
            )

    def tx_id(self, seed: int, n: int) -> str:
        return f"4200002{seed % 10**12:012d}{n:09d}"

    def record_order(self, mid: str, out_trade_no: str, total: int) -> None:
        with self.v2._lock:
            self.v2.orders.setdefault(
                (mid, out_trade_no),
                {
                    "mch_id": mid,
                    "sub_mch_id": "",
                    "owner": mid,
                    "out_trade_no": out_trade_no,
                    "total_fee": total,
                    "notify_url": f"http://127.0.0.1:9/notify/wechatpay-v2/{mid}",
                    "code_url": "weixin://sim",
                    "trade_state": "NOTPAY",
                    "transaction_id": None,
                },
            )

    def take_payment(self, p: Payment, *, double: bool) -> None:
        o = p.order
        self.record_order(o.mchid, o.out_trade_no, p.reported_total)
        with self.v2._lock:
            key = (o.mchid, o.out_trade_no if not double else f"{o.out_trade_no}#2")
            order = self.v2.orders.setdefault(key, dict(self.v2.orders[(o.mchid, o.out_trade_no)]))
            order.update(
                trade_state="SUCCESS",
                transaction_id=p.transaction_id,
                cash_fee=p.payer_total,
                total_fee=p.reported_total,
            )

    def is_closed(self, mid: str, out_trade_no: str) -> bool:
        order = self.v2.orders.get((mid, out_trade_no))
        return bool(order and order["trade_state"] == "CLOSED")

    def notification(self, p: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        o = p.order
        fields = self.v2.payment_params(
            o.mchid,
            o.out_trade_no,
            p.reported_total,
            cash_fee=p.payer_total,
            transaction_id=p.transaction_id,
            time_end=cst(p.paid_s).strftime("%Y%m%d%H%M%S"),
            nonce_str=f"N{seq:031d}",
            openid=f"oSIM{p.transaction_id[-24:]}",
        )
        return {}, self.v2.build_notification(fields)

    def route(self, mid: str) -> Route:
        return Route(f"/notify/wechatpay-v2/{mid}", {"mchid": mid}, {"content-type": "text/xml"})

    def acked(self, response: dict[str, Any]) -> bool:
        return response.get("statusCode") == 200 and "<return_code><![CDATA[SUCCESS]]>" in str(
            response.get("body")
        )

    def reset(self) -> None:
        with self.v2._lock:
            self.v2.orders.clear()


KINDS: dict[str, type[ChannelKind]] = {k.name: k for k in (WeChatV3, Alipay, WeChatV2)}
