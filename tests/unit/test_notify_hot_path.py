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
