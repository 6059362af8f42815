"""`tally demo`: a scripted day of payments and faults through the embedded stack, then the morning report.

It starts its own embedded stack (moto, the real handlers, the simulator) and never touches a
deployed one: a demo that creates fake payments has no business near real money.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from typing import Any

from tally.domain.statement import FUND_LEG, TRADE_LEG
from tally.i18n import N_

from tally_cli.ledger import day_words
from tally_cli.speak import _, money, words


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help=_("run a scripted day through the embedded stack; exit 1 if any payment is unaccounted for"),
    )
    demo.add_argument("--orders", type=int, default=200, help=_("payments in the day (default 200)"))
    demo.add_argument(
        "--local", action="store_true", help=_("accepted for symmetry: the demo is always local")
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help=_(
            "keep the stack running with the day in it (like `TALLY_DEMO=1 make run`): work its queue with "
            "`tally manual list --local`; Ctrl-C stops it"
        ),
    )
    demo.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if args.orders < 8:
        raise ValueError("--orders must be at least 8 (one of each scenario)")
    try:
        from tally_local.day import main
    except ImportError:
        raise ValueError(
            "tally demo needs the project checkout (tally_local): run it from the repository"
        ) from None
    return main(args.orders, keep=args.keep)


# ------------------------------------------------------------------ the morning report (tally_local/day.py)

FIRST_FEW = 3  # items of each kind the report lists (the rest: `tally manual list --local`)
ORDER_NOT_FOUND = "MISSING"  # the report's count of orders the service does not know (tally_local/day.py)

SCENARIOS = {  # the demo's scripted payments (tally_local/day.py SCENARIOS)
    "paid": N_("paid"),
    "duplicates": N_("duplicate callbacks"),
    "lost": N_("lost callbacks"),
    "coupon": N_("coupons"),
    "alipay_paid": N_("paid with Alipay"),
    "refund": N_("partial refunds"),
    "mismatch": N_("amount mismatches"),
    "paid_after_close": N_("paid after close"),
}
LEGS = {TRADE_LEG: N_("trade bill"), FUND_LEG: N_("fund flow")}  # a three-way verdict's legs that differ


def render(report: dict[str, Any]) -> str:
    """The demo day's morning report in the CLI's language: codes through Words, amounts as ¥1,234.56, record
    numbers (items, orders, transactions) and alarm names (metric names) as they are."""
    w = words()
    lines = [
        "",
        _(
            "Tally demo day %(day)s (yesterday, Asia/Shanghai; reconciled this morning): "
            "%(n)d payments taken by the channels"
        )
        % {"day": report.get("bill_date", ""), "n": report["orders"]},
        "  " + _("scenarios: %(counts)s") % {"counts": counts(report["scenarios"], scenario_words)},
        "  "
        + _("orders: %(counts)s") % {"counts": counts(dict(sorted(report["statuses"].items())), order_words)},
        "  "
        + _("ledger: %(counts)s") % {"counts": counts(dict(sorted(report["ledger"].items())), w.ledger_kind)},
        "  " + _("refund tasks: %(n)d") % {"n": report["refund_tasks"]},
        "  " + morning_number(report["pending"]),
        "  " + rotation_line(report["rotation"]),
        "  " + recon_line(report["money"]),
    ]
    lines += ["  " + failed_line(failed) for failed in report.get("recon_failed", [])]
    lines += ["  " + money_line(report["bill_date"], row) for row in report["money"]]
    lines += ["  " + three_way_line(day, leg) for day, leg in report["settlement"].items()]
    lines += work_lines(report["manual"])
    lines.append("  " + alarms_line(report["alarms"]))
    if report["unaccounted"]:
        lines.append("  " + _("UNACCOUNTED PAYMENTS (money taken, not booked, not with a person):"))
        lines += [f"    {line}" for line in report["unaccounted"]]
    else:
        lines.append("  " + _("every payment is booked, with a person, or has a refund task: nothing silent"))
    return "\n".join(lines) + "\n"


def counts(counted: dict[str, int], word: Callable[[str], str]) -> str:
    """ "paid 12, closed 2": each code in words with its count, in the order of the codes."""
    return ", ".join(f"{word(code)} {n}" for code, n in sorted(counted.items()))


def scenario_words(code: str) -> str:
    return _(SCENARIOS[code]) if code in SCENARIOS else code


def order_words(code: str) -> str:
    return _("not found") if code == ORDER_NOT_FOUND else words().any_status(code)


def morning_number(pending: dict[str, Any]) -> str:
    return _(
        "morning number: %(stuck)s stuck (notifications not applied for 10 min), %(open)s open item(s) "
        "waiting for a person, %(over)s past their threshold"
    ) % {
        "stuck": pending.get("pending_over_10m", "?"),
        "open": pending.get("open_items", "?"),
        "over": pending.get("manual_over_24h", "?"),
    }


def rotation_line(rotation: dict[str, Any]) -> str:
    said = (
        N_(
            "certificate rotation: platform certificate %(old)s… → %(new)s… mid-day; merchant %(merchant)s "
            "verifies with %(n)d serial(s), the new one included"
        )
        if rotation["included"]
        else N_(
            "certificate rotation: platform certificate %(old)s… → %(new)s… mid-day; merchant %(merchant)s "
            "verifies with %(n)d serial(s), the new one MISSING"
        )
    )
    return _(said) % {
        "old": rotation["old"][:12],
        "new": rotation["new"][:12],
        "merchant": rotation["merchant"],
        "n": rotation["serials"],
    }


def recon_line(rows: list[dict[str, Any]]) -> str:
    """Each merchant's day as `tally ledger day` says it: the recon state in words and the three-way verdict."""
    w = words()
    merchants = [
        _("%(channel)s %(merchant)s %(state)s, three-way %(verdict)s")
        % {
            "channel": w.channel(row["channel"]),
            "merchant": row["mchid"],
            "state": day_words(row.get("recon")) or w.run("no run yet"),
            "verdict": verdict_words(row.get("verdict") or {}),
        }
        for row in rows
    ]
    return _("reconciliation: %(merchants)s") % {"merchants": "; ".join(merchants) or w.run("no run yet")}


def verdict_words(verdict: dict[str, Any]) -> str:
    """ "differs (fund flow)": the verdict in words, with the legs that differ."""
    said = words().verdict(verdict.get("code") or "NOT_CHECKED")
    legs = [_(LEGS[leg]) if leg in LEGS else leg for leg in verdict.get("differs") or []]
    return f"{said} ({', '.join(legs)})" if legs else said


def failed_line(failed: dict[str, str]) -> str:
    return _("reconciliation of %(channel)s %(merchant)s failed: %(why)s") % {
        "channel": words().channel(failed["channel"]),
        "merchant": failed["mchid"],
        "why": failed["why"],
    }


def money_line(day: str, row: dict[str, Any]) -> str:
    """One merchant-day's money, the one arithmetic of `tally ledger day` (R49), and where it is."""
    w = words()
    return _(
        "money of %(day)s: %(channel)s %(merchant)s: payments %(payments)s - refunds %(refunds)s + reversals "
        "%(reversals)s - fees %(fees)s + fees given back %(returned)s = net %(net)s; %(landing)s"
    ) % {
        "day": day,
        "channel": w.channel(row["channel"]),
        "merchant": row["mchid"],
        "payments": money(row["payment_cent"]),
        "refunds": money(row["refund_cent"]),
        "reversals": money(row["reversal_cent"]),
        "fees": money(row["fee_cent"]) if row["fee_cent"] is not None else _("not booked yet"),
        "returned": money(row["fee_returned_cent"]),
        "net": money(row["net_cent"]),
        "landing": w.landing(row),
    }


def three_way_line(day: str, leg: dict[str, Any]) -> str:
    """A past coupon day reconciled three ways (R45): ledger = trade bill = fund flow, or what differs."""
    head = (
        N_(
            "three-way planted shortfall %(day)s: settlement %(settlement)s (cash and no-cash coupons), trade bill "
            "%(trade)s → %(verdict)s, %(n)d difference(s)"
        )
        if leg["planted"]
        else N_(
            "three-way coupon day %(day)s: settlement %(settlement)s (cash and no-cash coupons), trade bill "
            "%(trade)s → %(verdict)s, %(n)d difference(s)"
        )
    )
    said = _(head) % {
        "day": day,
        "settlement": money(leg["settlement_cent"]),
        "trade": words().run(leg["trade"]),
        "verdict": verdict_words({"code": leg["verdict"], "differs": leg["legs"]}),
        "n": len(leg["diffs"]),
    }
    return said + (": " + "; ".join(settlement_diff(d) for d in leg["diffs"]) if leg["diffs"] else "")


def settlement_diff(diff: dict[str, Any]) -> str:
    values = {
        "item": words().ledger_kind(diff["item"]),
        "gap": money(diff["gap_cent"]),
        "ledger": money(diff["local_cent"]),
        "channel": money(diff["channel_cent"]),
        "fund_day": diff["fund_day"],
    }
    if diff["gap_cent"] > 0:
        return (
            _("%(item)s short by %(gap)s (ledger %(ledger)s, fund flow of %(fund_day)s %(channel)s)") % values
        )
    return _("%(item)s: channel %(channel)s vs ledger %(ledger)s") % values


def work_lines(items: list[dict[str, Any]]) -> list[str]:
    """The work queue as counts per kind, each with its first few items (oldest first), each item's why the
    plain sentence `tally manual list` gives it."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        kinds.setdefault(str(item["kind"]), []).append(item)
    parts = Counter(str(p["kind"]) for item in items for p in (item.get("parts") or [])[1:])
    head = _("work queue: %(n)d case(s) for a person") % {"n": len(items)}
    if items:
        head += ": " + counts({kind: len(group) for kind, group in sorted(kinds.items())}, kind_title)
    if parts:
        head += "; " + _("also in them: %(counts)s") % {
            "counts": counts(dict(sorted(parts.items())), kind_title)
        }
    lines = ["  " + head]
    for kind, group in sorted(kinds.items()):
        lines.append(f"    {kind_title(kind)} ({len(group)}):")
        lines += ["      " + work_item(item) for item in group[:FIRST_FEW]]
        if len(group) > FIRST_FEW:
            more = f"tally manual list --local --filter kind={kind}"
            lines.append(
                "      "
                + _("… and %(n)d more: `%(command)s`") % {"n": len(group) - FIRST_FEW, "command": more}
            )
    return lines


def kind_title(kind: str) -> str:
    return words().reason(kind).title


def work_item(item: dict[str, Any]) -> str:
    said = words().case(item["kind"], str(item.get("cls") or ""))
    return "  ".join(
        [
            item["id"],
            _("order %(order)s") % {"order": item["order"] or "-"},
            money(item.get("amount_cent")),
            f"{_('why:')} {said.reason}",
        ]
    )


def alarms_line(alarms: dict[str, int]) -> str:
    fired = ", ".join(f"{name} ({n})" for name, n in alarms.items())
    return _("alarms that would fire (their metric names): %(alarms)s") % {"alarms": fired or _("none")}


def log_line(path: Any) -> str:
    return "  " + _("the product's log lines of the day: %(path)s") % {"path": path}


def progress_line(done: int, total: int, width: int = 40) -> str:
    filled = width * done // total
    bar = f"[{'#' * filled}{'.' * (width - filled)}]"
    return "  " + _("demo day %(bar)s %(done)d/%(total)d payments") % {
        "bar": bar,
        "done": done,
        "total": total,
    }


def stack_keeps_running(api_url: str, logins: dict[str, str]) -> str:
    """What a person does next with the stack `tally demo --keep` leaves running."""
    lines = [
        "",
        _(
            "The stack keeps running with this day in it (yesterday, reconciled this morning): work the queue with"
        ),
        "  tally manual list --local        "
        + _("(every item, oldest first; `tally manual show ID --local`)"),
        "  tally pending --local            " + _("(the morning number; exit 3 while something is overdue)"),
        "  tally recon show / tally ledger day --local   " + _("(default: yesterday, the demo's day)"),
        _("docs/morning.md says what each kind means and what to do."),
    ]
    if logins:
        lines += ["", _("Console: %(url)s") % {"url": f"{api_url}/console/login"}]
        lines += [
            "  " + _("sign in as %(name)s: %(password)s") % {"name": name, "password": password}
            for name, password in logins.items()
        ]
    return "\n".join(lines) + "\n"
