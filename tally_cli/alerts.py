"""`tally alerts` (chat destinations and the alert log) and `tally incidents` (docs/alerts.md).

tally alerts add NAME --kind wecom|dingtalk|feishu|slack --url URL [--secret S|@FILE] [--lang zh-CN|en]
tally alerts list | test NAME | remove NAME | snooze NAME|all --minutes N | log [--day D]
tally incidents list [--all] | show ID
"""

from __future__ import annotations

import argparse
from typing import Any

from tally.i18n import N_

from tally_cli.common import add_json, add_target, connect, emit, secret_arg, yuan
from tally_cli.speak import _, money, pad, when, words


def register(sub: argparse._SubParsersAction) -> None:
    alerts = sub.add_parser(
        "alerts", help=_("chat destinations (WeCom, DingTalk, Feishu, Slack) and the alert log")
    )
    actions = alerts.add_subparsers(metavar="ACTION")

    add = actions.add_parser("add", help=_("add or replace a destination (stored in Secrets Manager)"))
    add.add_argument("name", help=_("the destination's name"))
    add.add_argument(
        "--kind",
        required=True,
        choices=("wecom", "dingtalk", "feishu", "slack"),
        help=_("the chat: WeCom, DingTalk, Feishu or Slack"),
    )
    add.add_argument("--url", required=True, type=secret_arg, help=_("the robot's webhook URL (or @FILE)"))
    add.add_argument(
        "--secret", default="", type=secret_arg, help=_("DingTalk/Feishu signing secret (or @FILE)")
    )
    add.add_argument("--lang", default="zh-CN", choices=("zh-CN", "en"), help=_("the team's language"))
    add.add_argument("--hour-cap", type=int, default=0, help=_("cards an hour at most (default 20)"))
    add.set_defaults(run=_add)

    for name, run, text in (
        ("list", _list, N_("the destinations, secrets masked")),
        ("test", _test, N_("send a test card now")),
        ("remove", _remove, N_("remove a destination")),
    ):
        p = actions.add_parser(name, help=_(text))
        if name != "list":
            p.add_argument("name", help=_("the destination's name"))
        p.set_defaults(run=run)

    snooze = actions.add_parser("snooze", help=_("hold cards for a while (they are logged as suppressed)"))
    snooze.add_argument("name", help=_("a destination, or all"))
    snooze.add_argument("--minutes", type=int, required=True, help=_("0 wakes it"))
    snooze.set_defaults(run=_snooze)

    log = actions.add_parser("log", help=_("every card sent, suppressed or failed"))
    log.add_argument("--day", help=_("UTC day YYYY-MM-DD (default today)"))
    log.add_argument("--limit", type=int, default=50, help=_("at most this many lines (default 50)"))
    log.set_defaults(run=_log)

    incidents = sub.add_parser("incidents", help=_("failures grouped by cause: opened, escalated, resolved"))
    verbs = incidents.add_subparsers(metavar="ACTION")
    listing = verbs.add_parser("list", help=_("live incidents (--all: the resolved ones of 30 days too)"))
    listing.add_argument("--all", action="store_true", help=_("the resolved ones of 30 days too"))
    listing.set_defaults(run=_incidents)
    show = verbs.add_parser("show", help=_("one incident: its counts, rate, cases and history"))
    show.add_argument("id", help=_("the incident's id, as `incidents list` prints it"))
    show.set_defaults(run=_incident)

    for parser in (*actions.choices.values(), listing, show):
        add_json(parser)
        add_target(parser)


def _book(args: argparse.Namespace) -> Any:
    connect(args)
    from tally import bootstrap

    return bootstrap.destination_book()


def _add(args: argparse.Namespace) -> int:
    added = _book(args).add(
        args.name, args.kind, args.url, secret=args.secret, lang=args.lang, hour_cap=args.hour_cap
    )
    emit(
        added,
        _("destination %(name)s (%(kind)s, %(lang)s) saved")
        % {"name": added["name"], "kind": added["kind"], "lang": added["lang"]},
        args,
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = _book(args).list()
    emit({"destinations": rows}, lambda: _table(rows) or _("no destinations: `tally alerts add`"), args)
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{r['name']:<16} {r['kind']:<9} {r['lang']:<6} {pad(_('signed') if r['signed'] else _('unsigned'), 9)} "
        f"{r['url']}"
        + ("  " + _("snoozed until %(at)s") % {"at": when(r["snoozed_until"])} if r["snoozed_until"] else "")
        for r in rows
    )


def _test(args: argparse.Namespace) -> int:
    _book(args)
    from tally import bootstrap

    entry = bootstrap.notifier().test(args.name)
    emit(entry, f"{entry['destination']}: {entry['outcome']} {entry.get('reason') or ''}".strip(), args)
    return 0 if entry["outcome"] == "sent" else 1


def _remove(args: argparse.Namespace) -> int:
    emit(_book(args).remove(args.name), _("destination %(name)s removed") % {"name": args.name}, args)
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
            or _("no cards on %(day)s (UTC)") % {"day": day}
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
        return _("no live incidents")
    w = words()
    lines = []
    for r in rows:
        amount = money(r.get("amount_cent")) if r.get("amount") is not None else "-"
        lines.append(
            f"{pad(w.incident_state(r['state']), 9)} {r['id']:<40} {pad(w.origin(r['origin']), 12)} "
            + _("merchant %(merchant)s") % {"merchant": r.get("merchant") or "-"}
            + f"  ×{r.get('count')} {amount}  "
            + _("%(rate)s an hour") % {"rate": r.get("rate_per_h")}
            + f"  {r.get('cause')}"
        )
        if detail:
            lines.append(
                "  "
                + _("first seen %(first)s, last seen %(last)s")
                % {"first": when(r.get("first_seen")), "last": when(r.get("last_seen"))}
            )
            if r.get("resolved_at"):
                lines.append(
                    "  "
                    + _("resolved %(at)s (%(why)s)")
                    % {"at": when(r["resolved_at"]), "why": r.get("resolved_why")}
                )
            lines += ["  " + _("case %(id)s") % {"id": c} for c in r.get("cases") or []]
            lines += [
                f"  {when(h['at'])} {w.incident_state(h['change'])} ×{h.get('count')}"
                for h in r.get("history") or []
            ]
    return "\n".join(lines)


def live_incidents() -> list[dict[str, Any]]:
    """The live incidents, for `tally pending` (above the cases); none on a stack without the alerts table."""
    from tally import bootstrap

    if not bootstrap.settings().alerts_table:
        return []
    return [public(r) for r in bootstrap.incidents().list(live_only=True)]


def incident_lines(incidents: list[dict[str, Any]]) -> list[str]:
    return (
        [
            _("incidents (%(n)d live, `tally incidents show ID`):") % {"n": len(incidents)},
            render(incidents),
            "",
        ]
        if incidents
        else []
    )
