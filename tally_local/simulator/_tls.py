"""Real certificates for the simulator's TLS listener (WeChat Pay v2 `/secapi/` mutual TLS), made with
`cryptography`: one CA playing WeChat's (it issues the server certificate for 127.0.0.1 and each merchant's
API client certificate, as WeChat issues apiclient_cert.pem), never written anywhere but a temp file."""

from __future__ import annotations

import datetime as dt
import ipaddress
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class TestCA:
    """A CA and the certificates it issues (TEST ONLY)."""

    def __init__(self, name: str = "Tally simulator CA (TEST ONLY)"):
        self.key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _pem_cert(self.cert)

    def issue(self, common_name: str, *, server: bool) -> tuple[str, str]:
        """(certificate PEM, private key PEM): a server certificate for 127.0.0.1, or a client certificate."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        return _pem_cert(builder.sign(self.key, hashes.SHA256())), _pem_key(key)


def temp_pem(*pems: str) -> str:
    """A temp file holding the PEMs (ssl wants files); the caller's process owns it."""
    handle = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)  # noqa: SIM115 - path returned
    with handle:
        handle.write("".join(pems))
    return handle.name


def fingerprint(der: bytes) -> str:
    return x509.load_der_x509_certificate(der).fingerprint(hashes.SHA256()).hex()


def fingerprint_pem(pem: str) -> str:
    return x509.load_pem_x509_certificate(pem.encode()).fingerprint(hashes.SHA256()).hex()
