"""The synthetic heartbeat (issue #16): every minute a WeChat Pay v3 callback, signed and encrypted the way
WeChat does it, for a synthetic merchant, posted through the public API like any channel's; if none is booked
within 3 minutes, HeartbeatAgeAlarm fires. It proves the whole money path (API Gateway, notify, the queue,
the worker, the tables) with real traffic, whatever the merchants' own traffic is.

- The synthetic merchant (`TALLY_HEARTBEAT_MCHID`, default 0000000000: WeChat mchids never start with 0) is
  configured on the first beat in public-key mode with keys generated here; the channel-side key it signs
  with is kept in Secrets Manager (store/heartbeat.py). Recon skips it (bootstrap.recon_service); the keys
  function has nothing to download for a public-key merchant.
- Each beat is a 1-cent order `HB{yyyymmddHHMM}` (UTC minute) created through OrderService and its callback.
- The age (`age_s`): seconds since the newest booked beat was sent; while none of the last 10 minutes' beats is
  booked, since the oldest of them that exists (a new stack starts at 0, not in alarm). Published every run as
  the HeartbeatAge gauge and shown by `tally pending`.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tally.channels.wechatpay_v3 import wire as wx
from tally.observability import M, count, logger

if TYPE_CHECKING:
    from tally.service.merchants import MerchantDirectory
    from tally.service.orders import OrderService
    from tally.store.heartbeat import HeartbeatKeys
    from tally.store.tables import OrderStore

WINDOW_MINUTES = 10
PUBLIC_KEY_ID = "PUB_KEY_ID_TALLYHEARTBEAT"


def _beat_id(minute: int) -> str:
    return "HB" + datetime.fromtimestamp(minute * 60, UTC).strftime("%Y%m%d%H%M")


def _pem(key: Any, public: bool = False) -> str:
    from cryptography.hazmat.primitives import serialization as s

    if public:
        return key.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo).decode()
    return key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()).decode()


def post_json(url: str, headers: dict[str, str], body: bytes, timeout_s: float = 5.0) -> int:
    """POST over HTTP(S); the status, or 0 when the API could not be reached at all."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - our own API URL
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError, ValueError) as error:  # ValueError: no HEARTBEAT_API_URL set
        logger.warning("heartbeat: API unreachable", extra={"error": str(error)[:200]})
        return 0


class Heartbeat:
    def __init__(
        self,
        directory: MerchantDirectory,
        orders: OrderService,
        order_store: OrderStore,
        keys: HeartbeatKeys,
        *,
        api_url: str,
        mchid: str,
        clock: Callable[[], float] = time.time,
        post: Callable[[str, dict[str, str], bytes], int] = post_json,
    ):
        self.directory = directory
        self.orders = orders
        self.order_store = order_store
        self.keys = keys
        self.api_url = api_url.rstrip("/")
        self.mchid = mchid
        self.clock = clock
        self.post = post

    # ------------------------------------------------------------------ the beat
    def beat(self) -> dict[str, Any]:
        keys = self._keys()
        now = self.clock()
        minute = int(now // 60)
        out_trade_no = _beat_id(minute)
        self.orders.create(
            {
                "mchid": self.mchid,
                "out_trade_no": out_trade_no,
                "amount_cent": 1,
                "description": "tally heartbeat (synthetic)",
                "channel": "wechatpay",
                "prepay": False,  # nothing to ask WeChat: the synthetic merchant exists only here
            }
        )
        headers, body = self._callback(keys, out_trade_no, now)
        status = self.post(f"{self.api_url}/notify/wechatpay/{self.mchid}", headers, body)
        if status != 204:
            logger.error("heartbeat callback refused", extra={"status": status, "order": out_trade_no})
        age = self.age_s()
        count(M.HEARTBEAT_AGE, age)  # a gauge, every run: HeartbeatAgeAlarm (Maximum >= 180)
        logger.info("heartbeat", extra={"order": out_trade_no, "status": status, "age_s": age})
        return {"order": out_trade_no, "status": status, "age_s": age}

    def age_s(self) -> int:
        """Seconds since the newest booked beat was sent (see the module docstring)."""
        now = self.clock()
        minute = int(now // 60)
        oldest_waiting = None
        for back in range(WINDOW_MINUTES):
            row = self.order_store.get(self.mchid, _beat_id(minute - back))
            if row is None:
                continue
            sent = (minute - back) * 60
            if row.get("status") == "PAID":
                return max(int(now - sent), 0)
            oldest_waiting = sent
        return 0 if oldest_waiting is None else max(int(now - oldest_waiting), 0)

    # ------------------------------------------------------------------ the channel side
    def _callback(self, keys: dict[str, str], out_trade_no: str, now: float) -> tuple[dict[str, str], bytes]:
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
        resource = {
            "mchid": self.mchid,
            "appid": "wxheartbeat0000000",
            "out_trade_no": out_trade_no,
            "transaction_id": "HB" + secrets.token_hex(13),
            "trade_type": "NATIVE",
            "trade_state": "SUCCESS",
            "trade_state_desc": "支付成功",
            "bank_type": "OTHERS",
            "attach": "",
            "success_time": stamp,
            "payer": {"openid": "heartbeat"},
            "amount": {"total": 1, "payer_total": 1, "currency": "CNY", "payer_currency": "CNY"},
        }
        nonce = secrets.token_hex(6)
        sealed = wx.aes_gcm_encrypt(
            keys["apiv3_key"].encode(),
            nonce,
            "transaction",
            json.dumps(resource, ensure_ascii=False).encode(),
        )
        body = json.dumps(
            {
                "id": secrets.token_hex(16),
                "create_time": stamp,
                "resource_type": "encrypt-resource",
                "event_type": "TRANSACTION.SUCCESS",
                "summary": "支付成功",
                "resource": {
                    "original_type": "transaction",
                    "algorithm": "AEAD_AES_256_GCM",
                    "ciphertext": sealed,
                    "associated_data": "transaction",
                    "nonce": nonce,
                },
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        timestamp, sig_nonce = str(int(now)), secrets.token_hex(16)
        signer = wx.load_private_key(keys["platform_private_key"])
        return {
            "Content-Type": "application/json",
            "Wechatpay-Timestamp": timestamp,
            "Wechatpay-Nonce": sig_nonce,
            "Wechatpay-Serial": keys["public_key_id"],
            "Wechatpay-Signature": wx.rsa_sign(signer, wx.signed_message(timestamp, sig_nonce, body)),
            "Wechatpay-Signature-Type": "WECHATPAY2-SHA256-RSA2048",
        }, body

    def _keys(self) -> dict[str, str]:
        """The synthetic merchant's keys, generated and configured on the first beat."""
        keys = self.keys.get()
        if keys is not None:
            return keys
        from cryptography.hazmat.primitives.asymmetric import rsa

        platform = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        merchant = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        keys = {
            "platform_private_key": _pem(platform),
            "apiv3_key": base64.b32encode(secrets.token_bytes(20)).decode()[:32],
            "public_key_id": PUBLIC_KEY_ID,
        }
        self.keys.put(keys)
        self.directory.add_wechatpay(
            mchid=self.mchid,
            apiv3_key=keys["apiv3_key"],
            merchant_key_pem=_pem(merchant),
            merchant_serial="HEARTBEAT",
            appid="wxheartbeat0000000",
            notify_url=f"{self.api_url}/notify/wechatpay/{self.mchid}",
            public_key=_pem(platform, public=True),
            public_key_id=PUBLIC_KEY_ID,
        )
        logger.info("heartbeat: synthetic merchant configured", extra={"mchid": self.mchid})
        return keys
