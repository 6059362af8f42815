"""``ChannelSimulator``: the channel desks composed into one object on one HTTP server (the package docstring
describes what it emulates; docs/simulator.md how it is built).

The desks (each a class of its own module, on the shared ``Kernel`` and ``DeliveryEngine``):

    sim.v3            WeChat Pay v3, direct merchants (wechatpay_v3.py): keys, merchants, orders, payments
    sim.partner       WeChat Pay v3 service-provider orders (wechatpay_v3_partner.py), on sim.v3's books
    sim.combine       WeChat Pay v3 combine payments (wechatpay_v3_combine.py), on sim.v3's books
    sim.v3_refunds    WeChat Pay v3 refunds (wechatpay_v3_refunds.py), on sim.v3's books
    sim.bills         WeChat Pay v3 trade bills (bills.py)
    sim.alipay        Alipay (alipay.py) + its refunds (alipay_refunds.py) and bills (alipay_bills.py)
    sim.wechatpay_v2  WeChat Pay v2 (wechatpay_v2.py) + its refunds (wechatpay_v2_refunds.py) and bills
                      (wechatpay_v2_bills.py)

The v3 API is the simulator's own (``sim.pay``, ``sim.set_refund_behaviour``, …): each name below forwards to
the desk that implements it. ``sim.alipay`` and ``sim.wechatpay_v2`` are made on first use (they generate keys).
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

from ._server import make_server
from ._tls import TestCA, temp_pem
from .alipay import AlipayDesk
from .alipay_bills import AlipayBillBook
from .alipay_refunds import AlipayRefundDesk
from .bills import BillBook
from .chat import ChatSink
from .delivery import DeliveryEngine
from .kernel import Forward, Kernel, log
from .kernel import now_rfc3339 as _now_rfc3339
from .receiver import MerchantReceiver
from .wechatpay_v2 import WeChatPayV2Desk
from .wechatpay_v2_bills import V2BillBook
from .wechatpay_v2_refunds import V2RefundDesk
from .wechatpay_v3 import WeChatPayV3Desk
from .wechatpay_v3_combine import CombineDesk
from .wechatpay_v3_partner import PartnerDesk
from .wechatpay_v3_refunds import RefundDesk


class ChannelSimulator:
    """WeChat Pay API v3 (and v2, Alipay) look-alike. See the package docstring for the full description."""

    # ---------------------------------------------------------------- the kernel
    time_scale = Forward("kernel")
    notify_timeout = Forward("kernel")
    _rng = Forward("kernel", "rng")
    _stopping = Forward("kernel", "stopping")
    _digits = Forward("kernel", "digits")
    _alnum = Forward("kernel", "alnum")
    _uuid = Forward("kernel", "uuid")
    _now_rfc3339 = staticmethod(_now_rfc3339)

    # ---------------------------------------------------------------- WeChat Pay v3 (wechatpay_v3.py)
    platform_serial = Forward("v3")
    platform_cert_pem = Forward("v3")
    platform_certificates = Forward("v3")
    public_key_id = Forward("v3")
    public_key_pem = Forward("v3")
    rotate_platform_certificate = Forward("v3")
    register_merchant = Forward("v3")
    register_test_merchant = Forward("v3")
    merchant = Forward("v3")
    keys_info = Forward("v3")
    create_native_order = Forward("v3")
    hide_until = Forward("v3")
    transaction_view = Forward("v3")
    transaction_by_id = Forward("v3")
    close_order = Forward("v3")
    get_order = Forward("v3")
    certificates_response = Forward("v3")
    pay = Forward("v3")
    redeliver = Forward("v3")
    transaction_resource = Forward("v3")
    refund_resource = Forward("v3")
    build_notification = Forward("v3")
    deliveries = Forward("v3")
    wait_delivered = Forward("v3")
    inject_fault = Forward("v3")
    clear_faults = Forward("v3")
    authenticate = Forward("v3")
    requests = Forward("v3")
    security_echo = Forward("v3")
    echoes = Forward("v3")
    echo_callbacks = Forward("v3")
    _lock = Forward("v3")
    _merchants = Forward("v3")
    _orders = Forward("v3")
    _by_transaction_id = Forward("v3")
    _deliveries = Forward("v3")
    _faults = Forward("v3")
    _certs = Forward("v3")
    _key_for_serial = Forward("v3")
    _signed_headers = Forward("v3")
    _take_fault = Forward("v3")
    _dispatch = Forward("v3", "dispatch")

    # ---------------------------------------------------------------- v3 service provider (wechatpay_v3_partner.py)
    create_partner_native_order = Forward("partner")
    partner_transaction_view = Forward("partner")
    close_partner_order = Forward("partner")
    partner_transaction_resource = Forward("partner")
    pay_partner = Forward("partner")

    # ---------------------------------------------------------------- v3 combine (wechatpay_v3_combine.py)
    create_combine_native_order = Forward("combine")
    combine_view = Forward("combine")
    pay_combine = Forward("combine")
    combine_notification = Forward("combine")

    # ---------------------------------------------------------------- v3 refunds (wechatpay_v3_refunds.py)
    set_refund_behaviour = Forward("v3_refunds")
    refund_route = Forward("v3_refunds")
    create_refund = Forward("v3_refunds")
    refund_view = Forward("v3_refunds")
    settle_refund = Forward("v3_refunds")
    refund_notification = Forward("v3_refunds")
    refunds = Forward("v3_refunds")
    refund_admin = Forward("v3_refunds")
    apply_abnormal_refund = Forward("v3_refunds")
    abnormal_applied = Forward("v3_refunds")
    abnormal_while_answering = Forward("v3_refunds")
    _refunds = Forward("v3_refunds")
    _refund_plans = Forward("v3_refunds")
    _refund_resource_of = Forward("v3_refunds")

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        time_scale: float = 0.01,
        seed: int | None = None,
        *,
        fixed_keys: bool = False,
        notify_timeout: float = 5.0,
    ):
        self.host = host
        self.port = port
        self.kernel = Kernel(time_scale, notify_timeout, seed)
        self.kernel.url_of = lambda: self.url
        self.engine = DeliveryEngine(self.kernel)
        self.v3 = WeChatPayV3Desk(self.kernel, self.engine, fixed_keys=fixed_keys)
        self.partner = PartnerDesk(self.v3)
        self.v3_refunds = RefundDesk(self.v3)
        self.combine = CombineDesk(self.v3)
        self.bills = BillBook(self.v3)  # trade bills: GET /v3/bill/tradebill (bills.py)
        self.receiver = (
            MerchantReceiver()
        )  # a merchant's webhook receiver: /merchant/hooks/<name> (receiver.py)
        self.bills.refund_desk = self.v3_refunds
        self.chat = ChatSink(url_of=lambda: self.url)  # group robots for the alert cards (chat.py)
        self._desks_lock = threading.Lock()
        self._alipay: AlipayDesk | None = None
        self._wechatpay_v2: WeChatPayV2Desk | None = None
        self._server: Any = None
        self._server_thread: threading.Thread | None = None
        self._tls_server: Any = None
        self.tls_ca: TestCA | None = None

    # ---------------------------------------------------------------- the other channels (made on first use)
    @property
    def alipay(self) -> AlipayDesk:
        """The Alipay look-alike (alipay.py), with its refund desk and trade bills attached."""
        with self._desks_lock:
            if self._alipay is None:
                desk = AlipayDesk(self.kernel, self.engine)
                desk.refund_desk = AlipayRefundDesk(desk)
                desk.bills = AlipayBillBook(desk)
                desk.attach(desk.refund_desk)
                desk.attach(desk.bills)
                self._alipay = desk
            return self._alipay

    @property
    def wechatpay_v2(self) -> WeChatPayV2Desk:
        """The WeChat Pay v2 look-alike (wechatpay_v2.py), with its refund desk attached."""
        with self._desks_lock:
            if self._wechatpay_v2 is None:
                desk = WeChatPayV2Desk(self.kernel, self.engine)
                desk.refund_desk = V2RefundDesk(desk)
                desk.bills = V2BillBook(desk)  # POST /pay/downloadbill (wechatpay_v2_bills.py)
                desk.attach(desk.refund_desk.paths())
                desk.tls_ca = self.tls_ca
                self._wechatpay_v2 = desk
            return self._wechatpay_v2

    # ---------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("simulator not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> ChannelSimulator:
        self.kernel.stopping.clear()
        self._server = make_server(self, self.host, self.port)
        self._server_thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="channel-simulator",
            daemon=True,
        )
        self._server_thread.start()
        log.info("channel simulator listening on %s", self.url)
        return self

    def start_tls(self) -> str:
        """A second listener on HTTPS with client certificates required (ssl.CERT_REQUIRED), as WeChat Pay v2's
        `/secapi/` is: the same endpoints, a server certificate for 127.0.0.1 from `tls_ca` (TEST ONLY).
        Returns its URL; `wechatpay_v2.issue_client_cert(mch_id)` makes a merchant's API client certificate."""
        with self._desks_lock:
            if self._tls_server is not None:
                return self.tls_url
            self.tls_ca = TestCA()
            cert, key = self.tls_ca.issue("127.0.0.1", server=True)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=self.tls_ca.pem)
            context.load_cert_chain(temp_pem(cert, key))
            server = make_server(self, self.host, 0)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            self._tls_server = server
            if self._wechatpay_v2 is not None:
                self._wechatpay_v2.tls_ca = self.tls_ca
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self.tls_url

    @property
    def tls_url(self) -> str:
        return f"https://127.0.0.1:{self._tls_server.server_address[1]}"

    def stop(self) -> None:
        """Stop the HTTP server and every pending delivery / retry."""
        if self._tls_server is not None:
            self._tls_server.shutdown()
            self._tls_server.server_close()
            self._tls_server = None
        self.kernel.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._server_thread is not None:
            self._server_thread.join(timeout=5)
        self.engine.join()
        self._server = None

    def __enter__(self) -> ChannelSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
