"""Notify CPU per WeChat Pay v3 callback (verify + decrypt + parse + ACK; AWS stubbed out), with what Powertools
adds to every invocation of the handler (its Logger's inject_lambda_context and the Metrics flush that prints
the callback's EMF line), next to the PyPI `wechatpayv3` package's own verify + decrypt of the same input.
Process time, best of 7 runs of 2,000 calls: on a shared machine wall time measures the neighbours."""

from __future__ import annotations

import contextlib
import io
import time

from tally.apigw import HttpRequest
from tally.channels import registry
from tally.channels.wechatpay_v3 import wire as wx
from tally.service.ingest import IngestService

from bench.common import per_call_us
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

    public_key = load_pem_public_key(sim.public_key_pem.encode())
    envelope = wx.parse_envelope(body)["resource"]

    def reference():
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
    with contextlib.redirect_stdout(io.StringIO()):  # the EMF line of every call
        ours = per_call_us(lambda: handler(None, context), repeat=7, clock=time.process_time)
        bare = per_call_us(
            lambda: service.notify(registry.get("wechatpay_v3"), request), repeat=7, clock=time.process_time
        )
        metrics.clear_metrics()
    theirs = per_call_us(reference, repeat=7, clock=time.process_time)
    return [
        (
            "notify CPU per WeChat v3 callback (verify+decrypt+parse+ACK, Powertools Logger+Metrics)",
            f"{ours:.0f} µs",
            f"wechatpayv3 verify+decrypt {theirs:.0f} µs",
            f"ratio {ours / theirs:.2f}",
        ),
        (
            "notify CPU per WeChat v3 callback, the service alone (no handler decorators)",
            f"{bare:.0f} µs",
            f"wechatpayv3 verify+decrypt {theirs:.0f} µs",
            f"ratio {bare / theirs:.2f}",
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
    a, b = (
        per_call_us(ours, repeat=7, clock=time.process_time),
        per_call_us(reference, repeat=7, clock=time.process_time),
    )
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
