"""Where the µs of one WeChat Pay v3 callback go (issue #20 item 4): each stage of the notify path timed on
its own, with the same input bench.notify_cpu uses, next to the whole path and the PyPI `wechatpayv3`
reference. Process time, best of 7 runs of N calls per stage; the stages are run in isolation, so their sum
is below the whole (the whole path evicts the caches the isolated loop keeps warm).

    python -m bench.notify_stages [N]      # N calls per run, default 10,000
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tally.apigw import HttpRequest
from tally.channels import registry
from tally.channels.wechatpay_v3 import notify as wxn
from tally.channels.wechatpay_v3 import wire as wx
from tally.observability import M, count
from tally.service.ingest import ACKS, IngestService, raw_row

from bench.common import per_call_us
from bench.notify_cpu import _Merchants, _Stub
from tally_local.simulator import ChannelSimulator


def stages(n: int = 10_000) -> list[tuple[str, float]]:
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
    merchants = _Merchants(merchant)
    service = IngestService(merchants, _Stub(), _Stub(), _Stub(), clock=time.time)
    channel = registry.get("wechatpay_v3")
    request = HttpRequest("POST", f"/notify/wechatpay/{m['mchid']}", lower, body, {"mchid": m["mchid"]})
    event = {
        "routeKey": "POST /notify/wechatpay/{mchid}",
        "rawPath": request.path,
        "headers": headers,
        "body": body.decode(),
        "isBase64Encoded": False,
        "pathParameters": {"mchid": m["mchid"]},
        "requestContext": {"http": {"method": "POST"}},
    }
    key = creds.platform.get(lower["wechatpay-serial"])
    message = wx.signed_message(lower["wechatpay-timestamp"], lower["wechatpay-nonce"], body)
    signature = lower["wechatpay-signature"]
    text = body.decode()
    envelope = wx.parse_envelope(body)
    enc = envelope["resource"]
    plain = wx.aes_gcm_decrypt(creds.apiv3_key, enc["nonce"], enc["associated_data"], enc["ciphertext"])
    decoded = wx.open_resource(envelope, creds.apiv3_key)
    notice = wx.to_payment_notice(decoded)
    row = raw_row(notice, time.time(), body=body, headers=lower, envelope_id="x")
    acks = ACKS[channel.name]

    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from wechatpayv3.utils import aes_decrypt, rsa_verify

    public_key = load_pem_public_key(sim.public_key_pem.encode())

    def reference():
        rsa_verify(
            lower["wechatpay-timestamp"], lower["wechatpay-nonce"], body.decode(), signature, public_key
        )
        aes_decrypt(enc["nonce"], enc["ciphertext"], enc["associated_data"], m["apiv3_key"])

    def header_checks():  # verify_signed with the RSA step answered by a key that is not asked
        try:
            wx.verify_signed(lower, body, wx.PlatformKeys(), time.time())
        except wx.WeChatSignatureError:
            pass

    rows: list[tuple[str, Callable]] = [
        ("HttpRequest.from_event (handler, not in notify_cpu)", lambda: HttpRequest.from_event(event)),
        ("merchant lookup", lambda: channel.merchant(merchants, m["mchid"])),
        ("header checks (verify_signed up to the key lookup)", header_checks),
        ("signed message build", lambda: wx.signed_message(lower["wechatpay-timestamp"], "n", body)),
        ("RSA verify (rsa_verify)", lambda: wx.rsa_verify(key, message, signature)),
        ("body decode, once (body_text)", lambda: wx.body_text(body)),
        ("envelope parse (parse_envelope of the text)", lambda: wx.parse_envelope(body, text)),
        (
            "AES-GCM decrypt",
            lambda: wx.aes_gcm_decrypt(
                creds.apiv3_key, enc["nonce"], enc["associated_data"], enc["ciphertext"]
            ),
        ),
        ("resource JSON parse (wire._json)", lambda: wx._json(plain)),
        ("open_resource (decrypt + parse + checks)", lambda: wx.open_resource(envelope, creds.apiv3_key)),
        ("model build (to_payment_notice, R43 settlement)", lambda: wx.to_payment_notice(decoded)),
        (
            "read_notification (verify .. notice)",
            lambda: wxn.read_notification(request, merchant, merchants, clock=time.time, window_s=300),
        ),
        (
            "raw row build (raw_row, body text given)",
            lambda: raw_row(notice, time.time(), body=body, headers=lower, body_text=text),
        ),
        ("SQS message (as_message)", notice.as_message),
        ("metrics (count)", lambda: count(M.NOTIFY_ACCEPTED, channel="wechatpay", merchant=m["mchid"])),
        ("ACK (success + to_event)", lambda: acks.success().to_event()),
        ("whole: service.notify (what bench.notify_cpu times)", lambda: service.notify(channel, request)),
        ("reference: wechatpayv3 verify + decrypt", reference),
    ]
    assert row["pk"] and service.notify(channel, request).status == 204
    return [(name, per_call_us(fn, n=n, repeat=7, clock=time.process_time)) for name, fn in rows]


if __name__ == "__main__":
    from tally.observability import _pending

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    result = stages(n)
    _pending.clear()
    width = max(len(name) for name, _ in result)
    for name, us in result:
        print(f"{name.ljust(width)}  {us:7.1f} µs")
