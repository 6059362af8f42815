"""`tally pending`: the morning number (R37) — raw rows at handled=0 older than 10 minutes, raw rows at
handled=2 older than 24 hours, the oldest age, and one line per stuck row (channel, merchant, order, age, why)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally.cli.common import add_target, connect


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pending", help="the morning number: stuck and manual rows")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=50, help="at most this many lines (default 50)")
    add_target(p)
    p.set_defaults(run=pending)


def pending(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    report = bootstrap.pending_report().report(limit=args.limit)
    report["heartbeat_age_s"] = bootstrap.heartbeat_age_s()  # the synthetic payment (service/heartbeat.py)
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else render(report))
    return 0


def render(report: dict[str, Any]) -> str:
    lines = [
        f"handled=0 older than 10 min: {report['pending_over_10m']}",
        f"handled=2 older than 24 h:   {report['manual_over_24h']}",
        f"orders with a person:        {report['orders_with_person']}",
        f"oldest:                      {_age(report['oldest_age_s'])}",
    ]
    if report["rows"]:
        lines.append("")
        lines.append(f"  {'age':>8}  {'channel':<10} {'merchant':<12} {'order':<32} why")
        lines += [
            f"  {_age(r['age_s']):>8}  {str(r['channel']):<10} {str(r['merchant']):<12} {str(r['order']):<32} "
            f"{r['kind']}: {r['why']}"
            for r in report["rows"]
        ]
        if report["more"]:
            lines.append(f"  ... and {report['more']} more (--limit)")
    else:
        lines.append("nothing is stuck")
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
