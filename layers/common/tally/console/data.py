"""What the pages show, read from the services the CLI uses (one way to do each thing).

Every value a person reads is prepared here: amounts as ¥1,234.56 (i18n/words.py), times in Asia/Shanghai,
ages in words. Pages never see a secret: merchant rows are reduced to public fields, callback bodies and
headers are shown as the text they are (escaped by the templates), secrets and ciphertext never leave.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from tally import bootstrap
from tally.channels import registry as channel_registry
from tally.domain.clock import CHINA
from tally.i18n.words import money
from tally.service.shown import scrub as shown_scrub

BUCKETS = ("< 1 h", "1–24 h", "1–7 d", "> 7 d")


def yuan(cents: Any) -> str:
    """An amount as the console writes every amount: ¥1,234.56 (one format on every page, i18n/words.py)."""
    return money(cents)


def cst(iso: Any) -> str:
    """An ISO UTC time as people in China read it: 2026-12-01 17:05:09 (Asia/Shanghai)."""
    parsed = parse_iso(iso)
    try:
        return parsed.astimezone(CHINA).strftime("%Y-%m-%d %H:%M:%S") if parsed else ""
    except OverflowError:  # the end of time (an open range's "until"): the page shows the stored text
        return ""


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
    codes: dict[str, list[str]] = field(default_factory=dict)  # what each closing action accepts
    parts: list[dict[str, Any]] = field(default_factory=list)  # a case's parts (R48), each with its state
    cls: str = ""
    bill_date: str = ""

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
    def kinds(self) -> list[str]:
        """The item's kind, and a case's every part's (R48)."""
        return [self.kind, *(str(p.get("kind")) for p in self.parts)]

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
        codes={k: list(v) for k, v in (row.get("codes") or {}).items()},
        parts=[
            {k: p.get(k) for k in ("id", "kind", "state", "amount", "reason", "actions", "linked")}
            for p in row.get("parts") or []
        ],
        cls=str(row.get("cls") or ""),
        bill_date=str(row.get("bill_date") or ""),
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
        k: v
        for k, v in wanted.items()
        if v and k in ("kind", "merchant", "state", "owner", "cls", "bill_date")
    }
    out.update(AGE_FILTERS.get(wanted.get("age") or "", {}))
    return out


def filtered_items(**wanted: str) -> list[Item]:
    return [_from_queue(row) for row in bootstrap.work_queue().list(queue_filter(**wanted))]


def filter_items(items: list[Item], **wanted: str) -> list[Item]:
    """The same filter on items already read (the morning page's links)."""
    out = items
    if wanted.get("kind"):
        out = [i for i in out if any(k.startswith(wanted["kind"]) for k in i.kinds)]
    if wanted.get("merchant"):
        out = [i for i in out if i.mchid == wanted["merchant"]]
    if wanted.get("age"):
        out = [i for i in out if i.bucket == wanted["age"]]
    if wanted.get("state"):
        out = [i for i in out if i.state == wanted["state"].upper()]
    if wanted.get("owner"):
        out = [i for i in out if i.owner == wanted["owner"]]
    if wanted.get("cls"):
        out = [i for i in out if i.cls == wanted["cls"]]
    if wanted.get("bill_date"):
        out = [i for i in out if i.bill_date == wanted["bill_date"]]
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


def merchant_names() -> dict[str, str]:
    """Merchant id -> display name (`tally merchant add/set --name`): read once per page (one small scan)."""
    from tally.store.tables import MerchantStore

    return MerchantStore(bootstrap.tables()).names()


def merchant_name(mchid: Any) -> str:
    """The merchant as a person knows it: its display name, else its id."""
    return merchant_names().get(str(mchid or ""), "") or str(mchid or "")


def recon_store() -> Any:
    return bootstrap.recon_service().store


def synthetic() -> tuple[str, ...]:
    """The synthetic merchants (the heartbeat's): left out of finance totals, recon lists and merchant pages
    by default (R54); shown only where their health is the point."""
    return (bootstrap.settings().heartbeat_mchid,)


def merchants_configured(with_synthetic: bool = False) -> list[tuple[str, str]]:
    from tally.store.tables import MerchantStore

    rows = MerchantStore(bootstrap.tables()).configured()
    return rows if with_synthetic else [(c, m) for c, m in rows if m not in synthetic()]


def recon_channel(channel: str) -> str:
    """A merchants row's channel → the stored channel its bill reconciles under (WeChat Pay v2 merchants:
    wechatpay, one transaction space; channels/registry.py)."""
    found = channel_registry.by_merchant_kind(channel)
    return found.stored if found else channel


def recon_yesterday(now: float) -> list[dict[str, Any]]:
    """Yesterday per configured merchant (synthetic ones left out, R54): the day's state as its differences
    stand now (R49: all worked reads DONE), open and worked counted apart, and where its money is."""
    day = (today_cst(now) - timedelta(days=1)).isoformat()
    found = {(d.channel, d.mchid): (d, run, diffs) for d, run, _, diffs in day_figures(day)}
    rows = []
    for channel, mchid in dict.fromkeys((recon_channel(c), m) for c, m in merchants_configured()):
        figures, run, diffs = found.get((channel, mchid), (None, None, []))
        rows.append(_day_row(channel, mchid, day, figures, run, diffs))
    return rows


def day_figures(day: str, mchid: str = "") -> list[Any]:
    """The merchant-days of `day` (domain/merchant_day through service/ledger_day, R49)."""
    return bootstrap.ledger_day_service().merchant_days(day, mchid or None)


def _day_row(
    channel: str, mchid: str, day: str, figures: Any, run: dict[str, Any] | None, diffs: list[dict[str, Any]]
) -> dict[str, Any]:
    from tally.domain.merchant_day import count_diffs, day_state

    counted = count_diffs(diffs)
    state, words = day_state((run or {}).get("status"), counted)
    return {
        "channel": channel,
        "mchid": mchid,
        "date": day,
        "status": state,
        "words": words or state,
        "reason": (run or {}).get("reason") or "",
        "open_diffs": counted.open,
        "worked_diffs": counted.worked,
        "expected_diffs": counted.expected,
        "money": figures.landing_words() if figures is not None else "nothing booked",
        "landing": figures.landing if figures is not None else "",
        "figures": figures.as_dict() if figures is not None else None,  # the page words it (i18n/words.py)
    }


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
    figures = next((f for f, _, _, _ in day_figures(day, mchid) if f.channel == channel), None)
    trade = next((r for r in view["runs"] if r.get("leg") != "fundflow"), None)
    summary = _day_row(channel, mchid, day, figures, trade, view["diffs"])
    latest = view["runs"][0] if view["runs"] else {}
    layout = None
    if latest.get("layout_diff"):  # a quarantined bill: what changed, and one row of it (docs/recon.md)
        layout = {
            "lines": latest["layout_diff"].get("lines", []),
            "sample": [f"{k}={v}" for k, v in (latest.get("layout_sample") or {}).items()],
        }
    return {
        "runs": runs,
        "diffs": diffs,
        "confirmation": view.get("confirmation"),
        "day": summary,
        "layout": layout,
    }


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


def statement_csv(day: str, mchid: str = "") -> bytes:
    """The daily statement of `day` (the rows `tally ledger day --statement` prints), UTF-8 with BOM."""
    from tally.domain.statement import statement_csv as render

    return render(bootstrap.ledger_day_service().statement(day, mchid or None)).encode("utf-8")


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
        totals = bootstrap.ledger_day_service().day(day, recon=False)["totals"]  # booked figures only
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
    rows = [m for m in list_merchants(bootstrap.merchants()) if str(m["id"]) not in synthetic()]  # R54
    for m in rows:
        mchid = str(m["id"])
        if mchid not in seen:
            seen[mchid] = store.last_callback(mchid)
        last = seen[mchid]
        m["last_seen"] = (
            {
                "at": cst(last.get("notified_at")),
                "age": age_words(age_seconds(last.get("notified_at"), now)),
                "age_s": age_seconds(last.get("notified_at"), now),
                "channel": str(last["pk"]).partition("#")[0],
                "source": str(last.get("source") or "notify"),
            }
            if last
            else None
        )
        for cert in m.get("certificates") or []:
            if isinstance(cert, dict) and cert.get("not_after"):
                cert["not_after"] = cst(cert["not_after"]) or cert["not_after"]
        m["last_refused"] = (
            {
                "at": cst(refused[mchid]),
                "age": age_words(age_seconds(refused[mchid], now)),
                "age_s": age_seconds(refused[mchid], now),
            }
            if mchid in refused
            else None
        )
    return rows


# ------------------------------------------------------------------------------------------- refunds


def refunds(state: str = "", merchant: str = "", day: str = "") -> dict[str, Any]:
    """The Refunds page: every refund that changed on `day` in any state (FAIL and closed ones too: GSI
    by_updated, never a Scan), those with a person and those waiting for the channel (now), and those booked on
    `day` (the ledger's REFUND entries of that bill date, per merchant: index Queries), each list narrowed to
    a state and a merchant when asked."""
    service = bootstrap.refund_service()
    day = day or yesterday_cst()
    ledger = bootstrap.story_service().ledger
    booked = [
        {**_refund(e), "status": "SUCCESS", "created": cst(e.get("booked_at"))}
        for channel, mchid in merchants_configured()
        if not merchant or mchid == merchant
        for e in ledger.day(recon_channel(channel), mchid, day)
        if e.get("kind") == "REFUND"
    ]
    lists = {
        "changed": [
            {**_refund(r), "created": cst(r.get("updated_at"))}
            for r in service.of_day(day, merchant=merchant)
        ],
        "manual": [_refund(r) for r in service.manual(200)],
        "due": [_refund(r) for r in service.due(200)],
        "booked": booked,
    }
    return {
        name: [
            r
            for r in rows
            if (not state or r["status"] == state) and (not merchant or r["mchid"] == merchant)
        ]
        for name, rows in lists.items()
    } | {"day": day, "merchants": sorted({m for _, m in merchants_configured()})}


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
    """What a person may see of a stored row (service/shown.py), its stored times (…_at, UTC) in Asia/Shanghai
    as the page's footer says."""
    return {k: (cst(v) or v) if k.endswith("_at") else v for k, v in shown_scrub(row).items()}


def order_story(mchid: str, out_trade_no: str) -> dict[str, Any] | None:
    """The order's timeline (service/story.py, read-only R42), with each delivery's raw body and headers."""
    from tally.service.story import NotFound

    try:
        story = bootstrap.story_service().story(mchid, out_trade_no, raw=True)
    except NotFound:
        return None
    for entry in story.get("entries", []):
        entry["detail"] = _scrub(entry.get("detail") or {})
        entry["at"] = cst(entry.get("at")) or entry.get("at")  # the page is footed "Times are Asia/Shanghai"
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


# ------------------------------------------------------------------------------------------- the books


def _books() -> Any:
    from tally.service.books import BooksService

    return BooksService(bootstrap.audit_service())


def _first_finding(reason: str) -> str:
    """An audit-mismatch case's reason ("N finding(s) in D; first: <finding>") → the first finding's text."""
    return reason.split("; first: ", 1)[-1]


def _audit_cases() -> dict[tuple[str, str], Item]:
    """The open audit-mismatch cases by (day, merchant): each is kept as `audit#<merchant>#<day>`
    (service/audit.py check_day), the end of its id."""
    found = {}
    for item in filtered_items(kind="audit-mismatch"):
        _, mchid, day = ("##" + item.id).rsplit("#", 2)
        found[(day, mchid or item.mchid)] = item
    return found


def books(merchant: str = "", day: str = "") -> dict[str, Any]:
    """The last 14 days' seals per merchant (service/books.py) with what the daily check last found: a day it
    found not matching is an open audit-mismatch case (service/audit.py check_day); a pass is not recorded, so
    a day without a case says so and its day page verifies it now."""
    from tally.service.books import finding_code

    cases = _audit_cases()
    rows = []
    for row in _books().days(merchant=merchant or None, day=day or None):
        case = cases.get((row["day"], row["merchant"]))
        first = _first_finding(case.why) if case else ""
        rows.append(
            {
                **row,
                "sealed": bool(row["sealed_at"]),
                "sealed_cst": cst(row["sealed_at"]),
                "case_id": case.id if case else "",
                "finding": first,
                "finding_code": finding_code(first) if case else "",
            }
        )
    return {"rows": rows, "merchants": sorted({r["merchant"] for r in rows if r["merchant"]})}


def books_day(day: str, merchant: str) -> dict[str, Any]:
    """One merchant-day: its seal as locked and a verify run now (the auditor's export and offline check)."""
    service = _books()
    check = service.check(day, merchant)
    seal = service.seal(day, merchant)
    payload = (seal or {}).get("payload") or {}
    case = _audit_cases().get((day, merchant))
    return {
        "day": day,
        "merchant": merchant,
        "records": check.records,
        "sealed": check.sealed,
        "sealed_cst": cst(payload.get("sealed_at")),
        "sealed_records": payload.get("records"),
        "evidence": len((seal or {}).get("evidence") or []),
        "seal_detail": " · ".join(
            f"{k} {payload[k]}"
            for k in ("merkle_root", "evidence_digest", "key_id", "sealed_at")
            if payload.get(k)
        ),
        "ok": check.ok,
        "findings": check.findings,
        "first_code": check.first_code,
        "is_open": day >= service.recent_days(1)[0],
        "case_id": case.id if case else "",
    }


def books_zip(day: str, merchant: str = "") -> tuple[str, bytes] | None:
    """(file name, zip) of the day's export, or None when it is too large for a download here."""
    from tally.service.books import TooLarge

    try:
        result: tuple[str, bytes] = _books().export_zip(day, merchant or None)
        return result
    except TooLarge:
        return None
