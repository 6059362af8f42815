"""The notify hot path's shortcuts (issue #20 item 4) change no result: same shard numbers (existing rows are
found where they were written), same timestamps, one AEAD per key that still refuses the wrong key, strict
base64, and shared success ACKs that nobody can change."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import random
import time

import pytest
from tally.channels.wechatpay_v3 import wire as wx
from tally.service.ingest import ACKS
from tally.store.tables import iso_now, shard_of


def test_shard_of_is_the_number_every_stored_row_was_sharded_by():
    rng = random.Random(20)
    for _ in range(5000):
        key = f"wechatpay#{rng.getrandbits(64)}"
        for shards in (4, 8, 16):
            assert shard_of(key, shards) == int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % shards


def test_iso_now_with_its_per_second_cache_matches_strftime():
    rng = random.Random(21)
    base = 1_796_000_000.0
    times = [base + rng.random() * 3 for _ in range(3000)] + [rng.uniform(0, 2e9) for _ in range(3000)]
    for t in times:
        want = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
        assert iso_now(t) == want, t


def test_one_aead_per_key_still_refuses_another_keys_ciphertext():
    key_a, key_b = os.urandom(32), os.urandom(32)
    sealed = wx.aes_gcm_encrypt(key_a, "nonce1234567", "transaction", b'{"a":1}')
    assert wx.aes_gcm_decrypt(key_a, "nonce1234567", "transaction", sealed) == b'{"a":1}'
    with pytest.raises(wx.DecryptError):
        wx.aes_gcm_decrypt(key_b, "nonce1234567", "transaction", sealed)
    assert wx.aes_gcm_decrypt(key_a, "nonce1234567", "transaction", sealed) == b'{"a":1}'


@pytest.mark.parametrize("bad", ["QQ", "QQ===", "Q Q==", "ab==cd", "Q\u00e9==", "QQ==\n"])
def test_strict_base64_refuses_what_validate_refused(bad):
    with pytest.raises(wx.DecryptError):
        wx.aes_gcm_decrypt(os.urandom(32), "n", "", bad)
    assert wx.rsa_verify(None, b"m", bad) is False  # refused before any key is touched
    with pytest.raises(ValueError):
        base64.b64decode(bad, validate=True)


def test_success_acks_are_shared_and_frozen():
    first, again = ACKS["wechatpay_v3"].success(), ACKS["wechatpay_v3"].success()
    assert first is again and (first.status, first.body, first.outcome) == (204, "", "accepted")
    assert ACKS["wechatpay_v3"].success("duplicate").outcome == "duplicate"
    assert ACKS["alipay"].success().body == "success"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.status = 500  # type: ignore[misc]


JSON_BODIES = [
    b'{"id":"a","resource":{"x":1}}',
    '{"summary":"支付成功"}'.encode(),
    b'{"a":"\xed\xa0\x80"}',  # an encoded lone surrogate: json.loads(bytes) decodes with surrogatepass
    b'{"a":"\xff"}',  # not UTF-8
    b"{\x00\x00\x00",
    '{"a":1}'.encode("utf-16-le"),
    '{"a":1}'.encode("utf-16"),
    '{"a":1}'.encode("utf-8-sig"),
    b"{",
    b"{}",
    b"{} x",
    b"[1]",
    b"",
    b'{"a":' * 3000,  # deep: RecursionError or a decode error, as json.loads
]


@pytest.mark.parametrize("data", JSON_BODIES)
def test_json_without_the_encoding_sniff_answers_as_json_loads(data):
    """wire._json is json.loads(bytes) for every body: the same object or the same refusal (issue #20)."""
    import json

    def outcome(parse):
        try:
            return ("ok", parse(data))
        except (ValueError, RecursionError) as exc:
            return ("refused", type(exc).__name__)

    assert outcome(wx._json) == outcome(json.loads)


def test_entry_fields_in_one_pass_are_the_properties():
    """R43: Settlement.entry_fields sums the promotions once; the values are the properties' own."""
    from tally.domain.settlement import CASH, NOCASH, Promotion, Settlement

    rng = random.Random(43)
    for _ in range(500):
        promotions = []
        for i in range(rng.randrange(0, 4)):
            amount = rng.randrange(0, 500)
            merchant = rng.randrange(0, amount + 1)
            channel = rng.randrange(0, amount - merchant + 1)
            other = rng.randrange(0, amount - merchant - channel + 1)
            kind = rng.choice([CASH, NOCASH, "ALIPAY_FIX_VOUCHER"])
            promotions.append(Promotion(f"c{i}", kind, amount, merchant, channel, other))
        discount = sum(p.amount_cent for p in promotions) + rng.randrange(0, 100)
        total = discount + rng.randrange(1, 10_000)
        point = rng.randrange(0, total - discount + 1) if rng.random() < 0.3 else 0
        s = Settlement("x", total, total - discount - point, total, tuple(promotions), point_cent=point)
        fields = s.entry_fields()
        for name in (
            "cash_promotion_cent",
            "nocash_promotion_cent",
            "merchant_funded_cent",
            "channel_funded_cent",
            "other_funded_cent",
            "unattributed_cent",
        ):
            assert fields[name] == getattr(s, name), name


def test_by_stored_remembers_only_registered_channels():
    from tally.channels import registry

    assert registry.by_stored("wechatpay") is registry.get("wechatpay_v3")  # v2 stores it too: v3 owns
    assert registry.by_stored("alipay") is registry.get("alipay")
    for junk in ("nope", "", "WECHATPAY"):
        assert registry.by_stored(junk) is None
    assert set(registry._BY_STORED) <= {c.stored for c in registry.all_channels()}


def test_r16_v3_outcome_of_remembered_table_is_the_wire_table():
    """`WeChatPayV3.outcome_of` keeps the wire's TRADE_STATE after its first call (no import per callback): every
    known state maps as the table says, an unknown one stays None (a person, R16), asked twice the same."""
    from tally.channels import registry
    from tally.channels.wechatpay_v3.wire import TRADE_STATE

    channel = registry.get("wechatpay_v3")
    for _ in range(2):
        for state, outcome in TRADE_STATE.items():
            assert channel.outcome_of(state) is outcome
        assert channel.outcome_of("NOT_A_STATE") is None
        assert channel.outcome_of("success") is None  # the channel's word, verbatim: no case folding
