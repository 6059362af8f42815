"""The notify hot path's shortcuts (issue #20 item 4) change no result: same shard numbers (existing rows are
found where they were written), same timestamps, one AEAD per key that still refuses the wrong key, strict
base64, and shared success ACKs that nobody can change."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
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
    b'{"a":1} ',  # trailing whitespace: the scanner stops before it, json.loads accepts it
    b'{"a":1}\n\t',
    b'{"a":1}{"b":2}',  # extra data
    b'{"a":1} x',
    b' {"a":1}',
    b'{"a":[1,2,{"b":null}],"c":"\\u00e9\\ud800"}',  # escapes, a lone escaped surrogate
    b'{"a":1,}',
    b'{"a":NaN,"b":-Infinity}',
    b'{"a":1e999}',
    b'{"a":"\x01"}',  # a control character inside a string: refused
    b'{"a":1,"a":2}',  # duplicate keys: the last one wins
    '{"a":"\ufeff"}'.encode(),
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


@pytest.mark.parametrize("data", JSON_BODIES)
def test_envelope_parsed_from_the_decoded_text_answers_as_from_the_bytes(data):
    """The notify path decodes the body once (wire.body_text) and parses the envelope from that text: the same
    envelope or the same DecryptError as from the bytes, and the text is what the raw row stores."""
    from tally.service.ingest import stored_body

    def outcome(*args):
        try:
            return ("ok", wx.parse_envelope(*args))
        except wx.DecryptError as exc:
            return ("refused", str(exc))

    text = wx.body_text(data)
    assert outcome(data, text) == outcome(data)
    assert stored_body(data, text=text) == stored_body(data)
    decoded = data.decode("utf-8", "replace")  # wire._json_text is json.loads on any text: value or message
    assert _text_outcome(wx._json_text, decoded) == _text_outcome(json.loads, decoded)


def _text_outcome(parse, text):
    try:
        return ("ok", parse(text))
    except (ValueError, RecursionError) as exc:
        return ("refused", type(exc).__name__, str(exc))


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


# ---- session 9 (branch lean20d): one read of the amount, the R43 fast path, a cheaper PaymentNotice init


def _old_to_payment_notice(resource, source="notify"):
    """wire.to_payment_notice as it was before session 9 (main 7770193), kept as the oracle the new one must
    answer like: the same notice, or the same DecryptError message."""
    from tally.channels.wechatpay_v3.settlement import wechat_v3_payment
    from tally.domain.money import MoneyError, received_cents
    from tally.domain.notifications import Outcome, PaymentNotice
    from tally.domain.settlement import notice_fields

    try:
        amount = resource.get("amount") or {}
        partner = "sp_mchid" in resource
        total = received_cents(amount["total"])
        transaction_id = resource.get("transaction_id") or ""
        success_time = resource.get("success_time")
        if not isinstance(transaction_id, str) or not isinstance(success_time, (str, type(None))):
            raise TypeError("transaction_id and success_time must be strings")
        trade_state = wx._text(resource["trade_state"])
        settled = (
            notice_fields(wechat_v3_payment, amount, resource.get("promotion_detail"))
            if wx.TRADE_STATE.get(trade_state) is Outcome.PAID
            else {}
        )
        return PaymentNotice(
            channel=wx.STORED,
            transaction_id=transaction_id,
            out_trade_no=wx._text(resource["out_trade_no"]),
            mchid=wx._text(resource["sub_mchid"] if partner else resource["mchid"]),
            sp_mchid=wx._text(resource["sp_mchid"]) if partner else None,
            trade_state=trade_state,
            order_total_cent=total,
            paid_cent=received_cents(amount.get("payer_total", total)),
            currency=wx._text(amount.get("currency") or "CNY"),
            success_time=success_time,
            source=source,
            **settled,
        )
    except (KeyError, TypeError, AttributeError, MoneyError) as exc:
        raise wx.DecryptError(f"transaction resource lacks or mistypes {exc}") from None


def _answer(parse, resource):
    try:
        return ("notice", parse(resource))
    except wx.DecryptError as exc:
        return ("refused", str(exc))


ODD_VALUES = [None, "", "x", 0, 1, -1, 100, 10**11, 10**11 + 1, True, False, 1.0, [], {}, [1], {"a": 1}]


def _resources():
    """A real transaction resource, then each field replaced by each odd value or removed, amounts and
    promotions varied: every refusal and every settlement error the old parser gave."""
    good = {
        "mchid": "1900000109",
        "out_trade_no": "O-1",
        "transaction_id": "4200000001",
        "trade_state": "SUCCESS",
        "success_time": "2026-12-02T09:00:00+08:00",
        "amount": {"total": 100, "payer_total": 100, "currency": "CNY"},
    }
    yield good
    partner = {**good, "sp_mchid": "1900000100", "sub_mchid": "1900000109"}
    del partner["mchid"]
    yield partner
    for base in (good, partner):
        for name in list(base) + ["sp_mchid", "sub_mchid", "promotion_detail"]:
            yield {k: v for k, v in base.items() if k != name}
            for odd in ODD_VALUES:
                yield {**base, name: odd}
        for name in ("total", "payer_total", "currency"):
            yield {**base, "amount": {k: v for k, v in base["amount"].items() if k != name}}
            for odd in ODD_VALUES:
                yield {**base, "amount": {**base["amount"], name: odd}}
    for state in [*wx.TRADE_STATE, "NOPE"]:
        yield {**good, "trade_state": state, "amount": {"total": 100, "payer_total": 90}}
    coupon = {"coupon_id": "C1", "type": "CASH", "amount": 10, "merchant_contribute": 10}
    for promotions in (
        [coupon],
        [{**coupon, "type": "NOCASH"}],
        [{**coupon, "amount": 11}],
        [1],
        "x",
        [],
        {},
    ):
        for payer in (90, 100, 89):
            yield {**good, "amount": {"total": 100, "payer_total": payer}, "promotion_detail": promotions}


def test_r43_to_payment_notice_answers_every_resource_as_before():
    """Every field checked once, in the old order (the refusal names the same field), and the R43 settlement
    or its error identical, on the fast path (no promotion, payer_total == total) and off it."""
    seen = set()
    for resource in _resources():
        new, old = _answer(wx.to_payment_notice, resource), _answer(_old_to_payment_notice, resource)
        assert new == old, resource
        seen.add(new[0] if new[0] == "refused" else ("error" if new[1].settlement_error else "booked"))
    assert seen == {"refused", "error", "booked"}


def test_r43_v3_fast_path_is_the_settlement_it_skips():
    """`wechat_v3_notice_fields` is `notice_fields(wechat_v3_payment, …)` for every amount, and its shortcut
    `plain_payment_fields` is the Settlement's own entry fields."""
    from tally.channels.wechatpay_v3.settlement import wechat_v3_notice_fields, wechat_v3_payment
    from tally.domain.settlement import MAX_CENT, Settlement, notice_fields, plain_payment_fields

    rng = random.Random(9)
    for total in [0, 1, 100, MAX_CENT, *(rng.randrange(0, MAX_CENT) for _ in range(200))]:
        assert plain_payment_fields(total) == Settlement("wechatpay", total, total, total).entry_fields()
        assert list(plain_payment_fields(total)) == list(Settlement("wechatpay", 1, 1, 1).entry_fields())
    amounts = [{"total": t, "payer_total": p} for t in ODD_VALUES for p in ODD_VALUES]
    amounts += [{"total": 5}, {"payer_total": 5}, {}, {"total": 5, "payer_total": 4}, [], "x"]
    for amount in amounts:
        for promotions in (None, [], [{"coupon_id": "C", "type": "CASH", "amount": 1}]):
            assert wechat_v3_notice_fields(amount, promotions) == notice_fields(
                wechat_v3_payment, amount, promotions
            ), (amount, promotions)


def test_payment_notice_init_is_the_dataclass_one():
    """PaymentNotice's own __init__ (one dict update) takes the dataclass fields in order, with their defaults;
    the notice stays frozen, comparable, replaceable and convertible like any dataclass."""
    import inspect

    from tally.domain.notifications import PaymentNotice

    fields = dataclasses.fields(PaymentNotice)
    params = list(inspect.signature(PaymentNotice.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields
    ]
    args = ("wechatpay", "42", "O-1", "19", None, "SUCCESS", 100, 90, "CNY", None)
    notice = PaymentNotice(*args)
    assert vars(notice) == dict(zip([f.name for f in fields], [*args, "notify", None, None], strict=True))
    assert notice == PaymentNotice(*args) and notice != PaymentNotice(*args, source="query")
    assert dataclasses.replace(notice, source="query").source == "query"
    assert dataclasses.asdict(notice) == notice.as_message()
    with pytest.raises(dataclasses.FrozenInstanceError):
        notice.paid_cent = 100  # type: ignore[misc]


def test_signed_message_is_the_lines_wechat_signs():
    """§1.3: timestamp, nonce and body, each followed by a newline (built in one join, the same bytes)."""
    for body in (b"", b"{}", '{"summary":"支付成功"}'.encode(), bytes(range(256)) * 8):
        assert wx.signed_message("1700000000", "n0nce", body) == b"1700000000\nn0nce\n" + body + b"\n"


def test_as_message_is_a_copy_of_the_fields():
    from tally.domain.notifications import PaymentNotice

    notice = PaymentNotice("wechatpay", "42", "O-1", "19", None, "SUCCESS", 100, 100, "CNY", None)
    message = notice.as_message()
    assert message == dataclasses.asdict(notice)
    message["paid_cent"] = 1
    assert notice.paid_cent == 100  # the message is the queue's own dict


def test_iso_now_milliseconds_at_the_edges_of_a_second():
    """The looked-up milliseconds are the formatted ones, at whole seconds and just below the next."""
    import math

    for second in (0.0, 1.0, 1_796_000_000.0, 2e9):
        for t in (second, math.nextafter(second + 1, 0), second + 0.0005, second + 0.9995, second + 0.999):
            want = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
            assert iso_now(t) == want, t


def test_verify_headers_keeps_what_the_comprehension_kept():
    from tally.service.ingest import _verify_headers

    names = ["wechatpay-signature", "wechatpay-timestamp", "wechatpay-nonce", "wechatpay-serial"]
    names += ["wechatpay-signature-type", "request-id", "content-type", "x-other", "Wechatpay-Nonce"]
    rng = random.Random(6)
    for _ in range(300):
        headers = {n: "v" * rng.choice([0, 1, 511, 512, 513, 5000]) for n in names if rng.random() < 0.6}
        keep = [n for n in names[:6] if n in headers]
        assert _verify_headers(headers) == {k: headers[k][:512] for k in keep}
        assert list(_verify_headers(headers)) == keep


@pytest.mark.parametrize("value", [0, 1, 10**11, 10**20, -1, True, False, 1.0, "1", None, [], 2**63])
def test_received_cents_fast_path_answers_as_cents(value):
    """R14: a reported amount is integer cents and never negative; the plain-int shortcut answers the same."""
    from tally.domain.money import MoneyError, cents, received_cents

    def old(v):
        amount = cents(v)
        if amount < 0:
            raise MoneyError(f"a reported amount is never negative: {v!r}")
        return amount

    def answer(fn):
        try:
            return ("ok", fn(value))
        except MoneyError as exc:
            return ("refused", str(exc))

    assert answer(received_cents) == answer(old)
