"""What a merchant key change may say in the journal (docs/audit.md): never the secret itself.

A merchant's secret holds private keys, certificates, public keys and symmetric keys (an APIv3 key, a v2 API
key, an app_auth_token). A journal record is kept for years, exported to auditors and sealed: it names a
certificate by its serial and the SHA-256 of its public key, a private key by the SHA-256 of its PUBLIC half
(DER SubjectPublicKeyInfo), a public key by its SHA-256; a symmetric key only by whether it changed (no hash:
a short key hashed could be found by trying). Identifiers (merchant id, app id, certificate serial, public key
id) are not secret and are said as they are.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

IDENTIFIERS = frozenset({"channel", "mchid", "app_id", "merchant_serial", "public_key_id"})
_PEM_CERT = "-----BEGIN CERTIFICATE-----"


def key_change(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """{"fields": name → what the journal may say of it, "changed": the names whose value changed}."""
    old = dict(before or {})
    fields = {name: describe(name, value) for name, value in sorted(after.items())}
    changed = sorted(n for n in set(old) | set(after) if old.get(n) != after.get(n))
    for name in changed:
        if name not in after:
            fields[name] = "removed"
    return {"fields": fields, "changed": changed, "new": before is None}


def describe(name: str, value: Any) -> Any:
    if value is None or value == "" or value == []:
        return None
    if name in IDENTIFIERS and isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [describe(name, v) for v in value]
    if not isinstance(value, str):
        return "set"  # not a key of any kind we know: say only that it is there
    return _asymmetric(value) or "set"  # a symmetric key: that it is set, never its bytes or a hash of them


def _asymmetric(text: str) -> Any:
    """The public description of a certificate (bundle), a private key or a public key; None: none of these."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        load_der_private_key,
        load_der_public_key,
        load_pem_private_key,
        load_pem_public_key,
    )

    data = text.strip().encode("utf-8")
    if _PEM_CERT in text:
        try:
            certs = x509.load_pem_x509_certificates(data)
        except ValueError:
            return None
        found = [
            {"serial": format(c.serial_number, "X"), "public_sha256": _public_sha256(c.public_key())}
            for c in certs
        ]
        return found[0] if len(found) == 1 else found
    loaders: list[tuple[Any, bytes]] = []
    if text.lstrip().startswith("-----BEGIN"):
        loaders = [(load_pem_private_key, data), (load_pem_public_key, data)]
    else:
        try:
            der = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            return None
        loaders = [(load_der_private_key, der), (load_der_public_key, der)]
    for load, raw in loaders:
        try:
            key = load(raw, None) if load in (load_pem_private_key, load_der_private_key) else load(raw)
        except (ValueError, TypeError):
            continue
        public = key.public_key() if hasattr(key, "public_key") else key
        kind = "private key" if load in (load_pem_private_key, load_der_private_key) else "public key"
        return {"kind": kind, "public_sha256": _public_sha256(public)}
    return None


def _public_sha256(public: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return hashlib.sha256(public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).hexdigest()
