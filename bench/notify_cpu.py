"""Notify CPU per WeChat Pay v3 callback (verify + decrypt + parse + ACK; AWS stubbed out), with what Powertools
adds to every invocation of the handler (its Logger's inject_lambda_context and the Metrics flush that prints
the callback's EMF line), next to the PyPI `wechatpayv3` package's own verify + decrypt of the same callback
(`WeChatPay.decrypt_callback(headers, body)`: the raw headers and body in, as ours) and next to its two
primitives alone (`rsa_verify` + `aes_decrypt` with the resource's fields already out of the body).
Process time, best of 15 rounds of 1,000 calls, the four taking turns in every round (bench.common
interleaved_per_call_us): on a shared machine wall time measures the neighbours."""

from __future__ import annotations

import contextlib
import os
import time

from tally.apigw import HttpRequest
from tally.channels import registry
from tally.channels.wechatpay_v3 import wire as wx
from tally.service.ingest import IngestService

from bench.common import interleaved_per_call_us
from tally_local.simulator import ChannelSimulator


class _Stub:
    """Stand-ins for DynamoDB/SQS: this figure is the CPU of the notify code itself."""

    def put_new(self, row):
        return None

    def send(self, key, notice=None):
        return None

    def put(self, *a, **k):
        return None


class _Merchants:
    def __init__(self, merchant):
        self.merchant = merchant

    def desk(self, channel):  # the v3 desk's accessor, answered here
        return self

    def wechatpay(self, mchid):
        return self.merchant


def run_wechat() -> list[tuple[str, ...]]:
    from wechatpayv3.utils import aes_decrypt, rsa_verify

    sim = ChannelSimulator(fixed_keys=True)
    m = sim.register_test_merchant()
    resource = sim.transaction_resource(m["mchid"], "BENCH-ORDER-01", 100)
    headers, body = sim.build_notification(m["mchid"], resource)
    lower = {k.lower(): v for k, v in headers.items()}
    creds = wx.MerchantCredentials(
        m["mchid"],
        m["apiv3_key"].encode(),
        wx.load_private_key(m["merchant_private_key_pem"]),
        m["merchant_serial"],
        wx.PlatformKeys.from_pems([], sim.public_key_pem, sim.public_key_id),
    )
    merchant = type("M", (), {"creds": creds})()
    service = IngestService(_Merchants(merchant), _Stub(), _Stub(), _Stub(), clock=time.time)
    request = HttpRequest("POST", f"/notify/wechatpay/{m['mchid']}", lower, body, {"mchid": m["mchid"]})
    assert service.notify(registry.get("wechatpay_v3"), request).status == 204

    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from wechatpayv3 import WeChatPay, WeChatPayType

    sdk = WeChatPay(  # the SDK in platform-public-key mode: nothing fetched, the key given
        WeChatPayType.NATIVE,
        m["mchid"],
        m["merchant_private_key_pem"],
        m["merchant_serial"],
        "wxd678efh567hg6787",
        m["apiv3_key"],
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )

    def reference():  # the SDK's own verify + decrypt of a callback, from the same raw headers and body
        assert sdk.decrypt_callback(headers, body)

    public_key = load_pem_public_key(sim.public_key_pem.encode())
    envelope = wx.parse_envelope(body)["resource"]

    def primitives():  # its two primitives alone, the resource's fields already taken out of the body
        assert rsa_verify(
            lower["wechatpay-timestamp"],
            lower["wechatpay-nonce"],
            body.decode(),
            lower["wechatpay-signature"],
            public_key,
        )
        assert aes_decrypt(
            envelope["nonce"], envelope["ciphertext"], envelope["associated_data"], m["apiv3_key"]
        )

    from tally.observability import lean_lambda_context, metrics

    from tally_local.resources import LambdaContext

    @lean_lambda_context
    @metrics.log_metrics
    def handler(event, context):  # functions/notify/app.py's decorators around the service call
        return service.notify(registry.get("wechatpay_v3"), request)

    context = LambdaContext("NotifyFunction")
    # the EMF line of every call goes where Lambda's stdout goes, a buffered text stream on a file descriptor
    # (a StringIO would grow by megabytes over the rounds and time its own reallocation)
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        found = interleaved_per_call_us(
            {
                "ours": lambda: handler(None, context),
                "bare": lambda: service.notify(registry.get("wechatpay_v3"), request),
                "sdk": reference,
                "primitives": primitives,
            }
        )
        metrics.clear_metrics()
    ours, bare, sdk_us, bare_sdk = found["ours"], found["bare"], found["sdk"], found["primitives"]
    return [
        (
            "notify CPU per WeChat v3 callback (verify+decrypt+parse+ACK, Powertools Logger+Metrics)",
            f"{ours:.0f} µs",
            f"wechatpayv3 WeChatPay.decrypt_callback {sdk_us:.0f} µs",
            f"ratio {ours / sdk_us:.2f}; to its rsa_verify + aes_decrypt alone ({bare_sdk:.0f} µs): "
            f"{ours / bare_sdk:.2f}",
        ),
        (
            "notify CPU per WeChat v3 callback, the service alone (no handler decorators)",
            f"{bare:.0f} µs",
            f"wechatpayv3 WeChatPay.decrypt_callback {sdk_us:.0f} µs",
            f"ratio {bare / sdk_us:.2f}; to rsa_verify + aes_decrypt alone: {bare / bare_sdk:.2f}",
        ),
    ]


def run_alipay() -> list[tuple[str, ...]]:
    """Alipay: our form decode + RSA2 verify + parse to cents, next to python-alipay-sdk's AliPay.verify."""
    from urllib.parse import parse_qsl

    from alipay import AliPay
    from tally.channels.alipay import wire as ali
    from tally.channels.alipay.merchant import alipay_credentials

    sim = ChannelSimulator(fixed_keys=True)
    m = sim.alipay.register_test_merchant("public_key")
    params = sim.alipay.notification_params(m["app_id"], "BENCH-ALIPAY-1", 100)
    body = sim.alipay.build_notification(params)
    creds = alipay_credentials(
        {
            "app_id": m["app_id"],
            "app_private_key": m["app_private_key_pem"],
            "alipay_public_key": m["alipay_public_key_pem"],
        },
        time.time(),
    )

    def ours():
        fields = ali.parse_form(body)
        ali.verify_notification(fields, creds.keys)
        return ali.to_payment_notice(fields)

    sdk = AliPay(
        appid=m["app_id"],
        app_private_key_string=m["app_private_key_pem"],
        alipay_public_key_string=m["alipay_public_key_pem"],
    )

    def reference():
        data = dict(parse_qsl(body.decode(), keep_blank_values=True))
        signature = data.pop("sign")
        assert sdk.verify(data, signature)

    assert ours().paid_cent == 100
    found = interleaved_per_call_us({"ours": ours, "sdk": reference}, n=300)
    a, b = found["ours"], found["sdk"]
    return [
        (
            "notify CPU per Alipay callback (decode+verify+parse to cents)",
            f"{a:.0f} µs",
            f"python-alipay-sdk verify {b:.0f} µs",
            f"ratio {a / b:.2f}",
        )
    ]


def run() -> list[tuple[str, ...]]:
    return run_wechat() + run_alipay()


if __name__ == "__main__":
    from bench.common import print_section

    print_section(run)
