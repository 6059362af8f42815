"""Which addresses a merchant's webhook may reach (tally.domain.webhooks.address_refusal): the public internet
only, so a tenant cannot point Tally at what sits beside it (SSRF)."""

import pytest
from tally.domain.webhooks import address_refusal


@pytest.mark.parametrize(
    "address,why",
    [
        ("127.0.0.1", "loopback"),  # the Lambda runtime API listens here
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),  # instance metadata
        ("fe80::1%eth0", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "private or reserved"),  # carrier-grade NAT
        ("0.0.0.0", "private or reserved"),
        ("::ffff:10.0.0.1", "private"),  # an IPv4 address written as IPv6
        ("224.0.0.1", "multicast"),
        ("fd00::1", "private"),
    ],
)
def test_an_address_beside_tally_is_refused_with_its_kind(address, why):
    refusal = address_refusal(address)
    assert refusal is not None and why in refusal


@pytest.mark.parametrize("address", ["203.0.114.7", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_a_public_address_is_a_receiver(address):
    assert address_refusal(address) is None
