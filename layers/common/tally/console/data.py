"""What the pages show, read from the services the CLI uses (one way to do each thing).

Every value a person reads is prepared here: amounts in yuan (format_cents), times in Asia/Shanghai,
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
from tally.domain.money import format_cents
from tally.domain.recon import CHINA

BUCKETS = ("< 1 h", "1–24 h", "1–7 d", "> 7 d")
SECRET_WORDS = ("key", "secret", "token", "ciphertext", "password", "private", "apiv3", "sign")


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
    """One thing a person must look at, whatever table it lives in."""

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
    stuck: bool = False  # counts in "stuck" (not applied yet) rather than "with a person"
    now: float = field(default_factory=time.time, repr=False)

    @property
    def amount(self) -> str:
        return yuan(self.amount_cent)

    @property
    def age_s(self) -> int:
        return age_seconds(self.since, self.now)

    @property
    def age(self) -> str:
        return age_words(self.age_s)

    @property
    def bucket(self) -> str:
        return bucket(self.age_s)

    @property
    def since_cst(self) -> str:
        return cst(self.since)


# ------------------------------------------------------------------------------------------- the queue


def queue_items(now: float | None = None) -> list[Item]:
    """Every open item: the manual queue (unbooked payments, quarantined/rejected callbacks), raw rows not
    applied for 10 minutes, orders the poller handed to a person, refunds with a person, open recon diffs."""
    now = time.time() if now is None else now
    items: list[Item] = []
    for row in bootstrap.manual_queue().list():
        items.append(
            Item(
                id=row["id"],
                kind=str(row.get("kind") or "manual"),
                channel=str(row.get("channel") or ""),
                mchid=str(row.get("mchid") or ""),
                order=str(row.get("order") or ""),
                amount_cent=row.get("amount_cent"),
                since=str(row.get("since") or ""),
                why=str(row.get("why") or ""),
                actions=("resolve", "replay"),
                now=now,
            )
        )
    report = bootstrap.pending_report().report(limit=200)
    for line in report["rows"]:
        if line["kind"] == "raw handled=0":
            items.append(
                Item(
                    id=f"raw:{line['key']}",
                    kind="not applied yet",
                    channel=str(line.get("channel") or ""),
                    mchid=str(line.get("merchant") or ""),
                    order=str(line.get("order") or ""),
                    amount_cent=None,
                    since=_iso_ago(now, line["age_s"]),
                    why=str(line.get("why") or ""),
                    stuck=True,
                    now=now,
                )
            )
        elif line["kind"] == "order with a person":
            items.append(
                Item(
                    id=f"order:{line['key']}",
                    kind="order with a person",
                    channel=str(line.get("channel") or ""),
                    mchid=str(line.get("merchant") or ""),
                    order=str(line.get("order") or ""),
                    amount_cent=None,
                    since=_iso_ago(now, line["age_s"]),
                    why=str(line.get("why") or ""),
                    now=now,
                )
            )
    for refund in bootstrap.refund_service().manual(200):
        items.append(
            Item(
                id=f"refund:{refund.get('refund_no')}",
                kind="refund with a person",
                channel=str(refund.get("channel") or ""),
                mchid=str(refund.get("mchid") or ""),
                order=str(refund.get("out_trade_no") or ""),
                amount_cent=refund.get("amount_cent"),
                since=str(
                    refund.get("manual_at") or refund.get("updated_at") or refund.get("created_at") or ""
                ),
                why=str(refund.get("manual_reason") or refund.get("status") or ""),
                now=now,
            )
        )
    for diff in recon_store().open_diffs(200):
        items.append(
            Item(
                id=f"diff:{diff['pk']}|{diff['sk']}",
                kind="recon difference",
                channel=str(diff.get("channel") or ""),
                mchid=str(diff.get("mchid") or ""),
                order=str(diff.get("out_trade_no") or diff.get("refund_no") or ""),
                amount_cent=diff.get("channel_amount_cent", diff.get("local_amount_cent")),
                since=str(diff.get("opened_at") or ""),
                why=f"{diff.get('cls')}: {diff.get('detail') or ''}",
                actions=("resolve", "ignore"),
                now=now,
            )
        )
    return sorted(items, key=lambda item: item.since)


def _iso_ago(now: float, age_s: int) -> str:
    return datetime.fromtimestamp(now - age_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def filter_items(items: list[Item], **wanted: str) -> list[Item]:
    """kind / merchant / age (a bucket) / state / owner: an empty value matches everything."""
    out = items
    if wanted.get("kind"):
        out = [i for i in out if i.kind == wanted["kind"]]
    if wanted.get("merchant"):
        out = [i for i in out if i.mchid == wanted["merchant"]]
    if wanted.get("age"):
        out = [i for i in out if i.bucket == wanted["age"]]
    if wanted.get("state"):
        out = [i for i in out if i.state == wanted["state"]]
    if wanted.get("owner"):
        out = [i for i in out if i.owner == wanted["owner"]]
    return out


def morning(now: float | None = None) -> dict[str, Any]:
    """The morning page: the three numbers, the queue by kind and age, yesterday's recon, 14 days."""
    now = time.time() if now is None else now
    items = queue_items(now)
    stuck = [i for i in items if i.stuck]
    diffs = [i for i in items if i.kind == "recon difference"]
    person = [i for i in items if not i.stuck and i.kind != "recon difference"]
    kinds: dict[str, Counter[str]] = {}
    for item in items:
        kinds.setdefault(item.kind, Counter())[item.bucket] += 1
    return {
        "numbers": {"stuck": len(stuck), "with a person": len(person), "open diffs": len(diffs)},
        "total": len(items),
        "by_kind": [
            {"kind": kind, "buckets": [counter.get(b, 0) for b in BUCKETS], "total": sum(counter.values())}
            for kind, counter in sorted(kinds.items())
        ],
        "first_stuck": (stuck or person or items)[0] if items else None,
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
    """Merchants of WeChat Pay v2 reconcile under channel wechatpay (one transaction space)."""
    return "wechatpay" if channel.startswith("wechatpay") else channel


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
            "id": f"diff:{d['pk']}|{d['sk']}",
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


def ledger_totals(day: str, mchid: str = "") -> list[dict[str, Any]]:
    """Per merchant and channel: payments, refunds and net of one bill_date (Asia/Shanghai)."""
    from tally.store.recon import LedgerView

    view = LedgerView(bootstrap.tables().ddb, bootstrap.settings().ledger_table)
    rows = []
    for channel, merchant in merchants_configured():
        if mchid and merchant != mchid:
            continue
        channel = recon_channel(channel)
        paid = refunded = reversed_ = 0
        n_paid = n_refunds = 0
        for entry in view.day(channel, merchant, day):
            amount = int(entry.get("amount_cent") or 0)
            if entry.get("kind") == "PAYMENT":
                paid += amount
                n_paid += 1
            elif entry.get("kind") == "REFUND":
                refunded += amount
                n_refunds += 1
            else:
                reversed_ += amount
        runs = recon_store().run_rows(_recon_pk(channel, merchant, day))
        rows.append(
            {
                "channel": channel,
                "mchid": merchant,
                "payments": n_paid,
                "payment_cent": paid,
                "refunds": n_refunds,
                "refund_cent": refunded,
                "other_cent": reversed_,
                "net_cent": paid - refunded + reversed_,
                "recon": (runs[0].get("status") if runs else None) or "no run yet",
                "fees": yuan((runs[0].get("totals") or {}).get("fee_cent")) if runs else "",
            }
        )
    return rows


def fourteen_days(now: float, items: list[Item]) -> list[dict[str, Any]]:
    """Payments and refunds booked (count, yuan) per day, and queue items opened per day, oldest first."""
    today = today_cst(now)
    opened = Counter(
        when.astimezone(CHINA).date().isoformat() for when in map(parse_iso, (i.since for i in items)) if when
    )
    days = []
    for back in range(13, -1, -1):
        day = (today - timedelta(days=back)).isoformat()
        totals = ledger_totals(day)
        days.append(
            {
                "date": day,
                "payments": sum(r["payments"] for r in totals),
                "payment_cent": sum(r["payment_cent"] for r in totals),
                "refunds": sum(r["refunds"] for r in totals),
                "opened": opened.get(day, 0),
            }
        )
    return days


# ------------------------------------------------------------------------------------------- merchants


def merchants(now: float | None = None) -> list[dict[str, Any]]:
    """Configured channels, modes, certificate expiry and the last callback seen: no secret, ever."""
    now = time.time() if now is None else now
    t = bootstrap.tables()
    rows = []
    for channel, mchid in merchants_configured():
        row = t.get(t.merchants, f"{channel}#{mchid}") or {}
        expiries = []
        for name, value in sorted(row.items()):
            if "expire" in name or "not_after" in name:
                expiries += _expiry_lines(name, value)
        rows.append(
            {
                "channel": channel,
                "mchid": mchid,
                "appid": row.get("appid") or row.get("app_id") or "",
                "mode": row.get("mode") or row.get("verify_mode") or "",
                "provider": row.get("sp_mchid") or row.get("sp_app_id") or "",
                "expiry": expiries,
                "last_callback": cst(row.get("last_notified_at")) or "not recorded",
                "public": {k: _public(v) for k, v in row.items() if not _secretish(k)},
            }
        )
    return rows


def _expiry_lines(name: str, value: Any) -> list[str]:
    if isinstance(value, dict):
        return [f"{k}: {_when(v)}" for k, v in value.items()]
    return [f"{name}: {_when(value)}"]


def _when(value: Any) -> str:
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        return datetime.fromtimestamp(float(value), CHINA).strftime("%Y-%m-%d")
    return cst(value) or str(value)


def _secretish(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def _public(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "…"


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


def item_detail(item_id: str) -> dict[str, Any]:
    """The item's source row for the item page, without secrets; body and headers as text."""
    if item_id.startswith(("raw:", "event:")):
        row = bootstrap.manual_queue().show(item_id)
        return _scrub(row)
    if item_id.startswith("diff:"):
        pk, _, sk = item_id[5:].partition("|")
        return _scrub(recon_store().diff(pk, sk) or {})
    if item_id.startswith("refund:"):
        return _scrub(bootstrap.refund_service().show(item_id[7:]))
    if item_id.startswith("order:"):
        return _scrub(bootstrap.poll_service().polls.get(item_id[6:]) or {})
    return {}


def _scrub(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not _secretish(k) or k in ("signature_ok",)}


def order_story(mchid: str, out_trade_no: str) -> dict[str, Any]:
    """The order's timeline from what exists today: order row, transitions, deliveries, refunds."""
    from tally.store.tables import OrderStore, RawStore, order_key

    t = bootstrap.tables()
    order = OrderStore(t).get(mchid, out_trade_no)
    pk = order_key(mchid, out_trade_no)
    events: list[dict[str, Any]] = []
    for tr in OrderStore(t).transitions(pk):
        events.append(
            {
                "at": tr.get("at") or tr.get("created_at") or tr.get("sk"),
                "what": f"transition {tr.get('from') or tr.get('from_status') or ''} → "
                f"{tr.get('to') or tr.get('to_status') or ''}",
                "detail": str(tr.get("reason") or tr.get("source") or ""),
            }
        )
    raws = RawStore(t)
    for listed in raws.for_order(pk):
        raw = raws.get(listed["pk"]) or listed  # the index carries no body: the row itself does
        events.append(
            {
                "at": raw.get("notified_at") or raw.get("created_at"),
                "what": f"delivery {raw.get('pk')} handled={raw.get('handled')}",
                "detail": str(raw.get("manual_reason") or raw.get("outcome") or ""),
                "amount": yuan(raw.get("paid_cent")),
                "headers": raw.get("headers"),
                "body": raw.get("body"),
            }
        )
    for refund in bootstrap.refund_service().for_order(mchid, out_trade_no):
        events.append(
            {
                "at": refund.get("created_at"),
                "what": f"refund {refund.get('refund_no')} {refund.get('status')}",
                "detail": str(refund.get("manual_reason") or ""),
                "amount": yuan(refund.get("amount_cent")),
            }
        )
    events.sort(key=lambda e: str(e.get("at") or ""))
    for event in events:
        event["at_cst"] = cst(event.get("at"))
    summary = None
    if order:
        summary = {
            "status": order.get("status"),
            "amount": yuan(order.get("amount_cent")),
            "paid": yuan(order.get("paid_cent")),
            "refunded": yuan(order.get("refunded_cent")),
            "channel": order.get("channel"),
            "created": cst(order.get("created_at")),
        }
    return {"order": summary, "events": events}
