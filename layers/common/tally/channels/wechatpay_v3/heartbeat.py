"""The heartbeat's synthetic WeChat Pay v3 payment (service/heartbeat.py, issue #16): the synthetic merchant,
configured in public-key mode with keys generated here, and its paid callback, signed and encrypted the way
WeChat does it (channel-spec §1.2-§1.3). The channel-side key it signs with is what `configure` keeps."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

PUBLIC_KEY_ID = "PUB_KEY_ID_TALLYHEARTBEAT"
APPID = "wxheartbeat0000000"


def _pem(key: Any, public: bool = False) -> str:
    from cryptography.hazmat.primitives import serialization as s

    if public:
        return key.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo).decode()
    return key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()).decode()


def beat_transaction_id(merchant_id: str, out_trade_no: str) -> str:
    """The beat's transaction id (28 characters like WeChat's): a function of the synthetic merchant and the
    beat's order, so the same beat sent twice (a duplicate EventBridge delivery, a re-run) is one payment."""
    digest = hashlib.sha256(f"{merchant_id}#{out_trade_no}".encode()).hexdigest()
    return ("HB" + digest)[:28]


class WeChatPayV3Synthetic:
    def configure(
        self, merchants: Any, merchant_id: str, notify_url: str, keep: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        """The synthetic merchant's keys, generated and configured on the first beat."""
        from cryptography.hazmat.primitives.asymmetric import rsa

        platform = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        merchant = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        keys = {
            "platform_private_key": _pem(platform),
            "apiv3_key": base64.b32encode(secrets.token_bytes(20)).decode()[:32],
            "public_key_id": PUBLIC_KEY_ID,
        }
        keep(keys)
        wechatpay_v3_desk(merchants).add_wechatpay(
            mchid=merchant_id,
            apiv3_key=keys["apiv3_key"],
            merchant_key_pem=_pem(merchant),
            merchant_serial="HEARTBEAT",
            appid=APPID,
            notify_url=notify_url,
            public_key=_pem(platform, public=True),
            public_key_id=PUBLIC_KEY_ID,
        )
        return keys

    def callback(
        self, keys: dict[str, str], merchant_id: str, out_trade_no: str, now: float
    ) -> tuple[dict[str, str], bytes]:
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
        resource = {
            "mchid": merchant_id,
            "appid": APPID,
            "out_trade_no": out_trade_no,
            # one per beat (R54): a second delivery of the same minute's beat is the same payment, a duplicate
            "transaction_id": beat_transaction_id(merchant_id, out_trade_no),
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
            "Wechatpay-Signature-Type": wx.SIGNATURE_TYPE,
        }, body


SYNTHETIC = WeChatPayV3Synthetic()
