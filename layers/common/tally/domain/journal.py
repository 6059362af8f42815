"""The decision journal (issue #36, docs/audit.md): hash-chained records, a day's Merkle root, the seal.

Pure: what a record is, how it is hashed and chained, and how a chain, a day and the rows a record names are
checked. store/journal.py writes records in the decision's own transaction; service/audit.py seals, exports
and verifies; an auditor's `tally audit verify` runs these same functions offline against an export.

* canonical JSON: sorted keys, no whitespace, UTF-8 (not \\u-escaped), integers only (a float is refused:
  money is integer cents, R1).
* a record's hash = SHA-256(previous hash's 32 bytes + canonical(record)); the first record of a chain
  follows GENESIS (32 zero bytes).
* a chain is one merchant's records of one Asia/Shanghai day in one lane (`lane_of` the order key): LANES
  chains per merchant and day, so the payments of different orders do not all contend for one head item;
  within an order the lane is fixed, so one order's story is one chain's order.
* the day's Merkle root is RFC 6962's over the record hashes ordered by (chain, seq): leaf = SHA-256(0x00 +
  hash), node = SHA-256(0x01 + left + right), so a leaf can never pass for a node.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tally.domain.clock import CHINA

VERSION = 1
GENESIS = "0" * 64
LANES = 4  # chains per merchant and day (see the module doc)
OWN_LANE = (
    LANES  # the merchant's own chain of a day: its configuration and key changes, apart from the orders
)


class NotCanonical(ValueError):
    """A value the journal cannot hold (a float, a non-string key, an unknown type)."""


def _check(value: Any, path: str = "$") -> None:
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotCanonical(f"{path}: key {k!r} is not a string")
            _check(v, f"{path}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")
        return
    raise NotCanonical(f"{path}: {type(value).__name__} is not journal data (integers only for money)")


def canonical(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, integers only."""
    _check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_hash(prev: str, record: Mapping[str, Any]) -> str:
    return hashlib.sha256(bytes.fromhex(prev) + canonical(record)).hexdigest()


def shanghai_day(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, CHINA).date().isoformat()


def lane_of(subject: str) -> int:
    return int.from_bytes(hashlib.sha256(subject.encode()).digest()[:4], "big") % LANES


def chain_id(merchant: str, day: str, lane: int) -> str:
    return f"{merchant}#{day}#{lane}"


def split_chain(chain: str) -> tuple[str, str, int]:
    merchant, day, lane = chain.rsplit("#", 2)
    return merchant, day, int(lane)


@dataclass(frozen=True)
class Head:
    """A chain's last record (seq 0 and GENESIS: the chain has none yet)."""

    chain: str
    seq: int = 0
    hash: str = GENESIS


@dataclass(frozen=True)
class Ref:
    """A stored row the record speaks for: the fields that must still hold these values when verified."""

    table: str  # a logical name: ledger, transitions, notify_raw, refunds, notify_event
    key: str
    fields: Mapping[str, Any]  # `name[]`: the row's list `name` holds this value (a history line)

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "key": self.key, "fields": dict(self.fields)}


@dataclass(frozen=True)
class Entry:
    """One journal record as stored: its chain position, the record and its hash."""

    chain: str
    seq: int
    hash: str
    record: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"{self.chain}/{self.seq}"


def make_record(
    head: Head,
    *,
    kind: str,
    at: str,
    subject: str,
    refs: Sequence[Ref] = (),
    evidence: Sequence[Mapping[str, str]] = (),
    facts: Mapping[str, Any] | None = None,
) -> Entry:
    """The record after `head`: what was decided (`kind`, `subject`, `facts`), which rows say it (`refs`),
    which kept objects prove it (`evidence`: {"kind", "sha256"})."""
    record = {
        "v": VERSION,
        "chain": head.chain,
        "seq": head.seq + 1,
        "prev": head.hash,
        "at": at,
        "kind": kind,
        "subject": subject,
        "facts": dict(facts or {}),
        "refs": [r.as_json() for r in refs],
        "evidence": [dict(e) for e in evidence],
    }
    return Entry(head.chain, head.seq + 1, record_hash(head.hash, record), record)


# ------------------------------------------------------------------------------------------------ Merkle


def leaf_hash(record_hash_hex: str) -> bytes:
    return hashlib.sha256(b"\x00" + bytes.fromhex(record_hash_hex)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(hashes: Sequence[str]) -> str:
    """RFC 6962 Merkle tree hash over the record hashes in order (empty: SHA-256 of nothing)."""
    if not hashes:
        return hashlib.sha256(b"").hexdigest()
    return _mth([leaf_hash(h) for h in hashes]).hex()


def _mth(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def day_order(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.chain, e.seq))


# ------------------------------------------------------------------------------------------------ seal


def seal_payload(
    merchant: str, day: str, entries: Iterable[Entry], *, sealed_at: str, key_id: str
) -> dict[str, Any]:
    """What is signed for one merchant's day: every chain's head, the count and the Merkle root."""
    ordered = day_order(entries)
    heads: dict[str, Entry] = {}
    for e in ordered:
        heads[e.chain] = e
    return {
        "v": VERSION,
        "merchant": merchant,
        "day": day,
        "chains": [{"chain": c, "seq": e.seq, "head": e.hash} for c, e in sorted(heads.items())],
        "records": len(ordered),
        "merkle_root": merkle_root([e.hash for e in ordered]),
        "sealed_at": sealed_at,
        "key_id": key_id,
    }


# ------------------------------------------------------------------------------------------------ verify


@dataclass
class Finding:
    """The first thing that does not fit: which record (or seal / row / object) and why."""

    where: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, where: str, why: str) -> None:
        self.findings.append(Finding(where, why))


def verify_chain(entries: Sequence[Entry]) -> Finding | None:
    """One chain's records in seq order: numbered 1..n, each following the previous one's hash, each hash
    the hash of its record. Returns the first record that does not fit."""
    prev = GENESIS
    for expected, e in enumerate(sorted(entries, key=lambda x: x.seq), start=1):
        rec = e.record
        if e.seq != expected or rec.get("seq") != e.seq:
            return Finding(e.name, f"expected seq {expected} (a record is missing or moved)")
        if rec.get("chain") != e.chain:
            return Finding(e.name, f"record names chain {rec.get('chain')!r}")
        if rec.get("prev") != prev:
            return Finding(e.name, "does not follow the previous record's hash")
        try:
            actual = record_hash(prev, rec)
        except (NotCanonical, ValueError) as exc:
            return Finding(e.name, f"not canonical: {exc}")
        if actual != e.hash:
            return Finding(e.name, "its content does not hash to its stored hash (changed after writing)")
        prev = e.hash
    return None


def verify_seal(payload: Mapping[str, Any], entries: Sequence[Entry]) -> Finding | None:
    """The day's records against the signed seal: same heads, same count, same Merkle root."""
    where = f"seal {payload.get('merchant')}/{payload.get('day')}"
    ordered = day_order(entries)
    heads: dict[str, Entry] = {}
    for e in ordered:
        heads[e.chain] = e
    sealed = {c["chain"]: c for c in payload.get("chains", [])}
    for chain, c in sorted(sealed.items()):
        mine = heads.get(chain)
        if mine is None:
            return Finding(f"{chain}/{c['seq']}", "sealed chain has no records in the journal")
        if mine.seq != c["seq"] or mine.hash != c["head"]:
            if mine.seq > c["seq"]:
                return Finding(f"{chain}/{c['seq'] + 1}", "record appended after the seal")
            if mine.seq == c["seq"]:
                return Finding(f"{chain}/{c['seq']}", "differs from the sealed head (rewritten)")
            return Finding(
                f"{chain}/{c['seq']}", f"sealed head is seq {c['seq']}, the journal ends at {mine.seq}"
            )
    for chain in sorted(heads):
        if chain not in sealed:
            return Finding(f"{chain}/1", "chain not in the seal")
    if payload.get("records") != len(ordered):
        return Finding(where, f"seal counts {payload.get('records')} records, the journal has {len(ordered)}")
    if payload.get("merkle_root") != merkle_root([e.hash for e in ordered]):
        return Finding(where, "Merkle root differs")
    return None


def field_digest(value: Any) -> str:
    return sha256_hex(canonical(value))


def verify_refs(entry: Entry, rows: Mapping[tuple[str, str], Mapping[str, Any] | None]) -> Finding | None:
    """Every row a record speaks for still holds what the record says (None in `rows`: the row is gone)."""
    for ref in entry.record.get("refs", []):
        row = rows.get((ref["table"], ref["key"]))
        if row is None:
            return Finding(entry.name, f"{ref['table']} row {ref['key']} is missing")
        for name, value in sorted(ref["fields"].items()):
            if name.endswith("[]"):  # a line the row's list must still hold (a history line, appended to)
                if value not in (row.get(name[:-2]) or []):
                    return Finding(
                        entry.name, f"{ref['table']} row {ref['key']}: a {name[:-2]} line is missing"
                    )
                continue
            if row.get(name) != value:
                return Finding(
                    entry.name,
                    f"{ref['table']} row {ref['key']}: {name} is {row.get(name)!r}, journaled {value!r}",
                )
    return None


def verify_evidence(entry: Entry, objects: Mapping[str, bytes | None]) -> Finding | None:
    """Every kept object the record names (by SHA-256) is there and still hashes to it."""
    for ev in entry.record.get("evidence", []):
        data = objects.get(ev["sha256"])
        if data is None:
            return Finding(entry.name, f"evidence {ev['kind']} {ev['sha256'][:12]}… is missing")
        if sha256_hex(data) != ev["sha256"]:
            return Finding(
                entry.name, f"evidence {ev['kind']} {ev['sha256'][:12]}… does not hash to its name"
            )
    return None
