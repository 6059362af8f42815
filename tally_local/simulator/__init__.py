"""Channel simulator: a WeChat Pay API v3 look-alike ("the channel") on 127.0.0.1.

It is the *other side* of the wire. It never imports ``tally.*``: its signing, verification and
AEAD code (``_crypto.py``) is written separately from the wire spec (``channel-spec.md`` §1, §2) so that
it cross-checks the product code. It only talks to loopback addresses.

Layout: a kernel (``kernel.py``), one fault queue (``faults.py``), one delivery engine (``delivery.py``) and one
desk per channel API (``wechatpay_v3*.py``, ``wechatpay_v2*.py``, ``alipay*.py``, ``bills.py``), composed into
``ChannelSimulator`` (``simulator.py``); docs/simulator.md "Layout".

Quick start::

    from tally_local.simulator import ChannelSimulator, test_merchant

    sim = ChannelSimulator(port=0, time_scale=0.01, fixed_keys=True).start()
    m = sim.register_test_merchant(verify_mode="public_key")   # or register_merchant(...)
    ...                                                        # merchant calls sim.url + "/v3/..."
    tid = sim.pay(m["mchid"], "ORDER0001", duplicates=2)       # → TRANSACTION.SUCCESS to notify_url
    sim.wait_delivered(tid, timeout=5)
    sim.stop()

``python -m tally_local.simulator [--port 8089] [--fixed-keys]`` runs it in the foreground.

Keys
    Generated per instance (RSA-2048), or loaded from ``testkeys/`` with ``fixed_keys=True`` (committed,
    TEST-ONLY, for reproducible tests and the ``events/`` samples; ``testkeys/README.md``).
    * platform certificate: self-signed X.509, serial = 40 uppercase hex chars
      (``platform_serial``, ``platform_cert_pem``, ``platform_certificates``);
      ``rotate_platform_certificate(activate=True)`` issues a new one, old ones stay downloadable/valid;
    * WeChat Pay public key (public-key mode), a second key pair: ``public_key_id`` (``PUB_KEY_ID_0114…``),
      ``public_key_pem`` (bare SPKI).

Merchants
    ``register_merchant(mchid, apiv3_key, merchant_public_key_pem, merchant_serial, appid="wx…",
    verify_mode="public_key"|"certificate"|"mixed")`` or ``POST /_sim/merchants`` (same JSON keys).
    ``verify_mode`` decides which key signs callbacks: ``Wechatpay-Serial`` = ``PUB_KEY_ID_…`` or the
    active platform cert serial; ``mixed`` picks at random per attempt (the migration period, §1.4).
    ``test_merchant()`` / ``register_test_merchant()`` give the committed TEST-ONLY merchant.

APIs (every request's ``Authorization: WECHATPAY2-SHA256-RSA2048 mchid=…,nonce_str=…,signature=…,
timestamp=…,serial_no=…`` is verified over ``METHOD\\ncanonical_url\\ntimestamp\\nnonce\\nbody\\n`` with the
merchant key, ±300 s, else 401 ``SIGN_ERROR``; every response, errors and 204 included, carries
``Wechatpay-Timestamp/-Nonce/-Signature/-Serial/-Signature-Type`` + ``Request-ID``, signature over
``timestamp\\nnonce\\nbody\\n``, with the key named by the request's ``Wechatpay-Serial`` if it is a known one,
else the merchant's verify_mode key):
    * ``POST /v3/pay/transactions/native`` → 200 ``{"code_url": "weixin://wxpay/bizpayurl?pr=…"}``; same
      out_trade_no + same amount → same code_url; different amount → 400 ``INVALID_REQUEST``; paid → 400
      ``ORDER_PAID``; closed → 400 ``ORDER_CLOSED``; bad fields → 400 ``PARAM_ERROR`` /
      ``APPID_MCHID_NOT_MATCH``. notify_url must be http(s), without query, on a loopback host.
    * ``GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=`` and ``GET /v3/pay/transactions/id/
      {transaction_id}?mchid=`` → §2.1 transaction (NOTPAY/CLOSED: no transaction_id, success_time,
      payer, bank_type, trade_type) or 404 ``{"code":"ORDER_NOT_EXIST","message":"订单不存在"}``.
    * ``POST /v3/pay/transactions/out-trade-no/{out_trade_no}/close`` ``{"mchid"}`` → 204 (signed, empty
      body: message ``ts\\nnonce\\n\\n``); 400 ``ORDER_PAID`` / ``ORDER_CLOSED``; 404 ``ORDER_NOT_EXIST``.
    * ``GET /v3/certificates`` → every platform cert, encrypted with the caller's APIv3 key
      (AEAD_AES_256_GCM, associated_data ``certificate``), signed with the newest certificate.

Actions
    ``pay(mchid, out_trade_no, *, payer_total=None, duplicates=1, drop=False, amount_total=None, delay=0,
    openid=None, bank_type="OTHERS", probe=False) -> transaction_id`` (or ``POST /_sim/pay``): the order
    becomes SUCCESS (28-digit ``4200…`` id) and a TRANSACTION.SUCCESS notification (envelope §1.5, compact
    JSON, resource §1.7) is POSTed to notify_url from background daemon threads: every attempt freshly
    signed, retries after 15s/15s/30s/3m/10m/20m/30m/30m/30m/60m/3h/3h/3h/6h/6h × ``time_scale``, stopping at
    the first 200/204 (timeout ``notify_timeout`` = failure). ``duplicates=N``: N concurrent copies of the
    same body (each its own retry chain); ``drop``: never delivered; ``amount_total``: the channel reports
    that amount.total (fault); ``payer_total`` < total adds a coupon ``promotion_detail``; ``delay``:
    wall-clock seconds before the first attempt; ``probe``: one extra ``WECHATPAY/SIGNTEST/`` probe.
    ``redeliver(mchid, out_trade_no, duplicates=1)`` sends a paid order's notification again.
    ``deliveries`` / ``GET /_sim/deliveries``: one record per attempt (notification_id, kind, copy,
    transaction_id, out_trade_no, attempt, status [0 = no HTTP answer], error, serial, elapsed_ms since
    pay, duration_ms). ``wait_delivered(transaction_id, timeout, count=1)`` blocks for acknowledged ones.

Builders (tests, ``events/`` samples)
    ``build_notification(mchid, resource, *, event_type, timestamp, nonce, serial, signature_override,
    associated_data, resource_nonce, notification_id, create_time, summary, apiv3_key) -> (headers, body)``,
    ``transaction_resource(mchid, out_trade_no, total, ...)``, ``refund_resource(...)``.

Faults on the APIs
    ``inject_fault(kind, count=1, path_contains=None, method=None, status=500, code="SYSTEM_ERROR",
    seconds=0)`` / ``POST /_sim/faults``: ``error`` | ``unsigned`` | ``bad_signature`` | ``delay``.

Admin (unsigned, JSON): ``GET /_sim/health``, ``GET /_sim/keys``, ``POST|GET /_sim/merchants``,
``POST /_sim/pay``, ``POST /_sim/redeliver``, ``POST /_sim/rotate``, ``POST /_sim/notifications`` (build),
``GET /_sim/orders``, ``GET /_sim/orders/{mchid}/{out_trade_no}``, ``GET /_sim/deliveries``,
``GET /_sim/requests``, ``POST|DELETE /_sim/faults``. See docs/simulator.md.
"""

from .kernel import SimulatorError
from .simulator import ChannelSimulator
from .wechatpay_v3 import RETRY_SCHEDULE_S, test_merchant

__all__ = ["ChannelSimulator", "SimulatorError", "RETRY_SCHEDULE_S", "test_merchant"]
