"""`tally pending`: the morning number (R37, R41) — notifications not applied for 10 minutes (handled=0), the work
queue's open items and how many are past their threshold, the oldest age, and one line per item (the same
items `tally manual list` shows). Exit 3 while something is stuck or overdue (cron-able), 0 otherwise."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally_cli import alerts
from tally_cli.common import add_json, add_target, connect
from tally_cli.speak import _, aligned, pad, rpad, words

OVERDUE_EXIT = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pending", help=_("the morning number: stuck rows and the work queue; exit 3 if overdue")
    )
    add_json(p)
    p.add_argument("--limit", type=int, default=50, help=_("at most this many lines (default 50)"))
    p.add_argument("--over", type=int, default=None, help=_("count items older than S seconds as overdue"))
    add_target(p)
    p.set_defaults(run=pending)


def pending(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    from tally_cli.manual import one_document

    with one_document():
        report = bootstrap.pending_report().report(limit=args.limit, over_s=args.over)
        heartbeat = bootstrap.heartbeat()  # service/heartbeat.py
        report["heartbeat_age_s"] = heartbeat.age_s()  # the synthetic payment
        report["heartbeat_echo"] = heartbeat.echo_status()  # the channel's security echo, per path
        report["incidents"] = alerts.live_incidents()  # above the cases (docs/alerts.md)
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else render(report))
    return OVERDUE_EXIT if report["pending_over_10m"] or report["manual_over_24h"] else 0


def render(report: dict[str, Any]) -> str:
    """The morning number and one line per item: its age, channel, merchant, order and what it is in plain
    words (Words, the console's sentence); `tally manual show ID` tells the reason and the next step."""
    w = words()
    lines = alerts.incident_lines(report.get("incidents") or [])
    lines += aligned(
        [
            (_("stuck: notifications not applied for 10 min:"), report["pending_over_10m"]),
            (
                _("open items waiting for a person:"),
                report.get("open_items", report["manual_over_24h"]),
            ),
            (_("  of which past their threshold:"), report["manual_over_24h"]),
            (_("orders with a person:"), report["orders_with_person"]),
            (_("oldest:"), w.age(report["oldest_age_s"])),
        ]
    )
    if report["rows"]:
        lines.append("")
        lines.append(
            "  "
            + "  ".join(
                [
                    rpad(_("age"), 12),
                    pad(_("channel"), 10),
                    pad(_("merchant"), 12),
                    pad(_("order"), 32),
                    _("what"),
                ]
            )
        )
        for r in report["rows"]:
            title = w.stuck().title if r["kind"] == "stuck-notification" else w.case(r["kind"]).title
            lines.append(
                "  "
                + "  ".join(
                    [
                        rpad(w.age(r["age_s"]), 12),
                        pad(w.channel(r["channel"]) or "-", 10),
                        pad(str(r["merchant"] or "-"), 12),
                        pad(str(r["order"] or "-"), 32),
                        f"{title} · {r['key']}",
                    ]
                )
            )
        if report["more"]:
            lines.append("  " + _("... and %(n)d more (--limit)") % {"n": report["more"]})
        lines.append("")
        lines.append(
            _(
                "the reason and the next step of each: `tally manual show ID`; all of them: `tally manual list`"
            )
        )
    else:
        lines.append(_("nothing is stuck, nothing waits for a person"))
    if report.get("heartbeat_age_s") is not None:
        lines.append(
            _("heartbeat: last synthetic payment booked %(age)s ago (alarm at 3 min)")
            % {"age": w.age(report["heartbeat_age_s"])}
        )
    lines += [_echo_line(w, echo) for echo in report.get("heartbeat_echo") or []]
    return "\n".join(lines)


def _echo_line(w: Any, echo: dict[str, Any]) -> str:
    """One echo path: the channel's test callback to a merchant's notify address, last back or missing."""
    route, _slash, mchid = echo["path"].partition("/")
    where = {"channel": w.channel(route), "mchid": mchid}
    if echo["missing"]:
        return _("echo %(channel)s %(mchid)s: none back for %(age)s: a case is open (alarm at 3 min)") % {
            **where,
            "age": w.age(echo["waiting_s"]),
        }
    if echo["last_echo_age_s"] is None:
        return _("echo %(channel)s %(mchid)s: none back yet") % where
    return _("echo %(channel)s %(mchid)s: last back %(age)s ago") % {
        **where,
        "age": w.age(echo["last_echo_age_s"]),
    }
