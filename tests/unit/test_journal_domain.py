"""The journal's pure rules (domain/journal.py): canonical JSON, chaining, Merkle root, what verify names."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from tally.domain import journal as j


def chain_of(n: int, chain: str = "m1#2026-12-01#0") -> list[j.Entry]:
    head = j.Head(chain)
    out = []
    for i in range(n):
        e = j.make_record(
            head,
            kind="payment.booked",
            at=f"2026-12-01T00:00:0{i}.000Z",
            subject=f"m1#o{i}",
            refs=[j.Ref("ledger", f"k{i}", {"amount_cent": 100 + i})],
            evidence=[{"kind": "raw_body", "sha256": j.sha256_hex(f"body{i}".encode())}],
        )
        out.append(e)
        head = j.Head(chain, e.seq, e.hash)
    return out


def test_canonical_is_sorted_compact_utf8_and_refuses_floats():
    assert j.canonical({"b": 1, "a": "元"}) == '{"a":"元","b":1}'.encode()
    with pytest.raises(j.NotCanonical):
        j.canonical({"amount": 1.5})
    with pytest.raises(j.NotCanonical):
        j.canonical({1: "x"})


def test_record_hash_is_sha256_of_previous_hash_and_canonical_record():
    e = chain_of(1)[0]
    expected = hashlib.sha256(bytes(32) + j.canonical(e.record)).hexdigest()
    assert e.hash == expected and e.record["prev"] == j.GENESIS and e.seq == 1


def test_a_whole_chain_verifies():
    assert j.verify_chain(chain_of(5)) is None


def test_a_changed_record_is_named():
    entries = chain_of(5)
    changed = dict(entries[2].record, facts={"amount_cent": 1})
    entries[2] = replace(entries[2], record=changed)
    finding = j.verify_chain(entries)
    assert finding is not None and finding.where.endswith("/3") and "changed" in finding.why


def test_a_deleted_record_is_named_where_the_gap_is():
    entries = chain_of(5)
    del entries[1]
    finding = j.verify_chain(entries)
    assert finding is not None and finding.where.endswith("/3")


def test_a_rewritten_tail_still_breaks_the_seal():
    entries = chain_of(4)
    seal = j.seal_payload("m1", "2026-12-01", entries, sealed_at="x", key_id="k")
    assert j.verify_seal(seal, entries) is None
    assert j.verify_seal(seal, entries[:3]) is not None  # the last record deleted: chain alone can't tell
    forged = j.make_record(j.Head(entries[2].chain, 3, entries[2].hash), kind="x", at="y", subject="z")
    finding = j.verify_seal(seal, [*entries[:3], forged])
    assert finding is not None and finding.where.endswith("/4") and "rewritten" in finding.why


def test_merkle_root_separates_leaves_from_nodes_and_depends_on_order():
    a, b, c = (j.sha256_hex(x) for x in (b"a", b"b", b"c"))
    assert j.merkle_root([a]) == hashlib.sha256(b"\x00" + bytes.fromhex(a)).hexdigest()
    two = j.merkle_root([a, b])
    assert two == hashlib.sha256(b"\x01" + j.leaf_hash(a) + j.leaf_hash(b)).hexdigest()
    assert j.merkle_root([b, a]) != two
    assert j.merkle_root([a, b, c]) != j.merkle_root([a, b])


def test_refs_and_evidence_name_the_record_whose_row_or_object_changed():
    e = chain_of(2)[1]
    assert j.verify_refs(e, {("ledger", "k1"): {"amount_cent": 101, "other": 5}}) is None
    f = j.verify_refs(e, {("ledger", "k1"): {"amount_cent": 1}})
    assert f is not None and f.where == e.name and "amount_cent" in f.why
    assert j.verify_refs(e, {}) is not None
    assert j.verify_evidence(e, {e.record["evidence"][0]["sha256"]: b"body1"}) is None
    f = j.verify_evidence(e, {e.record["evidence"][0]["sha256"]: b"replaced"})
    assert f is not None and f.where == e.name


def test_lanes_and_days_follow_shanghai_time():
    assert j.shanghai_day(1764604800) == "2025-12-02"  # 2025-12-01T16:00Z is midnight in Shanghai
    assert j.lane_of("m1#o1") == j.lane_of("m1#o1") and 0 <= j.lane_of("x") < j.LANES
    assert j.split_chain(j.chain_id("sp#m1", "2026-12-01", 3)) == ("sp#m1", "2026-12-01", 3)


def test_a_ref_key_reads_back_to_its_table_key_even_with_a_bar_in_a_merchants_number():
    from tally.store.journal import ref_key, split_ref_key

    order = {"pk": "1900000109#A|B", "sk": "PAY#4200000001"}
    assert split_ref_key("transitions", ref_key(order)) == order
    assert split_ref_key("refunds", ref_key({"pk": "1900000109#RN|1"})) == {"pk": "1900000109#RN|1"}
