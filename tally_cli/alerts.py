"""`tally alerts` (chat destinations and the alert log) and `tally incidents` (docs/alerts.md).

tally alerts add NAME --kind wecom|dingtalk|feishu|slack --url URL [--secret S|@FILE] [--lang zh-CN|en]
tally alerts list | test NAME | remove NAME | snooze NAME|all --minutes N | log [--day D]
tally incidents list [--all] | show ID
"""

from __future__ import annotations

import argparse
from typing import Any

from tally_cli.common import add_target, connect, emit, secret_arg, yuan


def register(sub: argparse._SubParsersAction) -> None:
    alerts = sub.add_parser(
        "alerts", help="chat destinations (WeCom, DingTalk, Feishu, Slack) and the alert log"
    )
    actions = alerts.add_subparsers(metavar="ACTION")

    add = actions.add_parser("add", help="add or replace a destination (stored in Secrets Manager)")
    add.add_argument("name")
    add.add_argument("--kind", required=True, choices=("wecom", "dingtalk", "feishu", "slack"))
    add.add_argument("--url", required=True, type=secret_arg, help="the robot's webhook URL (or @FILE)")
    add.add_argument(
        "--secret", default="", type=secret_arg, help="DingTalk/Feishu signing secret (or @FILE)"
    )
    add.add_argument("--lang", default="zh-CN", choices=("zh-CN", "en"), help="the team's language")
    add.add_argument("--hour-cap", type=int, default=0, help="cards an hour at most (default 20)")
    add.set_defaults(run=_add)

    for name, run, text in (
        ("list", _list, "the destinations, secrets masked"),
        ("test", _test, "send a test card now"),
        ("remove", _remove, "remove a destination"),
    ):
        p = actions.add_parser(name, help=text)
        if name != "list":
            p.add_argument("name")
        p.set_defaults(run=run)

    snooze = actions.add_parser("snooze", help="hold cards for a while (they are logged as suppressed)")
    snooze.add_argument("name", help="a destination, or all")
    snooze.add_argument("--minutes", type=int, required=True, help="0 wakes it")
    snooze.set_defaults(run=_snooze)

    log = actions.add_parser("log", help="every card sent, suppressed or failed")
    log.add_argument("--day", help="UTC day YYYY-MM-DD (default today)")
    log.add_argument("--limit", type=int, default=50)
    log.set_defaults(run=_log)

    incidents = sub.add_parser("incidents", help="failures grouped by cause: opened, escalated, resolved")
    verbs = incidents.add_subparsers(metavar="ACTION")
    listing = verbs.add_parser("list", help="live incidents (--all: the resolved ones of 30 days too)")
    listing.add_argument("--all", action="store_true")
    listing.set_defaults(run=_incidents)
    show = verbs.add_parser("show", help="one incident: its counts, rate, cases and history")
    show.add_argument("id")
    show.set_defaults(run=_incident)

    for parser in (*actions.choices.values(), listing, show):
        parser.add_argument("--json", action="store_true")
        add_target(parser)


def _book(args: argparse.Namespace) -> Any:
    connect(args)
    from tally import bootstrap

    return bootstrap.destination_book()


def _add(args: argparse.Namespace) -> int:
    added = _book(args).add(
        args.name, args.kind, args.url, secret=args.secret, lang=args.lang, hour_cap=args.hour_cap
    )
    emit(added, f"destination {added['name']} ({added['kind']}, {added['lang']}) saved", args)
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = _book(args).list()
    emit({"destinations": rows}, lambda: _table(rows) or "no destinations: `tally alerts add`", args)
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{r['name']:<16} {r['kind']:<9} {r['lang']:<6} {'signed' if r['signed'] else 'unsigned':<9} {r['url']}"
        + (f"  snoozed until {r['snoozed_until']}" if r["snoozed_until"] else "")
        for r in rows
    )


def _test(args: argparse.Namespace) -> int:
    _book(args)
    from tally import bootstrap

    entry = bootstrap.notifier().test(args.name)
    emit(entry, f"{entry['destination']}: {entry['outcome']} {entry.get('reason') or ''}".strip(), args)
    return 0 if entry["outcome"] == "sent" else 1


def _remove(args: argparse.Namespace) -> int:
    emit(_book(args).remove(args.name), f"destination {args.name} removed", args)
    return 0


def _snooze(args: argparse.Namespace) -> int:
    rows = _book(args).snooze(args.name, args.minutes)
    emit({"destinations": rows}, lambda: _table(rows), args)
    return 0


def _log(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap
    from tally.store.tables import iso_now

    day = args.day or iso_now()[:10]
    rows = bootstrap.alert_log().day(day, limit=args.limit)
    keys = ("at", "destination", "kind", "incident", "change", "outcome", "attempts", "reason")
    entries = [{k: r.get(k) for k in keys} for r in rows]
    emit(
        {"day": day, "entries": entries},
        lambda: (
            "\n".join(
                f"{e['at']}  {e['outcome']:<10} {e['destination']:<14} {e['change']:<9} {e['incident']}"
                + (f"  ({e['reason']})" if e["reason"] else "")
                for e in entries
            )
            or f"no cards on {day} (UTC)"
        ),
        args,
    )
    return 0


def _incidents(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    rows = [public(r) for r in bootstrap.incidents().list(live_only=not args.all)]
    emit({"incidents": rows}, lambda: render(rows), args)
    return 0


def _incident(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    row = public(bootstrap.incidents().get(args.id))
    emit(row, lambda: render([row], detail=True), args)
    return 0


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An incident as people and scripts read it: amounts as yuan next to the cents, no storage keys."""
    out = {k: v for k, v in row.items() if k not in ("pk", "sk", "rev", "samples", "expires_at")}
    out["amount"] = yuan(row.get("amount_cent")) if row.get("amount_known") else None
    return out


def render(rows: list[dict[str, Any]], *, detail: bool = False) -> str:
    if not rows:
        return "no live incidents"
    lines = []
    for r in rows:
        lines.append(
            f"{r['state']:<9} {r['id']:<40} {r['origin']:<6} merchant {r.get('merchant') or '-':<12} "
            f"×{r.get('count')} {r['amount'] or '-'} yuan  {r.get('rate_per_h')}/h  {r.get('cause')}"
        )
        if detail:
            lines.append(f"  first seen {r.get('first_seen')}, last seen {r.get('last_seen')}")
            if r.get("resolved_at"):
                lines.append(f"  resolved {r['resolved_at']} ({r.get('resolved_why')})")
            lines += [f"  case {c}" for c in r.get("cases") or []]
            lines += [f"  {h['at']} {h['change']} at ×{h.get('count')}" for h in r.get("history") or []]
    return "\n".join(lines)


def live_incidents() -> list[dict[str, Any]]:
    """The live incidents, for `tally pending` (above the cases); none on a stack without the alerts table."""
    from tally import bootstrap

    if not bootstrap.settings().alerts_table:
        return []
    return [public(r) for r in bootstrap.incidents().list(live_only=True)]


def incident_lines(incidents: list[dict[str, Any]]) -> list[str]:
    return (
        [f"incidents ({len(incidents)} live, `tally incidents show ID`):", render(incidents), ""]
        if incidents
        else []
    )
