"""The channel simulator against an independent implementation of the wire (PyPI ``wechatpayv3``)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from wechatpayv3.core import Core
from wechatpayv3.type import RequestType
from wechatpayv3.utils import (
    aes_decrypt,
    build_authorization,
    load_certificate,
    load_private_key,
    load_public_key,
    rsa_verify,
)

from tally_local.simulator import RETRY_SCHEDULE_S, ChannelSimulator, test_merchant

TIME_SCALE = 0.01


# ----------------------------------------------------------------------------------------------- helpers
class Receiver:
    """A tiny notify_url endpoint: records every request, answers from a status script."""

    def __init__(self, statuses: list[int] | None = None, default: int = 204):
        self.statuses = list(statuses or [])
        self.default = default
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.default
                out = (
                    b""
                    if status == 204
                    else json.dumps({"code": "SUCCESS" if status == 200 else "FAIL", "message": "x"}).encode()
                )
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = (
            f"http://127.0.0.1:{self.server.server_address[1]}/notify/wechatpay/{test_merchant()['mchid']}"
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def raw_request(
    base_url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
):
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def signed_request(sim: ChannelSimulator, merchant: dict[str, str], method: str, path: str, data: Any = None):
    """A request signed by wechatpayv3's own ``build_authorization`` (independent of the simulator)."""
    body = json.dumps(data) if data is not None else ""
    key = load_private_key(merchant["merchant_private_key_pem"])
    auth = build_authorization(path, method, merchant["mchid"], merchant["merchant_serial"], key, data=body)
    headers = {"Authorization": auth, "Content-Type": "application/json", "Accept": "application/json"}
    return raw_request(sim.url, method, path, body.encode(), headers), auth, body


def verify_platform_signature(sim: ChannelSimulator, headers: dict[str, str], body: bytes) -> bool:
    h = {k.lower(): v for k, v in headers.items()}
    serial = h["wechatpay-serial"]
    if serial == sim.public_key_id:
        public_key = load_public_key(sim.public_key_pem)
    else:
        pem = next(c["pem"] for c in sim.platform_certificates if c["serial"] == serial)
        public_key = load_certificate(pem).public_key()
    return rsa_verify(
        h["wechatpay-timestamp"],
        h["wechatpay-nonce"],
        body.decode("utf-8"),
        h["wechatpay-signature"],
        public_key,
    )


def decrypt_resource(merchant: dict[str, str], body: bytes) -> dict[str, Any]:
    r = json.loads(body)["resource"]
    plain = aes_decrypt(r["nonce"], r["ciphertext"], r["associated_data"], merchant["apiv3_key"])
    assert plain is not None, "AEAD tag check failed"
    return json.loads(plain)


def sdk_client(sim: ChannelSimulator, merchant: dict[str, str]) -> Core:
    """wechatpayv3's client in public-key mode, pointed at the simulator."""
    core = Core(
        mchid=merchant["mchid"],
        cert_serial_no=merchant["merchant_serial"],
        private_key=merchant["merchant_private_key_pem"],
        apiv3_key=merchant["apiv3_key"],
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
        timeout=10,
    )
    core._gate_way = sim.url
    return core


def native_order(merchant: dict[str, str], out_trade_no: str, total: int, notify_url: str) -> dict[str, Any]:
    return {
        "appid": merchant["appid"],
        "mchid": merchant["mchid"],
        "description": "测试商品",
        "out_trade_no": out_trade_no,
        "notify_url": notify_url,
        "amount": {"total": total, "currency": "CNY"},
    }


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def sim():
    s = ChannelSimulator(port=0, time_scale=TIME_SCALE, fixed_keys=True).start()
    yield s
    s.stop()


@pytest.fixture
def merchant(sim: ChannelSimulator) -> dict[str, str]:
    return sim.register_test_merchant(verify_mode="public_key")


@pytest.fixture
def receiver():
    receivers: list[Receiver] = []

    def make(statuses: list[int] | None = None, default: int = 204) -> Receiver:
        r = Receiver(statuses, default)
        receivers.append(r)
        return r

    yield make
    for r in receivers:
        r.close()


# ----------------------------------------------------------------------------------------------- keys
def test_keys_shape(sim: ChannelSimulator) -> None:
    assert len(sim.platform_serial) == 40 and sim.platform_serial == sim.platform_serial.upper()
    int(sim.platform_serial, 16)
    assert load_certificate(sim.platform_cert_pem).serial_number == int(sim.platform_serial, 16)
    assert sim.public_key_id.startswith("PUB_KEY_ID_0114")
    assert "BEGIN PUBLIC KEY" in sim.public_key_pem
    fresh = ChannelSimulator()  # generated keys
    assert len(fresh.platform_serial) == 40 and fresh.platform_serial != sim.platform_serial
    assert fresh.public_key_id.startswith("PUB_KEY_ID_0114") and len(fresh.public_key_id) == len(
        sim.public_key_id
    )


# ----------------------------------------------------------------------------------------------- builder
@pytest.mark.parametrize("verify_mode", ["public_key", "certificate"])
def test_built_notification_verifies_and_decrypts_with_wechatpayv3(
    sim: ChannelSimulator, verify_mode: str
) -> None:
    m = sim.register_test_merchant(verify_mode=verify_mode)
    resource = sim.transaction_resource(m["mchid"], "ORDER0001", 100, payer_total=90)
    headers, body = sim.build_notification(m["mchid"], resource)

    expected_serial = sim.public_key_id if verify_mode == "public_key" else sim.platform_serial
    assert headers["Wechatpay-Serial"] == expected_serial
    assert headers["Wechatpay-Signature-Type"] == "WECHATPAY2-SHA256-RSA2048"
    assert headers["Content-Type"] == "application/json" and headers["Request-ID"]
    key = (
        load_public_key(sim.public_key_pem)
        if verify_mode == "public_key"
        else load_certificate(sim.platform_cert_pem).public_key()
    )
    assert rsa_verify(
        headers["Wechatpay-Timestamp"],
        headers["Wechatpay-Nonce"],
        body.decode(),
        headers["Wechatpay-Signature"],
        key,
    )
    assert not rsa_verify(
        headers["Wechatpay-Timestamp"],
        headers["Wechatpay-Nonce"],
        body.decode() + " ",
        headers["Wechatpay-Signature"],
        key,
    )

    envelope = json.loads(body)
    assert body == json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()  # compact
    assert set(envelope) == {"id", "create_time", "resource_type", "event_type", "summary", "resource"}
    assert envelope["resource_type"] == "encrypt-resource" and envelope["event_type"] == "TRANSACTION.SUCCESS"
    assert envelope["summary"] == "支付成功" and envelope["create_time"].endswith("+08:00")
    r = envelope["resource"]
    assert set(r) == {"original_type", "algorithm", "ciphertext", "associated_data", "nonce"}
    assert (r["original_type"], r["algorithm"], r["associated_data"]) == (
        "transaction",
        "AEAD_AES_256_GCM",
        "transaction",
    )
    assert len(r["nonce"]) == 12 and r["nonce"].isalnum()
    assert aes_decrypt(r["nonce"], r["ciphertext"], r["associated_data"], "0" * 32) is None  # wrong key

    plain = decrypt_resource(m, body)
    assert plain == resource
    assert plain["amount"] == {"total": 100, "payer_total": 90, "currency": "CNY", "payer_currency": "CNY"}
    assert plain["promotion_detail"][0]["amount"] == 10
    assert len(plain["transaction_id"]) == 28 and plain["transaction_id"].startswith("4200")

    # The whole thing through wechatpayv3's own callback parser (cert mode fetches /v3/certificates).
    parsed = sdk_client(sim, m).callback(headers, body)
    assert parsed is not None and parsed["resource"] == resource


def test_builder_faults(sim: ChannelSimulator, merchant: dict[str, str]) -> None:
    resource = sim.transaction_resource(merchant["mchid"], "ORDER0002", 1)
    core = sdk_client(sim, merchant)
    h, b = sim.build_notification(merchant["mchid"], resource, signature_override="WECHATPAY/SIGNTEST/abc")
    assert core.callback(h, b) is None
    h, b = sim.build_notification(merchant["mchid"], resource, apiv3_key="k" * 32)
    assert core.callback(h, b) is None  # signature fine, AEAD fails
    h, b = sim.build_notification(
        merchant["mchid"],
        resource,
        serial=sim.platform_serial,
        timestamp=1_600_000_000,
        nonce="FIXEDNONCE",
        associated_data="",
    )
    assert h["Wechatpay-Timestamp"] == "1600000000" and h["Wechatpay-Nonce"] == "FIXEDNONCE"
    assert verify_platform_signature(sim, h, b) and h["Wechatpay-Serial"] == sim.platform_serial
    assert decrypt_resource(merchant, b) == resource
    refund = sim.refund_resource(merchant["mchid"], "ORDER0002", resource["transaction_id"], "R0001", 1, 1)
    h, b = sim.build_notification(
        merchant["mchid"], refund, event_type="REFUND.SUCCESS", associated_data="refund"
    )
    env = json.loads(b)
    assert env["summary"] == "退款成功" and env["resource"]["original_type"] == "refund"
    assert core.callback(h, b)["resource"]["refund_status"] == "SUCCESS"


# ----------------------------------------------------------------------------------------------- API auth
def test_signed_requests_accepted_and_tampered_rejected(
    sim: ChannelSimulator, merchant: dict[str, str]
) -> None:
    data = native_order(merchant, "ORDER0100", 100, "http://127.0.0.1:9/notify")
    (status, headers, body), auth, sent = signed_request(
        sim, merchant, "POST", "/v3/pay/transactions/native", data
    )
    assert status == 200, body
    assert json.loads(body)["code_url"].startswith("weixin://wxpay/bizpayurl?pr=")
    assert verify_platform_signature(sim, headers, body)
    assert headers["wechatpay-serial"] == sim.public_key_id and headers["request-id"]

    # Same Authorization, body changed by one fen → 401 SIGN_ERROR (and the error is signed too).
    tampered = sent.replace('"total": 100', '"total": 1').encode()
    status, headers, body = raw_request(
        sim.url,
        "POST",
        "/v3/pay/transactions/native",
        tampered,
        {"Authorization": auth, "Content-Type": "application/json"},
    )
    assert status == 401 and json.loads(body)["code"] == "SIGN_ERROR"
    assert verify_platform_signature(sim, headers, body)

    # Signature replaced, wrong serial_no, no Authorization at all.
    bad_sig = auth.replace('signature="', 'signature="AAAA')
    assert (
        raw_request(
            sim.url, "POST", "/v3/pay/transactions/native", sent.encode(), {"Authorization": bad_sig}
        )[0]
        == 401
    )
    bad_serial = auth.replace(merchant["merchant_serial"], "0" * 40)
    assert (
        raw_request(
            sim.url, "POST", "/v3/pay/transactions/native", sent.encode(), {"Authorization": bad_serial}
        )[0]
        == 401
    )
    assert raw_request(sim.url, "GET", "/v3/certificates")[0] == 401
    # Path is part of the message: a signature for one query URL does not work for another.
    (status, _, _), auth, _ = signed_request(
        sim, merchant, "GET", f"/v3/pay/transactions/out-trade-no/ORDER0100?mchid={merchant['mchid']}"
    )
    assert status == 200
    assert (
        raw_request(
            sim.url,
            "GET",
            "/v3/pay/transactions/out-trade-no/ORDER0101?mchid=" + merchant["mchid"],
            headers={"Authorization": auth},
        )[0]
        == 401
    )


def test_order_lifecycle_through_wechatpayv3(sim: ChannelSimulator, merchant: dict[str, str]) -> None:
    core = sdk_client(sim, merchant)  # verifies every 2xx response signature itself (raises otherwise)
    notify = "http://127.0.0.1:9/notify"
    code, text = core.request(
        "/v3/pay/transactions/native", RequestType.POST, native_order(merchant, "ORDER0200", 500, notify)
    )
    assert code == 200
    code_url = json.loads(text)["code_url"]
    code, text = core.request(
        "/v3/pay/transactions/native", RequestType.POST, native_order(merchant, "ORDER0200", 500, notify)
    )
    assert (code, json.loads(text)["code_url"]) == (200, code_url)
    code, text = core.request(
        "/v3/pay/transactions/native", RequestType.POST, native_order(merchant, "ORDER0200", 501, notify)
    )
    assert code == 400 and json.loads(text)["code"] == "INVALID_REQUEST"
    bad = native_order(merchant, "ORDER0201", 1, notify)
    bad["appid"] = "wx0000000000000000"
    assert (
        json.loads(core.request("/v3/pay/transactions/native", RequestType.POST, bad)[1])["code"]
        == "APPID_MCHID_NOT_MATCH"
    )

    q = f"/v3/pay/transactions/out-trade-no/ORDER0200?mchid={merchant['mchid']}"
    code, text = core.request(q)
    unpaid = json.loads(text)
    assert code == 200 and unpaid["trade_state"] == "NOTPAY"
    assert not {"transaction_id", "success_time", "payer", "bank_type", "trade_type"} & set(unpaid)
    assert unpaid["amount"]["total"] == 500

    code, text = core.request(f"/v3/pay/transactions/out-trade-no/NOSUCHORDER?mchid={merchant['mchid']}")
    assert code == 404 and json.loads(text) == {"code": "ORDER_NOT_EXIST", "message": "订单不存在"}

    tid = sim.pay(merchant["mchid"], "ORDER0200", drop=True)
    code, text = core.request(q)
    paid = json.loads(text)
    assert code == 200 and paid["trade_state"] == "SUCCESS" and paid["transaction_id"] == tid
    assert paid["trade_type"] == "NATIVE" and paid["bank_type"] == "OTHERS" and paid["attach"] == ""
    assert paid["success_time"].endswith("+08:00") and paid["payer"]["openid"]
    assert paid["amount"] == {"total": 500, "payer_total": 500, "currency": "CNY", "payer_currency": "CNY"}
    code, text = core.request(f"/v3/pay/transactions/id/{tid}?mchid={merchant['mchid']}")
    assert json.loads(text) == paid
    close = "/v3/pay/transactions/out-trade-no/ORDER0200/close"
    code, text = core.request(close, RequestType.POST, {"mchid": merchant["mchid"]})
    assert code == 400 and json.loads(text)["code"] == "ORDER_PAID"
    assert sim.deliveries == []  # drop=True

    core.request(
        "/v3/pay/transactions/native", RequestType.POST, native_order(merchant, "ORDER0202", 7, notify)
    )
    code, _ = core.request(
        "/v3/pay/transactions/out-trade-no/ORDER0202/close", RequestType.POST, {"mchid": merchant["mchid"]}
    )
    assert code == 204  # wechatpayv3 verified the empty-body signature ("ts\nnonce\n\n")
    assert (
        json.loads(core.request(f"/v3/pay/transactions/out-trade-no/ORDER0202?mchid={merchant['mchid']}")[1])[
            "trade_state"
        ]
        == "CLOSED"
    )


def test_204_signature_message_ends_with_single_newline(
    sim: ChannelSimulator, merchant: dict[str, str]
) -> None:
    signed_request(
        sim,
        merchant,
        "POST",
        "/v3/pay/transactions/native",
        native_order(merchant, "ORDER0300", 1, "http://127.0.0.1:9/n"),
    )
    (status, headers, body), _, _ = signed_request(
        sim,
        merchant,
        "POST",
        "/v3/pay/transactions/out-trade-no/ORDER0300/close",
        {"mchid": merchant["mchid"]},
    )
    assert status == 204 and body == b""
    key = load_public_key(sim.public_key_pem)
    assert rsa_verify(
        headers["wechatpay-timestamp"], headers["wechatpay-nonce"], "", headers["wechatpay-signature"], key
    )


# ----------------------------------------------------------------------------------------------- delivery
def test_pay_delivers_with_retries_until_204(
    sim: ChannelSimulator, merchant: dict[str, str], receiver
) -> None:
    rcv = receiver(statuses=[500, 503], default=204)
    core = sdk_client(sim, merchant)
    code, _ = core.request(
        "/v3/pay/transactions/native", RequestType.POST, native_order(merchant, "ORDER0400", 100, rcv.url)
    )
    assert code == 200
    tid = sim.pay(merchant["mchid"], "ORDER0400")
    ok = sim.wait_delivered(tid, timeout=10)
    assert len(ok) == 1 and ok[0]["attempt"] == 3 and ok[0]["status"] == 204

    attempts = [d for d in sim.deliveries if d["transaction_id"] == tid]
    assert [(d["attempt"], d["status"]) for d in attempts] == [(1, 500), (2, 503), (3, 204)]
    assert all(d["out_trade_no"] == "ORDER0400" and d["elapsed_ms"] >= 0 for d in attempts)
    gap = RETRY_SCHEDULE_S[0] * TIME_SCALE * 1000
    assert attempts[1]["elapsed_ms"] - attempts[0]["elapsed_ms"] >= gap * 0.8
    assert (
        attempts[2]["elapsed_ms"] - attempts[1]["elapsed_ms"] >= RETRY_SCHEDULE_S[1] * TIME_SCALE * 1000 * 0.8
    )
    time.sleep(0.4)
    assert len(rcv.received) == 3  # stopped at the first 204

    bodies = {r["body"] for r in rcv.received}
    assert len(bodies) == 1  # the same notification ...
    assert len({r["headers"]["Wechatpay-Nonce"] for r in rcv.received}) == 3  # ... freshly signed each time
    for r in rcv.received:
        assert r["path"] == urlsplit(rcv.url).path
        assert r["headers"]["Content-Type"] == "application/json"
        assert (
            r["headers"]["Request-ID"]
            and r["headers"]["Wechatpay-Signature-Type"] == "WECHATPAY2-SHA256-RSA2048"
        )
        assert verify_platform_signature(sim, r["headers"], r["body"])
        assert core.callback(r["headers"], r["body"]) is not None
    plain = decrypt_resource(merchant, rcv.received[0]["body"])
    assert plain == json.loads(
        core.request(f"/v3/pay/transactions/out-trade-no/ORDER0400?mchid={merchant['mchid']}")[1]
    )
    assert plain["transaction_id"] == tid and plain["amount"]["total"] == 100

    # admin view over HTTP
    status, _, body = raw_request(sim.url, "GET", f"/_sim/deliveries?transaction_id={tid}")
    assert status == 200 and [d["status"] for d in json.loads(body)["deliveries"]] == [500, 503, 204]
    status, _, body = raw_request(sim.url, "GET", f"/_sim/orders/{merchant['mchid']}/ORDER0400")
    assert status == 200 and json.loads(body)["trade_state"] == "SUCCESS"


def test_duplicates_deliver_concurrently(sim: ChannelSimulator, merchant: dict[str, str], receiver) -> None:
    rcv = receiver(default=200)
    (status, _, _), _, _ = signed_request(
        sim, merchant, "POST", "/v3/pay/transactions/native", native_order(merchant, "ORDER0500", 42, rcv.url)
    )
    assert status == 200
    tid = sim.pay(merchant["mchid"], "ORDER0500", duplicates=5)
    ok = sim.wait_delivered(tid, timeout=10, count=5)
    assert sorted(d["copy"] for d in ok) == [0, 1, 2, 3, 4]
    assert len(rcv.received) == 5 and len({r["body"] for r in rcv.received}) == 1
    assert all(verify_platform_signature(sim, r["headers"], r["body"]) for r in rcv.received)


def test_admin_http_pay_faults_and_mixed_mode(sim: ChannelSimulator, receiver) -> None:
    m = test_merchant()
    status, _, body = raw_request(
        sim.url,
        "POST",
        "/_sim/merchants",
        json.dumps(
            {
                "mchid": m["mchid"],
                "apiv3_key": m["apiv3_key"],
                "merchant_public_key_pem": m["merchant_cert_pem"],
                "merchant_serial": m["merchant_serial"],
                "appid": m["appid"],
                "verify_mode": "certificate",
            }
        ).encode(),
    )
    assert status == 201 and json.loads(body)["platform_serial"] == sim.platform_serial
    rcv = receiver(default=204)
    signed_request(sim, m, "POST", "/v3/pay/transactions/native", native_order(m, "ORDER0600", 300, rcv.url))
    status, _, body = raw_request(
        sim.url,
        "POST",
        "/_sim/pay",
        json.dumps(
            {
                "mchid": m["mchid"],
                "out_trade_no": "ORDER0600",
                "amount_total": 1,
                "payer_total": 1,
                "probe": True,
            }
        ).encode(),
    )
    assert status == 200
    tid = json.loads(body)["transaction_id"]
    sim.wait_delivered(tid, timeout=10)
    deadline = time.monotonic() + 5
    while len(sim.deliveries) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    kinds = sorted(d["kind"] for d in sim.deliveries)
    assert kinds == ["notification", "probe"]
    probe = next(
        r for r in rcv.received if r["headers"]["Wechatpay-Signature"].startswith("WECHATPAY/SIGNTEST/")
    )
    assert not verify_platform_signature(sim, probe["headers"], probe["body"])
    real = next(r for r in rcv.received if r is not probe)
    assert real["headers"]["Wechatpay-Serial"] == sim.platform_serial
    assert decrypt_resource(m, real["body"])["amount"]["total"] == 1  # wrong-amount fault

    # paying twice / unknown orders are refused
    assert (
        raw_request(
            sim.url,
            "POST",
            "/_sim/pay",
            json.dumps({"mchid": m["mchid"], "out_trade_no": "ORDER0600"}).encode(),
        )[0]
        == 400
    )
    assert (
        raw_request(
            sim.url,
            "POST",
            "/_sim/pay",
            json.dumps({"mchid": m["mchid"], "out_trade_no": "NOSUCHORDER"}).encode(),
        )[0]
        == 404
    )

    # API faults
    assert (
        raw_request(
            sim.url,
            "POST",
            "/_sim/faults",
            json.dumps(
                {"kind": "error", "status": 500, "code": "SYSTEM_ERROR", "path_contains": "/out-trade-no/"}
            ).encode(),
        )[0]
        == 201
    )
    q = f"/v3/pay/transactions/out-trade-no/ORDER0600?mchid={m['mchid']}"
    (status, headers, body), _, _ = signed_request(sim, m, "GET", q)
    assert (
        status == 500
        and json.loads(body)["code"] == "SYSTEM_ERROR"
        and verify_platform_signature(sim, headers, body)
    )
    sim.inject_fault("unsigned")
    (status, headers, _), _, _ = signed_request(sim, m, "GET", q)
    assert status == 200 and "wechatpay-signature" not in headers
    sim.inject_fault("bad_signature")
    (status, headers, body), _, _ = signed_request(sim, m, "GET", q)
    assert status == 200 and not verify_platform_signature(sim, headers, body)
    (status, headers, body), _, _ = signed_request(sim, m, "GET", q)
    assert status == 200 and verify_platform_signature(sim, headers, body)

    # migration period: serials switch at random between the two keys
    sim.register_merchant(
        m["mchid"],
        m["apiv3_key"],
        m["merchant_public_key_pem"],
        m["merchant_serial"],
        appid=m["appid"],
        verify_mode="mixed",
    )
    res = sim.transaction_resource(m["mchid"], "ORDER0600", 1)
    serials = {sim.build_notification(m["mchid"], res)[0]["Wechatpay-Serial"] for _ in range(40)}
    assert serials == {sim.platform_serial, sim.public_key_id}


def test_stop_cancels_pending_retries(receiver) -> None:
    s = ChannelSimulator(time_scale=1.0).start()  # 15 s between attempts: nothing more should happen
    try:
        m = s.register_test_merchant()
        rcv = receiver(default=500)
        signed_request(s, m, "POST", "/v3/pay/transactions/native", native_order(m, "ORDER0700", 1, rcv.url))
        tid = s.pay(m["mchid"], "ORDER0700")
        deadline = time.monotonic() + 5
        while not s.deliveries and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [d["status"] for d in s.deliveries] == [500]
        with pytest.raises(TimeoutError):
            s.wait_delivered(tid, timeout=0.2)
    finally:
        t0 = time.monotonic()
        s.stop()
    assert time.monotonic() - t0 < 3
    assert len(rcv.received) == 1


# ----------------------------------------------------------------------------------------------- certificates
def test_certificates_endpoint_and_rotation(sim: ChannelSimulator, merchant: dict[str, str]) -> None:
    first = sim.platform_serial
    (status, headers, body), _, _ = signed_request(sim, merchant, "GET", "/v3/certificates")
    assert (
        status == 200
        and headers["wechatpay-serial"] == first
        and verify_platform_signature(sim, headers, body)
    )
    (item,) = json.loads(body)["data"]
    enc = item["encrypt_certificate"]
    assert item["serial_no"] == first and enc["algorithm"] == "AEAD_AES_256_GCM"
    assert enc["associated_data"] == "certificate" and len(enc["nonce"]) == 12
    assert item["effective_time"].endswith("+08:00") and item["expire_time"].endswith("+08:00")
    pem = aes_decrypt(enc["nonce"], enc["ciphertext"], enc["associated_data"], merchant["apiv3_key"])
    assert pem == sim.platform_cert_pem
    assert format(load_certificate(pem).serial_number, "X") == first

    second = sim.rotate_platform_certificate()
    assert second != first and sim.platform_serial == second and len(second) == 40
    (status, headers, body), _, _ = signed_request(sim, merchant, "GET", "/v3/certificates")
    data = json.loads(body)["data"]
    assert status == 200 and headers["wechatpay-serial"] == second
    assert [d["serial_no"] for d in data] == [first, second]
    for d in data:
        e = d["encrypt_certificate"]
        cert = load_certificate(
            aes_decrypt(e["nonce"], e["ciphertext"], e["associated_data"], merchant["apiv3_key"])
        )
        assert format(cert.serial_number, "X") == d["serial_no"]

    # Notifications in cert mode now carry the new serial; wechatpayv3 fetches /v3/certificates on the miss.
    sim.register_test_merchant(verify_mode="certificate")
    res = sim.transaction_resource(merchant["mchid"], "ORDER0800", 5)
    h, b = sim.build_notification(merchant["mchid"], res)
    assert h["Wechatpay-Serial"] == second
    assert sdk_client(sim, merchant).callback(h, b)["resource"] == res
    h, b = sim.build_notification(merchant["mchid"], res, serial=first)  # the old one is still valid
    assert h["Wechatpay-Serial"] == first and sdk_client(sim, merchant).callback(h, b)["resource"] == res


# ----------------------------------------------------------------------------------------------- combine
def test_combine_prepay_pay_over_admin_one_notification_and_the_combine_query(
    sim: ChannelSimulator, merchant: dict[str, str], receiver
) -> None:
    rcv = receiver(default=204)
    order = {
        "combine_appid": merchant["appid"],
        "combine_mchid": merchant["mchid"],
        "combine_out_trade_no": "COMBINE0001",
        "notify_url": rcv.url,
        "sub_orders": [
            {
                "mchid": merchant["mchid"],
                "attach": f"a{i}",
                "amount": {"total_amount": cents, "currency": "CNY"},
                "out_trade_no": f"SUBORDER000{i}",
                "description": f"part {i}",
            }
            for i, cents in enumerate((100, 200, 300))
        ],
    }
    (status, _, body), _, _ = signed_request(sim, merchant, "POST", "/v3/combine-transactions/native", order)
    assert status == 200 and json.loads(body)["code_url"].startswith("weixin://")
    forged = {**order, "sub_orders": [{**order["sub_orders"][0], "mchid": "1900000999"}]}
    (status, _, _), _, _ = signed_request(sim, merchant, "POST", "/v3/combine-transactions/native", forged)
    assert status == 400  # a sub-order's mchid must be the combine merchant's
    status, _, body = raw_request(
        sim.url,
        "POST",
        "/_sim/combine/pay",
        json.dumps({"combine_mchid": merchant["mchid"], "combine_out_trade_no": "COMBINE0001"}).encode(),
    )
    assert status == 200
    tids = json.loads(body)["transaction_ids"]
    assert len(set(tids)) == 3
    deadline = time.monotonic() + 10
    while not rcv.received and time.monotonic() < deadline:
        time.sleep(0.02)
    (delivered,) = rcv.received  # ONE notification for the three sub-orders
    assert verify_platform_signature(sim, delivered["headers"], delivered["body"])
    plain = decrypt_resource(merchant, delivered["body"])
    assert plain["combine_out_trade_no"] == "COMBINE0001"
    assert [s["transaction_id"] for s in plain["sub_orders"]] == tids
    assert [s["amount"]["payer_amount"] for s in plain["sub_orders"]] == [100, 200, 300]
    (status, _, body), _, _ = signed_request(
        sim, merchant, "GET", "/v3/combine-transactions/out-trade-no/COMBINE0001"
    )
    assert status == 200 and [s["trade_state"] for s in json.loads(body)["sub_orders"]] == ["SUCCESS"] * 3
