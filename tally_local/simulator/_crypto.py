"""The channel side's own crypto (deliberately independent of ``tally.*``).

Everything here is written from the wire spec (docs: docs/channel-spec.md §1.3, §1.6, §2.5) so
that the product code and the simulator cross-check each other instead of sharing a bug.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import secrets

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.x509.oid import NameOID

CST = dt.timezone(dt.timedelta(hours=8), "CST")
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


# --------------------------------------------------------------------------- RSA (SHA256withRSA)
def rsa_sign(private_key: rsa.RSAPrivateKey, message: bytes) -> str:
    """RSASSA-PKCS1-v1_5 + SHA-256, base64 (standard alphabet, padded)."""
    return base64.b64encode(private_key.sign(message, padding.PKCS1v15(), hashes.SHA256())).decode("ascii")


def rsa_verify(public_key: rsa.RSAPublicKey, message: bytes, signature_b64: str) -> bool:
    try:
        signature = base64.b64decode(signature_b64, validate=True)
    except (ValueError, TypeError):
        return False
    try:
        public_key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def response_message(timestamp: str, nonce: str, body: bytes) -> bytes:
    """§1.3: ``timestamp\\nnonce\\nbody\\n`` (empty body → the last line is just ``\\n``)."""
    return timestamp.encode() + b"\n" + nonce.encode() + b"\n" + body + b"\n"


def request_message(method: str, canonical_url: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """§2.5: ``METHOD\\ncanonical_url\\ntimestamp\\nnonce\\nbody\\n``."""
    head = f"{method}\n{canonical_url}\n{timestamp}\n{nonce}\n".encode()
    return head + body + b"\n"


# --------------------------------------------------------------------------- AEAD_AES_256_GCM
def aead_encrypt(apiv3_key: str, plaintext: bytes, associated_data: str, nonce: str) -> str:
    """§1.6: key = 32 UTF-8 bytes, nonce = 12 UTF-8 bytes; returns base64(ciphertext || tag)."""
    key = apiv3_key.encode("utf-8")
    if len(key) != 32:
        raise ValueError("APIv3 key must be 32 bytes")
    return base64.b64encode(
        AESGCM(key).encrypt(nonce.encode("utf-8"), plaintext, associated_data.encode("utf-8"))
    ).decode("ascii")


def aead_decrypt(apiv3_key: str, ciphertext_b64: str, associated_data: str, nonce: str) -> bytes:
    return AESGCM(apiv3_key.encode("utf-8")).decrypt(
        nonce.encode("utf-8"), base64.b64decode(ciphertext_b64), associated_data.encode("utf-8")
    )


# --------------------------------------------------------------------------- keys and certificates
def rsa_oaep_decrypt(private_key: rsa.RSAPrivateKey, ciphertext_b64: str) -> str:
    """A sensitive request field (bank account, real name) the merchant encrypted with a platform key."""
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    return private_key.decrypt(base64.b64decode(ciphertext_b64), oaep).decode()


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_key_pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")


def public_key_pem(key: rsa.RSAPublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


@functools.lru_cache(maxsize=16)
def load_private_key(pem: str | bytes) -> rsa.RSAPrivateKey:
    """An RSA private key from its PEM. Cached: a parse validates the key (~34 ms of CPU) and every simulator
    with fixed keys loads the same three (testkeys/); a key object is immutable, so they share one parse."""
    key = serialization.load_pem_private_key(pem.encode() if isinstance(pem, str) else pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("not an RSA private key")
    return key


def load_public_key(pem: str | bytes) -> rsa.RSAPublicKey:
    """Accept a bare SPKI public key PEM or an X.509 certificate PEM (apiclient_cert.pem)."""
    data = pem.encode() if isinstance(pem, str) else pem
    if b"BEGIN CERTIFICATE" in data:
        key = x509.load_pem_x509_certificate(data).public_key()
    else:
        key = serialization.load_pem_public_key(data)
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("not an RSA public key")
    return key


def serial_hex(cert: x509.Certificate) -> str:
    """Uppercase hex of the certificate serial number (how ``Wechatpay-Serial`` spells it)."""
    return format(cert.serial_number, "X")


def new_serial_number() -> int:
    """A positive 159-bit serial whose uppercase hex is exactly 40 characters (no leading zero)."""
    return secrets.randbelow((1 << 159) - (1 << 156)) + (1 << 156)


def make_certificate(
    key: rsa.RSAPrivateKey,
    common_name: str,
    *,
    serial_number: int | None = None,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    """A self-signed X.509 certificate (the simulator's stand-in for the Tenpay-issued one)."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    not_before = not_before or now - dt.timedelta(days=1)
    not_after = not_after or now + dt.timedelta(days=5 * 365)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "CN"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tally Channel Simulator (TEST ONLY)"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial_number or new_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


def certificate_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def load_certificate(pem: str | bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode() if isinstance(pem, str) else pem)


def rfc3339_cst(when: dt.datetime) -> str:
    """``yyyy-MM-DDTHH:mm:ss+08:00``."""
    return when.astimezone(CST).strftime("%Y-%m-%dT%H:%M:%S+08:00")
