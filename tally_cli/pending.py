"""`tally pending`: the morning number (R37, R41) — notifications not applied for 10 minutes (handled=0), the work
queue's open items and how many are past their threshold, the oldest age, and one line per item (the same
items `tally manual list` shows). Exit 3 while something is stuck or overdue (cron-able), 0 otherwise."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally_cli import alerts
from tally_cli.common import add_target, connect

OVERDUE_EXIT = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pending", help="the morning number: stuck rows and the work queue; exit 3 if overdue")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=50, help="at most this many lines (default 50)")
    p.add_argument("--over", type=int, default=None, help="count items older than S seconds as overdue")
    add_target(p)
    p.set_defaults(run=pending)


def pending(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    from tally_cli.manual import one_document

    with one_document():
        report = bootstrap.pending_report().report(limit=args.limit, over_s=args.over)
        report["heartbeat_age_s"] = (
            bootstrap.heartbeat_age_s()
        )  # the synthetic payment (service/heartbeat.py)
        report["incidents"] = alerts.live_incidents()  # above the cases (docs/alerts.md)
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else render(report))
    return OVERDUE_EXIT if report["pending_over_10m"] or report["manual_over_24h"] else 0


def render(report: dict[str, Any]) -> str:
    lines = alerts.incident_lines(report.get("incidents") or [])
    lines += [
        f"stuck: notifications not applied for 10 min: {report['pending_over_10m']}",
        f"open items waiting for a person:            {report.get('open_items', report['manual_over_24h'])}",
        f"  of which past their threshold:            {report['manual_over_24h']}",
        f"orders with a person:                       {report['orders_with_person']}",
        f"oldest:                                     {_age(report['oldest_age_s'])}",
    ]
    if report["rows"]:
        lines.append("")
        lines.append(f"  {'age':>8}  {'channel':<10} {'merchant':<12} {'order':<32} what")
        lines += [
            f"  {_age(r['age_s']):>8}  {str(r['channel']):<10} {str(r['merchant']):<12} {str(r['order'] or '-'):<32} "
            f"{r['kind']} {r['key']}: {r['why']}"
            for r in report["rows"]
        ]
        if report["more"]:
            lines.append(f"  ... and {report['more']} more (--limit)")
        lines.append("")
        lines.append("work the items with `tally manual list` / `tally manual show ID` (docs/morning.md)")
    else:
        lines.append("nothing is stuck, nothing waits for a person")
    if report.get("heartbeat_age_s") is not None:
        lines.append(
            f"heartbeat: last synthetic payment booked {_age(report['heartbeat_age_s'])} ago (alarm at 3m)"
        )
    return "\n".join(lines)


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
