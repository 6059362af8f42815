"""Provable books (issue #36, docs/audit.md): the daily seal, the auditor's export, the offline verify.

* `AuditService.seal_day(day)`: once the Asia/Shanghai day has closed, for each merchant with records that
  day: the raw bodies its bookings name and the bills downloaded for it are kept in the Object Lock bucket by
  SHA-256 (evidence); the seal (every chain's head, the record count, the Merkle root, the evidence list's
  digest) is signed by KMS and written there too, locked. A day sealed once is not sealed again.
* `AuditService.export(day, out)`: the day's journal, seals, public key, evidence objects and the rows the
  records name as they stand now, in a folder an auditor takes away.
* `verify_export(folder)`: checks that folder with nothing but the public key in it: no AWS, no network.
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tally.domain.journal import (
    Entry,
    Finding,
    canonical,
    seal_payload,
    sha256_hex,
    shanghai_day,
    split_chain,
    verify_chain,
    verify_refs,
    verify_seal,
)
from tally.observability import M, count, logger
from tally.store.audit import SIGNING_ALGORITHM, AuditVault, BillFiles, evidence_key, seal_key
from tally.store.journal import JournalStore, RowReader
from tally.store.tables import EventStore, iso_now

RAW_TABLE = "notify_raw"  # the logical name of the raw rows an export carries (their body's hash, now)
FORMAT = 1
AUDIT_CASE_KIND = (
    "audit_mismatch"  # notify_event manual_kind: a day whose books do not verify (service/queue.py)
)
CHECK_DAYS_BACK = (1, 7, 28)  # the daily verifier: yesterday, a week and four weeks back (docs/audit.md)


def _entries(stored: Iterable[dict[str, Any]]) -> list[Entry]:
    out = []
    for r in stored:
        record = json.loads(r["record"]) if isinstance(r["record"], str) else r["record"]
        out.append(Entry(r["chain"], int(r["seq"]), r["hash"], record))
    return out


class AuditService:
    def __init__(
        self,
        journal: JournalStore,
        rows: RowReader,
        vault: AuditVault,
        bills: BillFiles,
        *,
        cases: EventStore | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.journal = journal
        self.rows = rows
        self.vault = vault
        self.bills = bills
        self.cases = cases
        self.clock = clock

    # ------------------------------------------------------------------ the daily verifier (tamper alarm)

    def check_due(self, back: tuple[int, ...] = CHECK_DAYS_BACK) -> dict[str, Any]:
        """The scheduled run after the seal: yesterday (just sealed) and older sealed days again, each exported
        and verified exactly as an auditor would; every merchant-day that does not verify is a case."""
        today = self.clock()
        return {day: self.check_day(day) for day in (shanghai_day(today - n * 86400) for n in back)}

    def check_day(self, day: str) -> list[str]:
        """Verify `day` as an auditor would; a finding opens (once) a case per merchant-day, and counts."""
        with tempfile.TemporaryDirectory(prefix="tally-audit-") as tmp:
            self.export(day, Path(tmp))
            verdict = verify_export(Path(tmp))
        failed = []
        for merchant, findings in sorted(verdict.merchants.items()):
            if not findings:
                continue
            failed.append(merchant)
            count(M.AUDIT_MISMATCH)
            logger.error(
                "audit verify failed: the books do not match what was sealed",
                extra={"day": day, "merchant": merchant, "findings": [str(f) for f in findings[:20]]},
            )
            if self.cases is not None:
                self.cases.put(
                    f"audit#{merchant}#{day}",
                    AUDIT_CASE_KIND,
                    self.clock(),
                    manual_kind=AUDIT_CASE_KIND,
                    mchid=merchant,
                    bill_date=day,
                    reason=f"{len(findings)} finding(s) in {day}; first: {findings[0]}"[:900],
                )
        return failed

    # ------------------------------------------------------------------ reading a day

    def day(self, day: str, merchant: str | None = None) -> dict[str, list[Entry]]:
        """merchant → the day's records (every lane), from the chain heads of that day."""
        found: dict[str, list[Entry]] = {}
        for head in self.journal.chains_of_day(day):
            m, _, _ = split_chain(head["pk"])
            if merchant and m != merchant:
                continue
            found.setdefault(m, []).extend(_entries(self.journal.records(head["pk"])))
        return found

    # ------------------------------------------------------------------ sealing

    def seal_due(self) -> list[dict[str, Any]]:
        """The scheduled run (after midnight, Asia/Shanghai): seal yesterday."""
        return self.seal_day(shanghai_day(self.clock() - 86400))

    def seal_day(self, day: str) -> list[dict[str, Any]]:
        if day >= shanghai_day(self.clock()):
            raise ValueError(f"{day} has not closed yet (Asia/Shanghai): a seal covers a whole day")
        sealed_already = set(self.vault.seals_of_day(day))
        done = []
        for merchant, entries in sorted(self.day(day).items()):
            key = seal_key(day, merchant)
            if key in sealed_already:
                continue  # a seal is written once; a second would only be a second version
            now_s = self.clock()
            evidence = self._evidence(merchant, day, entries, now_s)
            payload = seal_payload(merchant, day, entries, sealed_at=iso_now(now_s), key_id=self.vault.key_id)
            payload["evidence_digest"] = sha256_hex(canonical(evidence))
            signature = self.vault.sign(canonical(payload))
            seal = {
                "payload": payload,
                "algorithm": SIGNING_ALGORITHM,
                "signature": base64.b64encode(signature).decode("ascii"),
                "evidence": evidence,
            }
            self.vault.put_locked(key, canonical(seal), now_s)
            count(M.AUDIT_SEALED)
            logger.info(
                "day sealed",
                extra={
                    "day": day,
                    "merchant": merchant,
                    "records": len(entries),
                    "root": payload["merkle_root"],
                },
            )
            done.append(
                {"merchant": merchant, "records": len(entries), "merkle_root": payload["merkle_root"]}
            )
        return done

    def _evidence(self, merchant: str, day: str, entries: list[Entry], now_s: float) -> list[dict[str, str]]:
        """The raw bodies the day's bookings name, and the day's bills, kept locked by their SHA-256."""
        evidence: list[dict[str, str]] = []
        raw_keys = {
            str(e.record["facts"]["raw_key"]): e.name
            for e in entries
            if isinstance(e.record.get("facts"), dict) and e.record["facts"].get("raw_key")
        }
        rows = self.rows.rows([(RAW_TABLE, k) for k in sorted(raw_keys)])
        for key, record in sorted(raw_keys.items()):
            row = rows.get((RAW_TABLE, key))
            body = (row or {}).get("body")
            if body is None:  # a body kept as bounded evidence only (R40): nothing whole to keep
                continue
            digest, version = self.vault.keep_evidence(str(body).encode("utf-8"), now_s)
            evidence.append(
                {"kind": "raw_body", "record": record, "key": key, "sha256": digest, "version": version}
            )
        channels = sorted(
            {
                str(e.record["facts"].get("channel"))
                for e in entries
                if e.record.get("facts", {}).get("channel")
            }
        )
        for channel in channels:
            for key, data in self.bills.of_day(channel, merchant, day):
                digest, version = self.vault.keep_evidence(data, now_s)
                evidence.append(
                    {"kind": "bill", "record": "", "key": key, "sha256": digest, "version": version}
                )
        return evidence

    # ------------------------------------------------------------------ export

    def export(self, day: str, out: Path, merchant: str | None = None) -> dict[str, Any]:
        """Write the day's folder: day.json, public_key.pem, <merchant>/{journal.jsonl, seal.json, rows.jsonl},
        evidence/<sha256>."""
        out.mkdir(parents=True, exist_ok=True)
        (out / "evidence").mkdir(exist_ok=True)
        (out / "public_key.pem").write_text(self.vault.public_key_pem())
        by_merchant = self.day(day, merchant)
        summary: dict[str, Any] = {"format": FORMAT, "day": day, "merchants": {}}
        for m, entries in sorted(by_merchant.items()):
            folder = out / m
            folder.mkdir(exist_ok=True)
            with (folder / "journal.jsonl").open("w", encoding="utf-8") as f:
                for e in sorted(entries, key=lambda x: (x.chain, x.seq)):
                    line = {"chain": e.chain, "seq": e.seq, "hash": e.hash, "record": e.record}
                    f.write(canonical(line).decode("utf-8") + "\n")
            seal = self.vault.get(seal_key(day, m))
            evidence: list[dict[str, str]] = []
            if seal is not None:
                (folder / "seal.json").write_bytes(seal)
                evidence = json.loads(seal).get("evidence", [])
            refs = [(r["table"], r["key"]) for e in entries for r in e.record.get("refs", [])]
            refs += [(RAW_TABLE, ev["key"]) for ev in evidence if ev["kind"] == "raw_body"]
            current = self.rows.rows(refs)
            with (folder / "rows.jsonl").open("w", encoding="utf-8") as f:
                for (table, key), row in sorted(current.items(), key=lambda kv: kv[0]):
                    f.write(
                        canonical({"table": table, "key": key, "row": _exported(table, row)}).decode() + "\n"
                    )
            for ev in evidence:
                data = self.vault.get(evidence_key(ev["sha256"]), ev.get("version") or None)
                if data is not None:
                    (out / "evidence" / ev["sha256"]).write_bytes(data)
            summary["merchants"][m] = {"records": len(entries), "sealed": seal is not None}
        (out / "day.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        return summary


def _exported(table: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as the export carries it: a raw row by its body's hash now and its history (the body itself is in
    the evidence); any other whole (integers only)."""
    if row is None:
        return None
    if table == RAW_TABLE:
        body = row.get("body")
        return {
            "body_sha256": None if body is None else sha256_hex(str(body).encode("utf-8")),
            "history": row.get("history") or [],
        }
    return row


# ---------------------------------------------------------------------------------------------- offline


@dataclass
class DayVerdict:
    day: str
    merchants: dict[str, list[Finding]] = field(default_factory=dict)
    records: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.merchants) and not any(self.merchants.values())


def verify_export(folder: Path, merchant: str | None = None) -> DayVerdict:
    """Verify an export with only what is in it (the public key included): no AWS, no network."""
    summary = json.loads((folder / "day.json").read_text())
    verdict = DayVerdict(summary["day"])
    public_pem = (folder / "public_key.pem").read_bytes()
    for m in sorted(summary["merchants"]):
        if merchant and m != merchant:
            continue
        findings = verdict.merchants.setdefault(m, [])
        entries = _entries(
            json.loads(line) for line in (folder / m / "journal.jsonl").read_text().splitlines()
        )
        verdict.records += len(entries)
        rows = {
            (r["table"], r["key"]): r["row"]
            for r in map(json.loads, (folder / m / "rows.jsonl").read_text().splitlines())
        }
        findings += _verify_merchant(folder, m, summary["day"], entries, rows, public_pem)
    return verdict


def _verify_merchant(
    folder: Path,
    merchant: str,
    day: str,
    entries: list[Entry],
    rows: dict[tuple[str, str], Any],
    public_pem: bytes,
) -> list[Finding]:
    findings: list[Finding] = []
    chains: dict[str, list[Entry]] = {}
    for e in entries:
        chains.setdefault(e.chain, []).append(e)
        if split_chain(e.chain)[:2] != (merchant, day):
            findings.append(Finding(e.name, f"belongs to no chain of {merchant} on {day}"))
    for chain in sorted(chains):
        found = verify_chain(chains[chain])
        if found:
            findings.append(found)
    seal_path = folder / merchant / "seal.json"
    if not seal_path.exists():
        findings.append(Finding(f"seal {merchant}/{day}", "the day is not sealed"))
    else:
        seal = json.loads(seal_path.read_bytes())
        payload = seal["payload"]
        if not _signature_holds(public_pem, canonical(payload), base64.b64decode(seal["signature"])):
            findings.append(
                Finding(f"seal {merchant}/{day}", "the signature does not verify with the public key")
            )
        if payload.get("merchant") != merchant or payload.get("day") != day:
            findings.append(Finding(f"seal {merchant}/{day}", "the seal is another merchant's or day's"))
        if payload.get("evidence_digest") != sha256_hex(canonical(seal.get("evidence", []))):
            findings.append(Finding(f"seal {merchant}/{day}", "the evidence list is not the one sealed"))
        found = verify_seal(payload, entries)
        if found:
            findings.append(found)
        findings += _verify_evidence(folder, seal.get("evidence", []), rows)
    for e in sorted(entries, key=lambda x: (x.chain, x.seq)):
        found = verify_refs(e, rows)
        if found:
            findings.append(found)
    return findings


def _verify_evidence(
    folder: Path, evidence: list[dict[str, str]], rows: dict[tuple[str, str], Any]
) -> list[Finding]:
    findings = []
    for ev in evidence:
        where = ev.get("record") or f"{ev['kind']} {ev['key']}"
        path = folder / "evidence" / ev["sha256"]
        if not path.exists():
            findings.append(Finding(where, f"evidence {ev['kind']} {ev['key']} is missing from the export"))
            continue
        if sha256_hex(path.read_bytes()) != ev["sha256"]:
            findings.append(Finding(where, f"evidence {ev['kind']} {ev['key']} does not hash to its name"))
        if ev["kind"] == "raw_body":
            now = (rows.get((RAW_TABLE, ev["key"])) or {}).get("body_sha256")
            if now != ev["sha256"]:
                findings.append(Finding(where, f"raw row {ev['key']}: its body is not the body sealed"))
    return findings


def _signature_holds(public_pem: bytes, message: bytes, signature: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key(public_pem)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return False
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False
