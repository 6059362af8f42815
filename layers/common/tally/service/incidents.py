"""Incidents: many failures with one cause are one thing a person hears about once (docs/alerts.md).

An incident groups the work queue's live items (R41) that share a fingerprint (kind, channel, merchant, cause:
one merchant's wrong platform key, one merchant's failing credentials, one bill layout ...) or one CloudWatch
alarm (enqueue failures, DynamoDB throttles, a function's errors). It has a first seen, a last seen, a count,
the yuan at stake, a rate (failures in the last hour) and the cases it holds, and it changes state three ways:

    opened     a fingerprint with live cases and no live incident (or a resolved one whose count grew again);
               an alarm going to ALARM (or INSUFFICIENT_DATA)
    escalated  its rate reached `escalate_per_h` (once per incident)
    resolved   its cases were cleared ("cleared"), nothing new arrived for `quiet_s` ("quiet"), or its alarm
               went back to OK ("ok")

Only those changes leave this module (`sweep()` and `alarm()` return them); the notifier turns each into one
card per destination (service/alerts.py). Nothing here is per failure.

Who must act is said by `origin`: "ours" (our own machinery: alarms on enqueue, DynamoDB, function errors,
an undelivered alert), "tenant" (a merchant's configuration: a wrong key, an unknown merchant, credentials
failing the live check, an expiring certificate) and "money" (a payment, refund or bill difference a person
decides).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from tally.observability import M, count, logger
from tally.service.queue import _slug
from tally.store.alerts import KEEP_S, IncidentStore, StaleIncident
from tally.store.tables import iso_now

List = list  # IncidentService.list shadows the builtin inside the class body

OPENED, ESCALATED, RESOLVED = "opened", "escalated", "resolved"
LIVE = ("open", "escalated")
HOUR_S = 3600
CASES_KEPT = 50  # the case ids an incident lists (its count says how many there are)
HISTORY_KEPT = 20

# the queue kinds that are a tenant's configuration, not money to decide and not our machinery
TENANT_KINDS = frozenset({"rejected", "merchant-not-ready", "certificate", "suspected-forgery"})
OURS_KINDS = frozenset({"alert-delivery", "heartbeat-echo"})
# CloudWatch alarms (by the logical id inside their name) about a tenant's configuration; every other alarm is ours
TENANT_ALARMS = ("NotifyRejected", "MerchantNotReady", "CertExpiring", "ReportForged", "PlatformCert")
_TENANT_CAUSE = re.compile(r"unknown merchant|not configured|no such merchant|credential", re.IGNORECASE)


class IncidentService:
    def __init__(
        self,
        store: IncidentStore,
        work: Any,
        *,
        clock: Callable[[], float] = time.time,
        escalate_per_h: int = 100,
        quiet_s: int = HOUR_S,
    ):
        self.store = store
        self._work = work  # the WorkQueue, or a function building it (bootstrap: built on first use)
        self.clock = clock
        self.escalate_per_h = escalate_per_h
        self.quiet_s = quiet_s

    # ================================================================ reading

    def list(self, *, live_only: bool = False) -> List[dict[str, Any]]:
        """Live incidents first (escalated, then open), by rate; then resolved ones, newest first."""
        rows = self.store.all()
        if live_only:
            rows = [r for r in rows if r.get("state") in LIVE]
        return _ordered(rows)

    def get(self, incident_id: str) -> dict[str, Any]:
        row = self.store.get(incident_id)
        if row is None:
            raise LookupError(f"no incident {incident_id} (`tally incidents list` shows the ids)")
        return row

    # ================================================================ the work queue's cases

    def sweep(self) -> List[dict[str, Any]]:
        """Group the live cases by fingerprint, bring each incident up to date, return what changed."""
        now = self.clock()
        work = self._work() if callable(self._work) else self._work
        groups: dict[str, List[dict[str, Any]]] = defaultdict(list)
        for item in work.list():
            groups[incident_id(fingerprint(item))].append(item)
        known = {r["id"]: r for r in self.store.all()}
        changes: List[dict[str, Any]] = []
        for iid, items in groups.items():
            changes += self._observe(known.get(iid), iid, items, now)
        for iid, row in known.items():
            if iid in groups or row.get("state") not in LIVE or row.get("kind") == "alarm":
                continue
            changes += self._save_changes(_resolve(row, now, "cleared"), [RESOLVED])
        return changes

    def _observe(
        self, row: dict[str, Any] | None, iid: str, items: List[dict[str, Any]], now: float
    ) -> List[dict[str, Any]]:
        seen = sum(int(i.get("count") or 1) for i in items)
        fresh = row is None or row.get("state") not in LIVE
        if row is not None and fresh and seen <= int(row.get("resolved_count") or 0):
            return []  # resolved as quiet (or cleared and re-listed): nothing new since
        first = items[0]
        kind, channel, merchant, cause = fingerprint(first)
        base = {} if row is None or fresh else row
        since = min((str(i.get("since") or iso_now(now)) for i in items), default=iso_now(now))
        grew = seen > int(base.get("count") or 0)
        updated = {
            **(row or {}),
            "id": iid,
            "kind": kind,
            "channel": channel,
            "merchant": merchant,
            "cause": cause,
            "origin": origin_of(kind, cause),
            "what": first.get("what") or kind,
            "example": str(first.get("reason") or "")[:200],  # one case's own words, numbers and all
            "state": base.get("state") or "open",
            "first_seen": base.get("first_seen") or since,
            "last_seen": iso_now(now) if grew or not base.get("last_seen") else base["last_seen"],
            "count": seen,
            "amount_cent": sum(int(i.get("amount_cent") or 0) for i in items),
            "amount_known": any(i.get("amount_cent") is not None for i in items),
            "cases": [str(i["id"]) for i in items][:CASES_KEPT],
            "case_count": len(items),
        }
        samples = window(list(base.get("samples") or []), now)
        if fresh:
            # new (or back after resolving): what counts towards the rate is what arrived since it first showed
            offset = int(row.get("resolved_count") or 0) if row else 0
            start = min(_epoch(since, now), now)
            samples = [[int(start), offset]]
            updated.update(
                state="open",
                opened_at=iso_now(now),
                escalated_at=None,
                resolved_at=None,
                resolved_why=None,
                resolved_count=None,
                expires_at=None,
            )
        samples.append([int(now), seen])
        updated["samples"] = samples[-61:]
        updated["rate_per_h"] = rate_per_h(updated["samples"], now)
        happened = [OPENED] if fresh else []
        if updated["state"] == "open" and updated["rate_per_h"] >= self.escalate_per_h:
            updated.update(state="escalated", escalated_at=iso_now(now))
            happened.append(ESCALATED)
        elif not fresh and not grew and _age(updated["last_seen"], now) >= self.quiet_s:
            updated = _resolve(updated, now, "quiet")
            happened.append(RESOLVED)
        if not happened and _same(base, updated):
            return []  # nothing a person would see changed: no write (a steady incident costs a read a minute)
        return self._save_changes(updated, happened)

    # ================================================================ CloudWatch alarms (SNS)

    def alarm(self, message: dict[str, Any]) -> List[dict[str, Any]]:
        """One alarm state change (the SNS message CloudWatch publishes): ALARM / INSUFFICIENT_DATA opens the
        alarm's incident (a repeat counts), OK resolves it. Decided again when a sweep wrote the row meanwhile:
        an alarm's change is never dropped (a sweep's is decided again a minute later)."""
        for _ in range(3):
            try:
                return self._alarm(message)
            except StaleIncident:
                continue
        raise StaleIncident(str(message.get("AlarmName")))  # the invocation fails: SNS delivers it again

    def _alarm(self, message: dict[str, Any]) -> List[dict[str, Any]]:
        now = self.clock()
        name = str(message.get("AlarmName") or "unknown alarm")
        state = str(message.get("NewStateValue") or "ALARM")
        iid = "inc-alarm-" + _slug(_logical(name))
        row = self.store.get(iid)
        live = row is not None and row.get("state") in LIVE
        if state == "OK":
            return (
                self._save_changes(_resolve(row, now, "ok"), [RESOLVED], strict=True) if live and row else []
            )
        updated = {
            **(row or {}),
            "id": iid,
            "kind": "alarm",
            "channel": None,
            "merchant": None,
            "cause": name,
            "origin": "tenant" if any(t in name for t in TENANT_ALARMS) else "ours",
            "what": str(message.get("AlarmDescription") or name),
            "reason": str(message.get("NewStateReason") or "")[:500],
            "alarm_state": state,
            "last_seen": iso_now(now),
            "count": (int(row.get("count") or 0) if live and row else 0) + 1,
            "amount_cent": 0,
            "amount_known": False,
            "cases": [],
            "case_count": 0,
            "rate_per_h": 0,
            "context": ", ".join(  # the notifier adds the incidents live right now to the alarm's card
                f"{r['id']} ({r.get('count')}×)"
                for r in self.list(live_only=True)
                if r.get("kind") != "alarm"
            )[:300],
        }
        if live:
            return self._save_changes(updated, [], strict=True)
        updated.update(
            state="open",
            first_seen=iso_now(now),
            opened_at=iso_now(now),
            escalated_at=None,
            resolved_at=None,
            resolved_why=None,
            expires_at=None,
        )
        return self._save_changes(updated, [OPENED], strict=True)

    # ================================================================ writing

    def _save_changes(
        self, row: dict[str, Any], happened: List[str], *, strict: bool = False
    ) -> List[dict[str, Any]]:
        at = iso_now(self.clock())
        history = list(row.get("history") or []) + [
            {"at": at, "change": c, "count": row.get("count")} for c in happened
        ]
        row = {**row, "history": history[-HISTORY_KEPT:]}
        try:
            saved = self.store.save(row)
        except StaleIncident:
            if strict:
                raise
            logger.warning(
                "incident changed meanwhile: decided again on the next run", extra={"id": row["id"]}
            )
            return []
        for change in happened:
            count(
                {OPENED: M.INCIDENT_OPENED, ESCALATED: M.INCIDENT_ESCALATED, RESOLVED: M.INCIDENT_RESOLVED}[
                    change
                ]
            )
            logger.info("incident %s", change, extra={"incident": row["id"], "count": row.get("count")})
        return [{"change": c, "incident": saved} for c in happened]


# ==================================================================== pure helpers


def fingerprint(item: dict[str, Any]) -> tuple[str, str, str, str]:
    """(kind, channel, merchant, cause) of a work-queue item: the cause is its reason without the numbers
    that differ between cases (amounts, counts, order numbers)."""
    reason = str(item.get("reason") or item.get("kind") or "")
    if item.get("kind") == "rejected":
        reason = reason.split(": ", 1)[-1]  # "23 notification(s) refused (20 kept): <cause>"
    if item.get("kind") == "alert-delivery":
        reason = reason.split(" are not delivered")[0]  # one incident per destination, whatever the card
    cause = re.sub(r"\s+", " ", re.sub(r"[0-9][0-9.,:]*", "N", reason)).strip()[:80]
    return (str(item.get("kind")), str(item.get("channel") or "-"), str(item.get("merchant") or "-"), cause)


def incident_id(fp: tuple[str, str, str, str]) -> str:
    """Readable and stable: `inc-<kind>-<merchant>-<6 hex of the whole fingerprint>`."""
    kind, _, merchant, _ = fp
    digest = hashlib.sha256("\x1f".join(fp).encode()).hexdigest()[:6]
    return f"inc-{_slug(kind)}-{_slug(merchant)}-{digest}"


def origin_of(kind: str, cause: str) -> str:
    if kind in OURS_KINDS:
        return "ours"
    if kind in TENANT_KINDS or _TENANT_CAUSE.search(cause):
        return "tenant"
    return "money"


def rate_per_h(samples: List[List[int]], now: float) -> int:
    """Failures in the last hour, from (time, count) samples (one is written whenever the count changes): the
    count now minus the count at the hour's start (the last sample before it), or, for an incident younger than
    an hour, minus its first sample, over at least an hour (ten minutes old with 200 failures: 200 an hour)."""
    if not samples:
        return 0
    before = [s for s in samples if now - int(s[0]) > HOUR_S]
    base = before[-1] if before else samples[0]
    span = float(HOUR_S) if before else max(float(now) - int(base[0]), float(HOUR_S))
    return int(max(0, int(samples[-1][1]) - int(base[1])) * HOUR_S // span)


def window(samples: List[List[int]], now: float) -> List[List[int]]:
    """The samples the rate needs: those of the last hour and the last one before it."""
    before = [s for s in samples if now - int(s[0]) > HOUR_S]
    return before[-1:] + [s for s in samples if now - int(s[0]) <= HOUR_S]


def _same(before: dict[str, Any], after: dict[str, Any]) -> bool:
    shown = ("count", "amount_cent", "rate_per_h", "cases", "case_count", "state", "example")
    return all(before.get(k) == after.get(k) for k in shown)


def _resolve(row: dict[str, Any], now: float, why: str) -> dict[str, Any]:
    return {
        **row,
        "state": "resolved",
        "resolved_at": iso_now(now),
        "resolved_why": why,
        "resolved_count": int(row.get("count") or 0) if why == "quiet" else 0,
        "expires_at": int(now) + KEEP_S,  # the TTL starts when it is closed
    }


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Escalated, then open (fastest first); then resolved, the latest first."""
    live = sorted(
        (r for r in rows if r.get("state") in LIVE),
        key=lambda r: (r.get("state") != "escalated", -int(r.get("rate_per_h") or 0), str(r["id"])),
    )
    done = sorted(
        (r for r in rows if r.get("state") not in LIVE),
        key=lambda r: str(r.get("resolved_at") or ""),
        reverse=True,
    )
    return live + done


def _epoch(iso: str, default: float) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def _age(iso: Any, now: float) -> float:
    return now - _epoch(str(iso or ""), now)


def _logical(alarm_name: str) -> str:
    """`tally-NotifyRejectedAlarm-1AB2C3` → `NotifyRejectedAlarm` (CloudFormation's generated names)."""
    parts = alarm_name.split("-")
    named = [p for p in parts if p.endswith("Alarm")]
    return named[0] if named else alarm_name
