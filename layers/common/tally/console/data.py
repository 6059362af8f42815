"""What the pages show, read from the services the CLI uses (one way to do each thing).

Every value a person reads is prepared here: amounts in yuan (format_cents), times in Asia/Shanghai,
ages in words. Pages never see a secret: merchant rows are reduced to public fields, callback bodies and
headers are shown as the text they are (escaped by the templates), secrets and ciphertext never leave.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from tally import bootstrap
from tally.channels import registry as channel_registry
from tally.domain.clock import CHINA
from tally.domain.money import format_cents

BUCKETS = ("< 1 h", "1–24 h", "1–7 d", "> 7 d")
# attribute names never shown (secrets live in Secrets Manager; this is the second fence)
SECRET_WORDS = (
    "secret",
    "private",
    "password",
    "apiv3",
    "api_key",
    "merchant_key",
    "auth_token",
    "ciphertext",
)


def yuan(cents: Any) -> str:
    if cents is None or cents == "":
        return ""
    return format_cents(int(cents))


def cst(iso: Any) -> str:
    """An ISO UTC time as people in China read it: 2026-12-01 17:05:09 (Asia/Shanghai)."""
    parsed = parse_iso(iso)
    return parsed.astimezone(CHINA).strftime("%Y-%m-%d %H:%M:%S") if parsed else ""


def parse_iso(iso: Any) -> datetime | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age_seconds(iso: Any, now: float) -> int:
    parsed = parse_iso(iso)
    return max(0, int(now - parsed.timestamp())) if parsed else 0


def age_words(seconds: int) -> str:
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def bucket(seconds: int) -> str:
    if seconds < 3600:
        return BUCKETS[0]
    if seconds < 86400:
        return BUCKETS[1]
    if seconds < 7 * 86400:
        return BUCKETS[2]
    return BUCKETS[3]


def today_cst(now: float) -> date:
    return datetime.fromtimestamp(now, CHINA).date()


def yesterday_cst(now: float | None = None) -> str:
    return (today_cst(time.time() if now is None else now) - timedelta(days=1)).isoformat()


@dataclass
class Item:
    """One thing a person must look at: a work-queue item (service/queue.py), or a raw row not applied yet."""

    id: str
    kind: str
    channel: str
    mchid: str
    order: str
    amount_cent: int | None
    since: str
    why: str
    state: str = "OPEN"
    owner: str = ""
    actions: tuple[str, ...] = ()
    stuck: bool = False  # a raw row not applied for 10 minutes: the sweeper's, not a person's (no action)
    what: str = ""
    count: int = 1
    age_s: int = 0

    @property
    def amount(self) -> str:
        return yuan(self.amount_cent)

    @property
    def age(self) -> str:
        return age_words(self.age_s)

    @property
    def bucket(self) -> str:
        return bucket(self.age_s)

    @property
    def since_cst(self) -> str:
        return cst(self.since)

    @property
    def kind_label(self) -> str:
        return self.kind.replace("-", " ")


def _from_queue(row: dict[str, Any]) -> Item:
    return Item(
        id=str(row["id"]),
        kind=str(row.get("kind") or ""),
        channel=str(row.get("channel") or ""),
        mchid=str(row.get("merchant") or ""),
        order=str(row.get("order") or ""),
        amount_cent=row.get("amount_cent"),
        since=str(row.get("since") or ""),
        why=str(row.get("reason") or ""),
        state=str(row.get("state") or "OPEN"),
        owner=str(row.get("owner") or ""),
        actions=tuple(row.get("actions") or ()),
        what=str(row.get("what") or ""),
        count=int(row.get("count") or 1),
        age_s=int(row.get("age_s") or 0),
    )


# ------------------------------------------------------------------------------------------- the queue


def queue_items(now: float | None = None) -> list[Item]:
    """Every open work-queue item (the same list `tally manual list` prints and the poller counts, R41)."""
    return [_from_queue(row) for row in bootstrap.work_queue().list()]


def stuck_rows(now: float | None = None) -> list[Item]:
    """Raw rows not applied 10 minutes after they arrived (the sweeper re-queues them; the morning counts them)."""
    now = time.time() if now is None else now
    report = bootstrap.pending_report().report(limit=200)
    return [
        Item(
            id=str(line["key"]),
            kind="not applied yet",
            channel=str(line.get("channel") or ""),
            mchid=str(line.get("merchant") or ""),
            order=str(line.get("order") or ""),
            amount_cent=None,
            since="",
            why=str(line.get("why") or ""),
            stuck=True,
            age_s=int(line.get("age_s") or 0),
        )
        for line in report["rows"]
        if line.get("kind") == "stuck-notification" or str(line.get("kind", "")).startswith("raw handled=0")
    ]


AGE_FILTERS = {  # the page's age buckets as the queue's filter (seconds)
    BUCKETS[0]: {"age_lt": 3600},
    BUCKETS[1]: {"age_gt": 3599, "age_lt": 86400},
    BUCKETS[2]: {"age_gt": 86399, "age_lt": 7 * 86400},
    BUCKETS[3]: {"age_gt": 7 * 86400 - 1},
}


def queue_filter(**wanted: str) -> dict[str, Any]:
    """The page's filter fields as the queue service's filter (kind, merchant, age bucket, state, owner)."""
    out: dict[str, Any] = {
        k: v for k, v in wanted.items() if v and k in ("kind", "merchant", "state", "owner")
    }
    out.update(AGE_FILTERS.get(wanted.get("age") or "", {}))
    return out


def filtered_items(**wanted: str) -> list[Item]:
    return [_from_queue(row) for row in bootstrap.work_queue().list(queue_filter(**wanted))]


def filter_items(items: list[Item], **wanted: str) -> list[Item]:
    """The same filter on items already read (the morning page's links)."""
    out = items
    if wanted.get("kind"):
        out = [i for i in out if i.kind == wanted["kind"] or i.kind.startswith(wanted["kind"])]
    if wanted.get("merchant"):
        out = [i for i in out if i.mchid == wanted["merchant"]]
    if wanted.get("age"):
        out = [i for i in out if i.bucket == wanted["age"]]
    if wanted.get("state"):
        out = [i for i in out if i.state == wanted["state"].upper()]
    if wanted.get("owner"):
        out = [i for i in out if i.owner == wanted["owner"]]
    return out


def morning(now: float | None = None) -> dict[str, Any]:
    """The morning page: the three numbers, the queue by kind and age, yesterday's recon, 14 days."""
    now = time.time() if now is None else now
    items = queue_items(now)
    stuck = stuck_rows(now)
    diffs = [i for i in items if i.kind == "recon-diff"]
    person = [i for i in items if i.kind != "recon-diff"]
    kinds: dict[str, Counter[str]] = {}
    for item in items:
        kinds.setdefault(item.kind, Counter())[item.bucket] += 1
    oldest = sorted(items, key=lambda i: -i.age_s)
    return {
        "numbers": {"stuck": len(stuck), "with a person": len(person), "open diffs": len(diffs)},
        "total": len(stuck) + len(items),
        "by_kind": [
            {"kind": kind, "buckets": [counter.get(b, 0) for b in BUCKETS], "total": sum(counter.values())}
            for kind, counter in sorted(kinds.items())
        ],
        "first_stuck": oldest[0] if oldest else None,
        "stuck": stuck,
        "recon": recon_yesterday(now),
        "days": fourteen_days(now, items),
    }


# ------------------------------------------------------------------------------------------- recon


def recon_store() -> Any:
    return bootstrap.recon_service().store


def merchants_configured() -> list[tuple[str, str]]:
    from tally.store.tables import MerchantStore

    return MerchantStore(bootstrap.tables()).configured()


def recon_channel(channel: str) -> str:
    """A merchants row's channel → the stored channel its bill reconciles under (WeChat Pay v2 merchants:
    wechatpay, one transaction space; channels/registry.py)."""
    found = channel_registry.by_merchant_kind(channel)
    return found.stored if found else channel


def recon_yesterday(now: float) -> list[dict[str, Any]]:
    day = (today_cst(now) - timedelta(days=1)).isoformat()
    rows = []
    for channel, mchid in merchants_configured():
        channel = recon_channel(channel)
        runs = recon_store().run_rows(_recon_pk(channel, mchid, day))
        latest = runs[0] if runs else None
        rows.append(
            {
                "channel": channel,
                "mchid": mchid,
                "date": day,
                "status": (latest or {}).get("status") or "no run yet",
                "reason": (latest or {}).get("reason") or "",
                "open_diffs": (latest or {}).get("open_diffs", 0),
            }
        )
    return rows


def _recon_pk(channel: str, mchid: str, day: str) -> str:
    from tally.store.recon import recon_pk

    return recon_pk(channel, mchid, day)


def recon_day(channel: str, mchid: str, day: str) -> dict[str, Any]:
    view = bootstrap.recon_service().show(channel, mchid, day)
    runs = [
        {
            "run_id": r.get("run_id"),
            "pass": r.get("pass"),
            "status": r.get("status"),
            "guard": r.get("guard") or r.get("block_code") or "",
            "reason": r.get("reason") or "",
            "started": cst(r.get("started_at")),
            "finished": cst(r.get("finished_at")),
            "rows": (r.get("totals") or {}).get("rows"),
            "payments": yuan((r.get("totals") or {}).get("payment_cent")),
            "refunds": yuan((r.get("totals") or {}).get("refund_cent")),
            "matched": (r.get("stats") or {}).get("matched"),
            "report": bool(r.get("report_key")),
        }
        for r in view["runs"]
    ]
    diffs = [
        {
            "sk": d["sk"],
            "cls": d.get("cls"),
            "item": d.get("item"),
            "key": d.get("key"),
            "channel_amount": yuan(d.get("channel_amount_cent")),
            "local_amount": yuan(d.get("local_amount_cent")),
            "status": d.get("handle_status"),
            "handler": d.get("handler") or "",
            "detail": d.get("detail") or "",
            "id": f"diff-{d['pk']}/{d['sk']}",  # the work queue's id (service/queue.py)
        }
        for d in view["diffs"]
    ]
    return {"runs": runs, "diffs": diffs, "confirmation": view.get("confirmation")}


def recon_report(channel: str, mchid: str, day: str) -> tuple[str, bytes] | None:
    """(file name, CSV bytes) of the latest finished run's report, read from S3 through the archive."""
    service = bootstrap.recon_service()
    runs = service.store.run_rows(_recon_pk(channel, mchid, day))
    key = next((r["report_key"] for r in runs if r.get("report_key")), None)
    if key is None:
        return None
    body, _ = service.archive.read(key)
    return key.rsplit("/", 1)[-1], body


# ------------------------------------------------------------------------------------------- ledger days


def ledger_day(day: str, mchid: str = "") -> dict[str, Any]:
    """The finance view (service/ledger_day.py): per merchant and channel, payments, refunds, fees, net."""
    return bootstrap.ledger_day_service().day(day, mchid or None)


def ledger_csv(view: dict[str, Any]) -> bytes:
    from tally.service.ledger_day import csv_text

    text = csv_text(view)
    return (text if text.startswith("\ufeff") else "\ufeff" + text).encode("utf-8")


def fourteen_days(now: float, items: list[Item]) -> list[dict[str, Any]]:
    """Payments and refunds booked (count, yuan) per day, and queue items opened and cleared per day, oldest
    first. Opened = the open items that arrived that day + the closed ones that had (the queue's day counter
    rows, service/queue.py count_cleared); cleared = items closed that day through the queue."""
    today = today_cst(now)
    live = Counter(
        when.astimezone(CHINA).date().isoformat() for when in map(parse_iso, (i.since for i in items)) if when
    )
    dates = [(today - timedelta(days=back)).isoformat() for back in range(13, -1, -1)]
    counted = bootstrap.work_queue().store.day_counts(dates)
    days = []
    for day in dates:
        totals = ledger_day(day)["totals"]
        days.append(
            {
                "date": day,
                "payments": int(totals.get("payments") or 0),
                "payment_cent": int(totals.get("payment_cent") or 0),
                "refunds": int(totals.get("refunds") or 0),
                "opened": live.get(day, 0) + counted[day]["born_closed"],
                "still_open": live.get(day, 0),
                "cleared": counted[day]["cleared"],
            }
        )
    return days


# ------------------------------------------------------------------------------------------- merchants


def merchants(now: float | None = None) -> list[dict[str, Any]]:
    """Configured channels, modes, certificate expiry (`tally merchant list`'s own reader: no secret
    returned), and per merchant the last callback seen and the last one refused.

    Last seen: one Query of notify_raw's `by_merchant` index per merchant id (newest first, Limit 1); the notify
    path writes nothing for it (the index is keyed on attributes every raw row has). Last refused: the newest
    kept rejected row per merchant, from one read of the work queue's `manual` index (kind rejected)."""
    from tally.service.merchants import list_merchants

    now = time.time() if now is None else now
    store = bootstrap.work_queue().store
    refused: dict[str, str] = {}
    for row in store.kept_notifications("rejected"):
        mchid, at = str(row.get("mchid") or ""), str(row.get("created_at") or "")
        if at > refused.get(mchid, ""):
            refused[mchid] = at
    seen: dict[str, dict[str, Any] | None] = {}
    rows = list_merchants(bootstrap.merchants())
    for m in rows:
        mchid = str(m["id"])
        if mchid not in seen:
            seen[mchid] = store.last_callback(mchid)
        last = seen[mchid]
        m["last_seen"] = (
            {
                "at": cst(last.get("notified_at")),
                "age": age_words(age_seconds(last.get("notified_at"), now)),
                "channel": str(last["pk"]).partition("#")[0],
                "source": str(last.get("source") or "notify"),
            }
            if last
            else None
        )
        m["last_refused"] = (
            {"at": cst(refused[mchid]), "age": age_words(age_seconds(refused[mchid], now))}
            if mchid in refused
            else None
        )
    return rows


def _secretish(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


# ------------------------------------------------------------------------------------------- refunds


def refunds() -> dict[str, list[dict[str, Any]]]:
    service = bootstrap.refund_service()
    return {
        "manual": [_refund(r) for r in service.manual(200)],
        "due": [_refund(r) for r in service.due(200)],
    }


def _refund(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "refund_no": row.get("refund_no"),
        "channel": row.get("channel"),
        "mchid": row.get("mchid"),
        "order": row.get("out_trade_no"),
        "amount": yuan(row.get("amount_cent")),
        "status": row.get("status"),
        "why": row.get("manual_reason") or "",
        "created": cst(row.get("created_at")),
    }


# ------------------------------------------------------------------------------------------- one item


def item_detail(item_id: str) -> tuple[Item | None, dict[str, Any], list[dict[str, Any]]]:
    """(the item if still open, its source row(s) without secrets, its history) from the work queue."""
    got = bootstrap.work_queue().get(item_id)
    item = _from_queue(got) if got.get("kind") else None
    source = got.get("source")
    rows = source if isinstance(source, list) else [source]
    return item, _scrub(rows[0] or {}) if rows else {}, list(got.get("history") or [])


def _scrub(row: dict[str, Any]) -> dict[str, Any]:
    """No secret-named attribute; a body with its ciphertext replaced by its length (R: never shown)."""
    out = {k: v for k, v in row.items() if not _secretish(k)}
    if isinstance(out.get("body"), str):
        out["body"] = redact_body(out["body"])
    return out


def redact_body(text: str) -> str:
    """A callback body as received, minus what is encrypted for the merchant: any JSON `ciphertext` (WeChat v3
    `resource.ciphertext`, any depth) and what a channel's `redact_body` hides in a body that is not JSON
    (WeChat v2 `<req_info>`) become "‹ciphertext, N characters, not shown›"."""
    try:
        document = json.loads(text)
    except ValueError:
        for channel in channel_registry.all_channels():
            text = channel.redact_body(text, _hidden)
        return text
    if not isinstance(document, dict | list):
        return text
    return json.dumps(_redact(document), ensure_ascii=False)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _hidden(str(v)) if k.lower() == "ciphertext" else _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _hidden(text: str) -> str:
    return f"‹ciphertext, {len(text)} characters, not shown›"


def order_story(mchid: str, out_trade_no: str) -> dict[str, Any] | None:
    """The order's timeline (service/story.py, read-only R42), with each delivery's raw body and headers."""
    from tally.service.story import NotFound

    try:
        story = bootstrap.story_service().story(mchid, out_trade_no, raw=True)
    except NotFound:
        return None
    for entry in story.get("entries", []):
        entry["detail"] = _scrub(entry.get("detail") or {})
    return story


def webhooks(mchid: str = "") -> list[dict[str, Any]]:
    """The merchants' webhook endpoints, each with its latest attempts (docs/webhooks.md); read-only (R42)."""
    endpoints = bootstrap.webhook_endpoints()
    log = bootstrap.webhook_log()
    return [
        {
            **e,
            "created": cst(e.get("created_at")),
            "status_at": cst(e.get("status_at")),
            "attempts": [{**a, "at": cst(a.get("at"))} for a in log.endpoint(str(e["endpoint_id"]), 20)],
        }
        for e in endpoints.list(mchid or None)
    ]
