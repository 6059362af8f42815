"""HTTP front of the channel simulator: the ``/v3/...`` look-alike APIs and the ``/_sim/...`` admin API, routed to
the desks of the composed simulator (``server.sim``: ``sim.v3``, ``sim.partner``, ``sim.v3_refunds``, ``sim.bills``,
``sim.alipay``, ``sim.wechatpay_v2``)."""

from __future__ import annotations

import json
import re
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import admin_channels
from .bills import RawBody
from .faults import corrupted
from .kernel import SimulatorError, log
from .kernel import compact as _compact
from .wechatpay_v3 import Merchant

_OUT_TRADE_NO = re.compile(r"^/v3/pay/transactions/out-trade-no/([^/]+)$")
_CLOSE = re.compile(r"^/v3/pay/transactions/out-trade-no/([^/]+)/close$")
_BY_ID = re.compile(r"^/v3/pay/transactions/id/([^/]+)$")
_PARTNER_OUT_TRADE_NO = re.compile(r"^/v3/pay/partner/transactions/out-trade-no/([^/]+)$")
_PARTNER_CLOSE = re.compile(r"^/v3/pay/partner/transactions/out-trade-no/([^/]+)/close$")
_SIM_ORDER = re.compile(r"^/_sim/orders/([^/]+)/([^/]+)$")

_PAY_OPTIONS = ("payer_total", "duplicates", "drop", "amount_total", "delay", "openid", "bank_type", "probe")
_BUILD_OPTIONS = (
    "event_type",
    "timestamp",
    "nonce",
    "serial",
    "signature_override",
    "associated_data",
    "resource_nonce",
    "notification_id",
    "create_time",
    "summary",
    "apiv3_key",
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512  # socketserver's default of 5 resets a burst of connections
    sim: Any  # the composed simulator (simulator.ChannelSimulator, which makes this server)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "ChannelSimulator/1.0"
    protocol_version = "HTTP/1.1"
    # the headers and the body leave in two writes: with Nagle on, a kept-alive client (tally/httpclient.py)
    # waits ~40 ms for each body behind its own delayed ACK; the channels' servers answer at once
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")

    # ------------------------------------------------------------------ plumbing
    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if path.startswith("/v3/"):
            self._api(method, path, query, body)
        elif path.startswith("/_sim/"):
            self._admin(method, path, query, body)
        elif path.startswith("/merchant/"):  # the merchant's webhook receiver (receiver.py)
            status, out = self.server.sim.receiver.handle(method, path, dict(self.headers.items()), body)
            self._send(status, out, {"Content-Type": "application/json"})
        elif path.startswith("/chat/"):  # the chat sink's group robots (chat.py)
            status, out, content_type = self.server.sim.chat.handle(method, path, query, body)
            self._send(status, out, {"Content-Type": content_type})
        elif path == "/gateway.do" and method == "POST":  # Alipay (simulator/alipay.py)
            status, headers, out = self.server.sim.alipay.handle_gateway(
                parts.query, body, self.headers.get("Content-Type", "")
            )
            self._send(status, out, headers)
        elif (
            path == "/downloadBillFile.resource" and method == "GET"
        ):  # Alipay bill zip (simulator/alipay_bills.py)
            data = self.server.sim.alipay.bills.download(query)
            if data is None:
                self._send(
                    404,
                    b"<html><body>file not found or link expired</body></html>",
                    {"Content-Type": "text/html"},
                )
            else:
                self._send(
                    200, data, {"Content-Type": "application/zip" if data[:2] == b"PK" else "text/html"}
                )
        elif (
            path.startswith(("/pay/", "/secapi/pay/")) and method == "POST"
        ):  # WeChat Pay v2 (wechatpay_v2.py)
            peer = (
                self.connection.getpeercert(binary_form=True)
                if hasattr(self.connection, "getpeercert")
                else None
            )
            status, headers, out = self.server.sim.wechatpay_v2.handle(path, body, client_cert=peer)
            self._send(status, out, headers)
        else:
            self._send(404, _compact({"code": "NOT_FOUND", "message": "no such endpoint"}), {})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status != 204:
            if body and "Content-Type" not in headers:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            if status != 204 and body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = (
                True  # the caller gave up first (its timeout): as a real channel, answer no one
            )

    @staticmethod
    def _json(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SimulatorError(400, "PARAM_ERROR", "请求体不是合法的JSON") from None
        if not isinstance(data, dict):
            raise SimulatorError(400, "PARAM_ERROR", "请求体必须是JSON对象")
        return data

    # ------------------------------------------------------------------ /v3 APIs (signed both ways)
    def _api(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        sim = self.server.sim.v3
        merchant: Merchant | None = None
        fault: dict[str, Any] | None = None
        sign_serial: str | None = None
        requested = self.headers.get("Wechatpay-Serial")
        if requested and sim._key_for_serial(requested) is not None:
            sign_serial = requested  # "responses follow the Wechatpay-Serial the merchant sent" (§1.4)
        try:
            merchant = sim.authenticate(method, self.path, self.headers.get("Authorization"), body)
            fault = sim._take_fault(method, self.path)
            if fault and fault["kind"] == "delay":
                time.sleep(fault["seconds"])
            if fault and fault["kind"] == "error":
                raise SimulatorError(fault["status"], fault["code"], fault["message"])
            status, payload = self._route(method, path, query, body, merchant)
            if path == "/v3/certificates":
                sign_serial = sim._certs[-1].serial  # signed with the newest certificate
        except SimulatorError as exc:
            status, payload = exc.status, exc.body()
        if isinstance(payload, RawBody):  # the bill file: sent as-is and NOT signed (§3.1)
            with sim._lock:
                sim.requests.append(
                    {
                        "method": method,
                        "path": self.path,
                        "mchid": merchant.mchid if merchant else None,
                        "status": status,
                        "fault": None,
                    }
                )
            self._send(status, payload.data, {"Content-Type": payload.content_type})
            return
        out = b"" if payload is None else _compact(payload)
        headers = sim._signed_headers(merchant, out, serial=sign_serial)
        if fault and fault["kind"] == "unsigned":
            headers = {"Request-ID": headers["Request-ID"]}
        elif fault and fault["kind"] == "bad_signature":
            headers["Wechatpay-Signature"] = corrupted(headers["Wechatpay-Signature"])
        with sim._lock:
            sim.requests.append(
                {
                    "method": method,
                    "path": self.path,
                    "mchid": merchant.mchid if merchant else None,
                    "status": status,
                    "fault": fault["kind"] if fault else None,
                }
            )
        self._send(status, out, headers)

    def _route(
        self, method: str, path: str, query: dict[str, str], body: bytes, merchant: Merchant
    ) -> tuple[int, Any]:
        sim = self.server.sim.v3
        if path.startswith("/v3/refund/"):
            refunds = self.server.sim.v3_refunds
            return refunds.refund_route(
                method,
                path,
                self._json(body) if method == "POST" else {},
                merchant,
                serial=self.headers.get("Wechatpay-Serial"),
                query=query,
            )
        if method == "POST" and path == "/v3/pay/transactions/native":
            return 200, sim.create_native_order(merchant.mchid, self._json(body))
        if path.startswith("/v3/combine-transactions/"):
            data = self._json(body) if method == "POST" else {}
            return self.server.sim.combine.route(method, path, data, merchant.mchid)
        if path.startswith("/v3/pay/partner/"):
            return self._partner_route(method, path, query, body, merchant)
        if method == "GET" and path == "/v3/certificates":
            return 200, sim.certificates_response(merchant.mchid)
        if method == "POST" and path == "/v3/security/echo":
            return 200, sim.security_echo(merchant, self._json(body), self.headers.get("Wechatpay-Serial"))
        if method == "POST" and (m := _CLOSE.match(path)):
            data = self._json(body)
            self._check_mchid(data.get("mchid"), merchant)
            sim.close_order(merchant.mchid, unquote(m.group(1)))
            return 204, None
        if method == "GET" and (m := _OUT_TRADE_NO.match(path)):
            self._check_mchid(query.get("mchid"), merchant)
            return 200, sim.transaction_view(merchant.mchid, unquote(m.group(1)))
        if method == "GET" and (m := _BY_ID.match(path)):
            self._check_mchid(query.get("mchid"), merchant)
            return 200, sim.transaction_by_id(merchant.mchid, unquote(m.group(1)))
        if path.startswith(("/v3/bill/", "/v3/billdownload/")):
            return self.server.sim.bills.route(method, path, query, merchant.mchid)
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")

    def _partner_route(
        self, method: str, path: str, query: dict[str, str], body: bytes, merchant: Merchant
    ) -> tuple[int, Any]:
        """Service-provider APIs (wechatpay_v3_partner.py): the signer is the provider (sp_mchid)."""
        sim = self.server.sim.partner
        if method == "POST" and path == "/v3/pay/partner/transactions/native":
            return 200, sim.create_partner_native_order(merchant.mchid, self._json(body))
        if method == "GET" and (m := _PARTNER_OUT_TRADE_NO.match(path)):
            self._check_mchid(query.get("sp_mchid"), merchant)
            if not query.get("sub_mchid"):
                raise SimulatorError(400, "PARAM_ERROR", "sub_mchid必填")
            return 200, sim.partner_transaction_view(merchant.mchid, query["sub_mchid"], unquote(m.group(1)))
        if method == "POST" and (m := _PARTNER_CLOSE.match(path)):
            data = self._json(body)
            self._check_mchid(data.get("sp_mchid"), merchant)
            if not data.get("sub_mchid"):
                raise SimulatorError(400, "PARAM_ERROR", "sub_mchid必填")
            sim.close_partner_order(merchant.mchid, str(data["sub_mchid"]), unquote(m.group(1)))
            return 204, None
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")

    @staticmethod
    def _check_mchid(mchid: Any, merchant: Merchant) -> None:
        if not mchid:
            raise SimulatorError(
                400, "PARAM_ERROR", "输入源“/query/mchid”映射到字段“mchid”必填性规则校验失败，此字段为必填项"
            )
        if str(mchid) != merchant.mchid:
            raise SimulatorError(403, "NO_AUTH", "mchid与请求签名中的商户号不一致")

    # ------------------------------------------------------------------ /_sim admin API (unsigned)
    def _admin(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        try:
            status, payload = self._admin_route(method, path, query, body)
        except SimulatorError as exc:
            status, payload = exc.status, exc.body()
        except (ValueError, TypeError, KeyError) as exc:
            status, payload = 400, {"code": "PARAM_ERROR", "message": f"{type(exc).__name__}: {exc}"}
        self._send(status, b"" if payload is None else _compact(payload), {})

    def _admin_route(self, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, Any]:
        composed = self.server.sim
        key = (method, path)
        if path.startswith(("/_sim/refund-behaviour", "/_sim/refunds")):
            return composed.v3_refunds.refund_admin(
                method, path, self._json(body) if method == "POST" else {}
            )
        if path.startswith(("/_sim/alipay/", "/_sim/wechatpay-v2/")):  # admin_channels.py
            found = admin_channels.route(
                lambda: composed.alipay,
                lambda: composed.wechatpay_v2,
                composed.kernel,
                method,
                path,
                self._json(body) if method in ("POST", "PUT") else {},
            )
            if found is not None:
                return found
        found = self._v3_admin_payments(key, body) or self._v3_admin_state(key, path, query, body)
        if found is not None:
            return found
        raise SimulatorError(404, "NOT_FOUND", f"no admin endpoint {method} {path}")

    def _v3_admin_payments(self, key: tuple[str, str], body: bytes) -> tuple[int, Any] | None:
        """The v3 desk's merchants, payments and notifications; None for another endpoint."""
        composed = self.server.sim
        sim = composed.v3
        if key == ("GET", "/_sim/health"):
            return 200, {"ok": True}
        if key == ("GET", "/_sim/keys"):
            return 200, sim.keys_info()
        if key == ("POST", "/_sim/merchants"):
            data = self._json(body)
            allowed = (
                "mchid",
                "apiv3_key",
                "merchant_public_key_pem",
                "merchant_serial",
                "appid",
                "verify_mode",
            )
            return 201, sim.register_merchant(**{k: v for k, v in data.items() if k in allowed})
        if key == ("GET", "/_sim/merchants"):
            with sim._lock:
                return 200, {"merchants": [m.describe() for m in sim._merchants.values()]}
        if key == ("POST", "/_sim/pay"):
            data = self._json(body)
            opts = {k: data[k] for k in _PAY_OPTIONS if k in data}
            if data.get(
                "sp_mchid"
            ):  # a service-provider order: mchid is the sub-merchant (simulator/partner.py)
                opts = {
                    k: v
                    for k, v in opts.items()
                    if k in ("payer_total", "duplicates", "drop", "amount_total", "delay")
                }
                return 200, {
                    "transaction_id": composed.partner.pay_partner(
                        str(data["sp_mchid"]), str(data["mchid"]), str(data["out_trade_no"]), **opts
                    )
                }
            return 200, {"transaction_id": sim.pay(str(data["mchid"]), str(data["out_trade_no"]), **opts)}
        if key == ("POST", "/_sim/combine/pay"):  # {combine_mchid, combine_out_trade_no, drop?, duplicates?}
            data = self._json(body)
            opts = {k: data[k] for k in ("drop", "duplicates", "forge_sub", "success_time") if k in data}
            tids = composed.combine.pay_combine(
                str(data["combine_mchid"]), str(data["combine_out_trade_no"]), **opts
            )
            return 200, {"transaction_ids": tids}
        if key == ("POST", "/_sim/redeliver"):
            data = self._json(body)
            opts = {k: data[k] for k in ("duplicates", "delay") if k in data}
            return 200, {
                "transaction_id": sim.redeliver(str(data["mchid"]), str(data["out_trade_no"]), **opts)
            }
        if key == ("POST", "/_sim/rotate"):
            data = self._json(body)
            return 200, {"serial": sim.rotate_platform_certificate(activate=bool(data.get("activate", True)))}
        if key == ("POST", "/_sim/notifications"):
            data = self._json(body)
            opts = {k: data[k] for k in _BUILD_OPTIONS if k in data}
            headers, out = sim.build_notification(str(data["mchid"]), data["resource"], **opts)
            return 200, {"headers": headers, "body": out.decode("utf-8")}
        return None

    def _v3_admin_state(
        self, key: tuple[str, str], path: str, query: dict[str, str], body: bytes
    ) -> tuple[int, Any] | None:
        """What the v3 desk holds (orders, deliveries, requests) and its faults; None for another endpoint."""
        sim = self.server.sim.v3
        method = key[0]
        if key == ("GET", "/_sim/orders"):
            with sim._lock:
                keys = list(sim._orders)
            return 200, {"orders": [sim.get_order(*k) for k in keys]}
        if method == "GET" and (m := _SIM_ORDER.match(path)):
            return 200, sim.get_order(unquote(m.group(1)), unquote(m.group(2)))
        if key == ("GET", "/_sim/deliveries"):
            rows = sim.deliveries
            for field in ("transaction_id", "out_trade_no", "mchid"):
                if field in query:
                    rows = [d for d in rows if d[field] == query[field]]
            return 200, {"deliveries": rows}
        if key == ("GET", "/_sim/requests"):
            with sim._lock:
                return 200, {"requests": list(sim.requests)}
        if key == ("POST", "/_sim/faults"):
            data = self._json(body)
            return 201, sim.inject_fault(data.pop("kind"), **data)
        if key == ("DELETE", "/_sim/faults"):
            sim.clear_faults()
            return 204, None
        return None


def make_server(sim: Any, host: str, port: int) -> _Server:
    server = _Server((host, port), _Handler)
    server.sim = sim
    return server
