"""One small driver per channel so the money rules can be re-proved per channel (parametrised tests).

Each driver: `setup()` → merchant id; `callback(mid, out_trade_no, total, **kw)` → (body, headers, tx id);
`notify(mid, body, headers)` → the handler's response; `tamper(body, headers)` → a bad signature.
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import parse_qsl, urlencode

from tally import bootstrap
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk


class Driver:
    name = ""
    acks: dict[str, tuple[str, str]] = {}  # "success"/"failure" → (content type, body) expectations

    def __init__(self, h):
        self.h = h
        self.sim = h.sim

    def order(self, mid, amount=100, out_trade_no=None, **kw):
        out_trade_no = out_trade_no or f"T{uuid.uuid4().hex[:20]}"
        response = self.h.create_order(
            mid, out_trade_no, amount_cent=amount, channel=self.order_channel, **kw
        )
        assert response["statusCode"] == 201, response
        return out_trade_no

    order_channel = "wechatpay"


class WeChatV3(Driver):
    name = "wechatpay_v3"
    raw_prefix = "wechatpay"

    def setup(self, mchid=None):
        return self.h.add_merchant(mchid=mchid or f"19{uuid.uuid4().int % 10**8:08d}")["mchid"]

    def callback(self, mid, out_trade_no, total, paid=None, state="SUCCESS", transaction_id=None):
        kw = {"payer_total": paid} if paid is not None else {}
        if transaction_id is not None:
            kw["transaction_id"] = transaction_id
        headers, body, resource = self.h.notification(mid, out_trade_no, total, trade_state=state, **kw)
        return body, headers, resource["transaction_id"]

    def notify(self, mid, body, headers):
        return self.h.notify(mid, headers, body)

    def tamper(self, body, headers):
        return body, {**headers, "Wechatpay-Signature": headers["Wechatpay-Signature"][::-1]}

    def unusable(self, mid, out_trade_no):
        headers, body, _ = self.h.notification(mid, out_trade_no, 100, apiv3_key="X" * 32)
        return body, headers


class Alipay(Driver):
    name = "alipay"
    raw_prefix = "alipay"
    order_channel = "alipay"
    mode = "public_key"

    def setup(self, app_id=None):
        m = self.sim.alipay.register_test_merchant(self.mode, app_id)
        keys = (
            {"alipay_public_key": m["alipay_public_key_pem"]}
            if self.mode == "public_key"
            else {
                "alipay_cert": m["alipay_cert_pem"],
                "app_cert": m["app_cert_pem"],
                "root_cert": m["root_cert_pem"],
            }
        )
        alipay_desk(bootstrap.merchants()).add_alipay(
            app_id=m["app_id"],
            app_private_key=m["app_private_key_pem"],
            notify_url=f"http://127.0.0.1:9/notify/alipay/{m['app_id']}",
            **keys,
        )
        return m["app_id"]

    def params(
        self, mid, out_trade_no, total, paid=None, state="TRADE_SUCCESS", transaction_id=None, **extra
    ):
        return self.sim.alipay.notification_params(
            mid,
            out_trade_no,
            total,
            trade_status=state,
            receipt_amount=paid,
            trade_no=transaction_id,
            **extra,
        )

    def callback(
        self, mid, out_trade_no, total, paid=None, state="TRADE_SUCCESS", transaction_id=None, **extra
    ):
        params = self.params(mid, out_trade_no, total, paid, state, transaction_id, **extra)
        return self.sim.alipay.build_notification(params), {}, params["trade_no"]

    def notify(self, mid, body, headers):
        headers = {"content-type": "application/x-www-form-urlencoded; charset=utf-8", **headers}
        return self.h.call("NotifyFunction", "POST", f"/notify/alipay/{mid}", body, headers, {"app_id": mid})

    def tamper(self, body, headers):
        fields = dict(parse_qsl(body.decode()))
        fields["total_amount"] = "0.01"  # the signature no longer covers what is said
        return urlencode(fields).encode(), headers

    def unusable(self, mid, out_trade_no):
        body, headers, _ = self.callback(mid, out_trade_no, "1e2")
        return body, headers


class AlipayCert(Alipay):
    name = "alipay_cert"
    mode = "cert"


class WeChatV2(Driver):
    name = "wechatpay_v2"
    raw_prefix = "wechatpay"
    order_channel = "wechatpay_v2"
    sign_type = "MD5"

    def setup(self, mchid=None):
        m = self.sim.wechatpay_v2.register_test_merchant(mchid, self.sign_type)
        wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
            mchid=m["mch_id"],
            api_key=m["api_key"],
            notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{m['mch_id']}",
        )
        return m["mch_id"]

    def callback(self, mid, out_trade_no, total, paid=None, state="SUCCESS", transaction_id=None, **extra):
        fields = self.sim.wechatpay_v2.payment_params(
            mid, out_trade_no, total, cash_fee=paid, result_code=state, transaction_id=transaction_id, **extra
        )
        if transaction_id == "":
            fields.pop("transaction_id")
        return self.sim.wechatpay_v2.build_notification(fields), {}, fields.get("transaction_id", "")

    def notify(self, mid, body, headers):
        return self.h.call(
            "NotifyFunction",
            "POST",
            f"/notify/wechatpay-v2/{mid}",
            body,
            {"content-type": "text/xml", **headers},
            {"mchid": mid},
        )

    def tamper(self, body, headers):
        return body.replace(b"<total_fee><![CDATA[", b"<total_fee><![CDATA[1"), headers

    def unusable(self, mid, out_trade_no):
        body, headers, _ = self.callback(mid, out_trade_no, "1.00")
        return body, headers


class WeChatV2Hmac(WeChatV2):
    name = "wechatpay_v2_hmac"
    sign_type = "HMAC-SHA256"


DRIVERS = [WeChatV3, Alipay, AlipayCert, WeChatV2, WeChatV2Hmac]
IN_BETWEEN = {
    "wechatpay_v3": ("NOTPAY", ""),
    "alipay": ("WAIT_BUYER_PAY", None),
    "alipay_cert": ("WAIT_BUYER_PAY", None),
    "wechatpay_v2": ("FAIL", ""),
    "wechatpay_v2_hmac": ("FAIL", ""),
}
UNKNOWN_STATE = {
    "wechatpay_v3": "SOMETHING_NEW",
    "alipay": "TRADE_SOMETHING",
    "alipay_cert": "TRADE_SOMETHING",
    "wechatpay_v2": "MAYBE",
    "wechatpay_v2_hmac": "MAYBE",
}


def ack_kind(driver_name: str, response: dict) -> str:
    """Classify a response by the channel's protocol: "success", "failure" or "foreign" (R6)."""
    body, status = response["body"], response["statusCode"]
    ctype = response.get("headers", {}).get("content-type")
    if driver_name == "wechatpay_v3":
        if status in (200, 204) and body == "":
            return "success"
        if 400 <= status < 600 and ctype == "application/json" and json.loads(body)["code"] == "FAIL":
            return "failure"
    elif driver_name.startswith("alipay"):
        if ctype == "text/plain" and body == "success" and status == 200:
            return "success"
        if ctype == "text/plain" and body == "fail":
            return "failure"
    else:
        success = (
            "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>"
        )
        if ctype == "text/xml" and body == success and status == 200:
            return "success"
        if ctype == "text/xml" and body.startswith("<xml><return_code><![CDATA[FAIL]]></return_code>"):
            return "failure"
    return "foreign"
