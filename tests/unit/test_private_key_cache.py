"""A merchant's RSA private key is parsed once per container: loading validates the key (~57 ms of CPU), and
every client built for the merchant (refunds, queries, bills, the poller's runs) loads it again."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tally.channels.alipay import wire as ali
from tally.channels.wechatpay_v3 import wire as wx


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.parametrize("wire", [wx, ali], ids=["wechatpay_v3", "alipay"])
def test_the_same_pem_is_parsed_once_and_signs_as_the_key_it_names(wire):
    first, second = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    pem = _pem(first)
    loaded = wire.load_private_key(pem)
    assert wire.load_private_key(pem) is loaded  # the parsed key again, not a second parse
    assert wire.load_private_key(pem.decode()).private_numbers() == first.private_numbers()
    assert loaded.private_numbers() == first.private_numbers()
    assert wire.load_private_key(_pem(second)).private_numbers() == second.private_numbers()


@pytest.mark.parametrize("wire", [wx, ali], ids=["wechatpay_v3", "alipay"])
def test_a_key_that_is_not_rsa_is_refused_every_time(wire):
    pem = _pem(ec.generate_private_key(ec.SECP256R1()))
    for _ in range(2):  # a refusal is not remembered as a key
        with pytest.raises(ValueError, match="RSA"):
            wire.load_private_key(pem)
