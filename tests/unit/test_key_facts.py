"""What a merchant key change may say in the journal (R55, docs/audit.md): never the secret itself. A private
key is named by the SHA-256 of its public half, a certificate by its serial, a symmetric key only as set."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from tally.service.key_facts import key_change


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public_sha256(key: rsa.RSAPrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def _cert(key: rsa.RSAPrivateKey, serial: int) -> str:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tally test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_keys_are_named_by_their_public_half_serial_or_as_set_never_by_their_bytes_R55():
    key, platform = _key(), _key()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    bare = base64.b64encode(  # an Alipay app key as its console gives it: base64 DER without a PEM header
        key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    ).decode()
    before = {"mchid": "1900000109", "apiv3_key": "A" * 32, "merchant_private_key": pem}
    after = {
        **before,
        "apiv3_key": "B" * 32,
        "merchant_serial": "5157F09EFDC096DE15EBE81A47057A7232F1B8E1",
        "platform_certificates": [_cert(platform, 0x1F2E)],
        "app_private_key": bare,
    }
    said = key_change(before, after)
    fields = said["fields"]
    assert said["changed"] == ["apiv3_key", "app_private_key", "merchant_serial", "platform_certificates"]
    assert fields["apiv3_key"] == "set" and fields["mchid"] == "1900000109"
    assert fields["merchant_serial"] == after["merchant_serial"]
    assert fields["merchant_private_key"] == {"kind": "private key", "public_sha256": _public_sha256(key)}
    assert fields["app_private_key"] == fields["merchant_private_key"]
    assert fields["platform_certificates"] == [{"serial": "1F2E", "public_sha256": _public_sha256(platform)}]
    text = repr(said)
    for secret in ("A" * 32, "B" * 32, pem.splitlines()[1], bare[:40]):
        assert secret not in text
    assert "B" * 8 not in text and hashlib.sha256(b"B" * 32).hexdigest() not in text  # not even its hash
