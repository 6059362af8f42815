"""Shared helpers for the refund tests: a paid order through the real notify + worker path."""

from __future__ import annotations

import json
import random
import uuid

from tally import bootstrap


def paid_order(h, mchid: str, amount: int = 100) -> tuple[str, str]:
    """An order created with prepay at the simulator, paid there, and booked through notify + worker."""
    out_trade_no = f"T{uuid.uuid4().hex[:20]}"
    response = h.create_order(mchid, out_trade_no, amount_cent=amount, prepay=True)
    assert response["statusCode"] == 201, response
    transaction_id = h.sim.pay(mchid, out_trade_no, drop=True)
    headers, body = h.sim.build_notification(mchid, h.sim.transaction_view(mchid, out_trade_no))
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []
    assert h.order(mchid, out_trade_no)["status"] == "PAID"
    return out_trade_no, transaction_id


def refund(h, mchid: str, out_trade_no: str, amount: int, refund_no: str | None = None, reason: str = "test"):
    body = {"mchid": mchid, "out_trade_no": out_trade_no, "amount_cent": amount, "reason": reason}
    if refund_no:
        body["refund_no"] = refund_no
    response = h.call("RefundsFunction", "POST", "/refunds", json.dumps(body).encode(), {}, {})
    return response["statusCode"], json.loads(response["body"])


def deliver(h, mchid: str, out_refund_no: str, times: int = 1, drained: bool = True) -> None:
    """The simulator's signed REFUND.<status> notification, delivered `times` times, then applied."""
    for _ in range(times):
        headers, body = h.sim.refund_notification(out_refund_no)
        assert h.notify(mchid, headers, body)["statusCode"] == 204
    if drained:
        assert h.drain() == []


def order_row(h, mchid: str, out_trade_no: str) -> dict:
    return bootstrap.order_service().show(mchid, out_trade_no)


def new_no() -> str:
    return f"RN{uuid.uuid4().hex[:24]}"


# ---------------------------------------------------------------- one kit per channel (parametrised tests)


class RefundKit:
    """Drives one channel's side of a refund test: a paid order, the simulator's refund behaviour, the outcome
    and its notification. `fails_by_notification`: the channel reports a failed refund (Alipay does not: its
    refusals come in the create answer, §6.3)."""

    name = ""
    channel = ""
    fails_by_notification = True

    def __init__(self, h):
        self.h = h
        self.sim = h.sim
        self.mid = self.setup()

    def hold(self, **plan):
        """Every new refund stays undecided and unnotified until the test settles / delivers it."""
        self.desk.set_refund_behaviour(**{"outcome": "hold", "drop": True, "after_accept": None, **plan})

    def hold_next(self, **plan):
        self.desk.set_refund_behaviour(count=1, **{"outcome": "hold", "drop": True, **plan})

    def channel_refunds(self, no):
        return [r for r in self.listed() if r[self.no_field] == no]


class WeChatV3Kit(RefundKit):
    name, channel, no_field, reject_code = "wechatpay_v3", "wechatpay", "out_refund_no", "INVALID_REQUEST"

    @property
    def desk(self):
        return self.sim

    def setup(self):
        return self.h.add_merchant()["mchid"]

    def reset(self):
        self.sim.set_refund_behaviour(outcome="success", drop=False, after_accept=None)
        self.sim._refund_plans.clear()

    def paid_order(self, amount=100):
        return paid_order(self.h, self.mid, amount)

    def settle(self, no, outcome):  # success | fail | abnormal
        self.sim.settle_refund(no, {"fail": "closed"}.get(outcome, outcome))

    def deliver(self, no, times=1, drained=True):
        deliver(self.h, self.mid, no, times, drained)

    def reject_next(self):
        self.sim.inject_fault(
            "error", path_contains="/v3/refund/", status=400, code="INVALID_REQUEST", message="bad"
        )

    def listed(self):
        return self.sim.refunds()


class AlipayKit(RefundKit):
    name, channel, no_field, reject_code = "alipay", "alipay", "out_request_no", "ACQ.TRADE_HAS_FINISHED"
    fails_by_notification = False

    @property
    def desk(self):
        return self.sim.alipay

    def setup(self):
        from tests.integration.channel_kit import Alipay

        return Alipay(self.h).setup()

    def reset(self):
        self.sim.alipay.reset_refund_behaviour()

    def paid_order(self, amount=100):
        from tests.integration.channel_kit import Alipay

        out_trade_no = f"T{uuid.uuid4().hex[:20]}"
        response = self.h.create_order(
            self.mid, out_trade_no, amount_cent=amount, prepay=True, channel="alipay"
        )
        assert response["statusCode"] == 201, response
        trade_no = self.sim.alipay.pay(self.mid, out_trade_no, drop=True)
        params = self.sim.alipay.notification_params(self.mid, out_trade_no, amount, trade_no=trade_no)
        driver = Alipay(self.h)
        assert driver.notify(self.mid, self.sim.alipay.build_notification(params), {})["body"] == "success"
        assert self.h.drain() == []
        assert self.h.order(self.mid, out_trade_no)["status"] == "PAID"
        return out_trade_no, trade_no

    def settle(self, no, outcome):  # success | fail
        self.sim.alipay.settle_refund(no, outcome)

    def deliver(self, no, times=1, drained=True):
        from tests.integration.channel_kit import Alipay

        driver = Alipay(self.h)
        for _ in range(times):
            assert driver.notify(self.mid, self.sim.alipay.refund_notification(no), {})["body"] == "success"
        if drained:
            assert self.h.drain() == []

    def reject_next(self):
        self.sim.alipay.set_refund_behaviour(count=1, reject="ACQ.TRADE_HAS_FINISHED")

    def listed(self):
        return self.sim.alipay.refund_list()


class WeChatV2Kit(RefundKit):
    name, channel, no_field, reject_code = "wechatpay_v2", "wechatpay", "out_refund_no", "TRADE_OVERDUE"

    @property
    def desk(self):
        return self.sim.wechatpay_v2

    def setup(self):
        from tests.integration.channel_kit import WeChatV2

        return WeChatV2(self.h).setup()

    def reset(self):
        self.sim.wechatpay_v2.reset_refund_behaviour()

    def paid_order(self, amount=100):
        from tests.integration.channel_kit import WeChatV2

        out_trade_no = f"T{uuid.uuid4().hex[:20]}"
        response = self.h.create_order(
            self.mid, out_trade_no, amount_cent=amount, prepay=False, channel="wechatpay_v2"
        )
        assert response["statusCode"] == 201, response
        tx = self.sim.wechatpay_v2.paid_order(
            self.mid, out_trade_no, amount, notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{self.mid}"
        )
        driver = WeChatV2(self.h)
        body, headers, _ = driver.callback(self.mid, out_trade_no, amount, transaction_id=tx)
        assert driver.notify(self.mid, body, headers)["statusCode"] == 200
        assert self.h.drain() == []
        assert self.h.order(self.mid, out_trade_no)["status"] == "PAID"
        return out_trade_no, tx

    def settle(self, no, outcome):  # success | fail | abnormal
        self.sim.wechatpay_v2.settle_refund(no, {"fail": "closed"}.get(outcome, outcome))

    def deliver(self, no, times=1, drained=True):
        from tests.integration.channel_kit import WeChatV2, ack_kind

        driver = WeChatV2(self.h)
        for _ in range(times):
            body = self.sim.wechatpay_v2.refund_notification_of(no)
            assert ack_kind("wechatpay_v2", driver.notify(self.mid, body, {})) == "success"
        if drained:
            assert self.h.drain() == []

    def reject_next(self):
        self.sim.wechatpay_v2.set_refund_behaviour(count=1, reject="TRADE_OVERDUE")

    def listed(self):
        return self.sim.wechatpay_v2.refund_list()


KITS = {k.name: k for k in (WeChatV3Kit, AlipayKit, WeChatV2Kit)}


D = "2024-05-01"  # the bill day of the refund-settlement tests


def pay_v3(h, mchid, total, payer, coupon_type="CASH"):
    otn = f"S{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=total, prepay=True)["statusCode"] == 201
    extra = {"payer_total": payer, "coupon_type": coupon_type} if payer != total else {}
    h.sim.pay(mchid, otn, drop=True, success_time=f"{D}T10:00:00+08:00", **extra)
    headers, body = h.sim.build_notification(mchid, h.sim.get_order(mchid, otn)["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []
    return otn


def settle_v3_on_d(h, mchid, otn, no, amount):
    """The channel refunds it on D (the bill day), and the day's bill lists it."""
    h.sim.settle_refund(no, "success")
    when = f"{D}T15:00:00+08:00"
    with h.sim._lock:
        h.sim._refunds[no]["success_time"] = when
    h.sim.bills.add_refund(mchid, otn, no, amount, success_time=when)
