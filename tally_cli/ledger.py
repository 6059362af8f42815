"""`tally ledger day [DATE] [--merchant M] [--csv FILE] [--json]`: the finance view of one day
(service/ledger_day.py): payments, refunds, fees and net per merchant and channel, next to the recon verdict.
Read-only (R42). DATE is YYYY-MM-DD, today or yesterday (Asia/Shanghai); default yesterday."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from tally_cli.common import add_json, add_target, connect, emit, parse_date
from tally_cli.speak import _, money, money_text, pad, rpad, words


def register(sub: argparse._SubParsersAction) -> None:
    ledger = sub.add_parser("ledger", help=_("the ledger for finance people")).add_subparsers(
        metavar="ACTION"
    )
    day = ledger.add_parser(
        "day",
        help=_("payments, refunds, fees and net per merchant and channel for one bill date, with recon"),
    )
    day.add_argument(
        "date",
        nargs="?",
        help=_("bill date YYYY-MM-DD, today or yesterday (Asia/Shanghai; default yesterday)"),
    )
    day.add_argument("--merchant", help=_("only this merchant (mchid or Alipay app_id)"))
    day.add_argument(
        "--csv", type=pathlib.Path, metavar="FILE", help=_("also write the table as CSV (UTF-8, BOM)")
    )
    day.add_argument(
        "--statement",
        action="store_true",
        help=_("print the daily statement CSV instead (the rows recon writes next to its report)"),
    )
    add_json(day)
    add_target(day)
    day.set_defaults(run=ledger_day)
    register_backfill(ledger)


def ledger_day(args: argparse.Namespace) -> int:
    bill_date = parse_date(args.date)  # before anything is read or written
    connect(args)
    from tally import bootstrap
    from tally.domain.statement import statement_csv
    from tally.service.ledger_day import csv_text

    if args.statement:
        rows = bootstrap.ledger_day_service().statement(bill_date, merchant=args.merchant)
        if args.csv:  # the statement itself, as recon writes it (UTF-8 with BOM)
            _write(args.csv, statement_csv(rows))
        if args.json:
            emit({"bill_date": bill_date, "merchant": args.merchant, "statement": rows}, lambda: "", args)
        elif args.csv:
            print(
                _("statement of %(day)s: %(n)d row(s) written to %(path)s")
                % {"day": bill_date, "n": len(rows), "path": args.csv}
            )
        else:  # the CSV text recon writes next to its report, without the BOM a terminal would show
            print(statement_csv(rows).removeprefix("\ufeff"), end="")
        return 0
    view = bootstrap.ledger_day_service().day(bill_date, merchant=args.merchant)
    if args.csv:
        _write(args.csv, csv_text(view))
    emit(view, lambda: render_day(view, args.csv), args)
    return 0


def _write(path: pathlib.Path, text: str) -> None:
    """The CSV file, or a refusal that says why (exit 2): never exit 0 without the file."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SystemExit(
            _("tally ledger day: cannot write %(path)s: %(why)s") % {"path": path, "why": exc.strerror or exc}
        ) from None


def render_day(view: dict[str, Any], csv_path: pathlib.Path | None = None) -> str:
    """The day per merchant and channel: counts and amounts (¥1,234.56), the recon state in words, where the
    money is (Words.landing) and the three-way verdict."""
    w = words()
    head = _("ledger %(day)s (bill date, Asia/Shanghai)") % {"day": view["bill_date"]} + (
        "  " + _("merchant %(merchant)s") % {"merchant": view["merchant"]} if view.get("merchant") else ""
    )
    if not view["rows"]:
        return head + "\n  " + _("nothing booked and no recon run for this day")
    columns = [
        (_("channel"), 14, pad),
        (_("merchant"), 12, pad),
        (_("payments"), 20, rpad),
        (_("refunds"), 16, rpad),
        (_("reversals"), 12, rpad),
        (_("fees"), 14, rpad),
        (_("fees back"), 12, rpad),
        (_("net"), 14, rpad),
    ]
    lines = [head, "  " + " ".join(fit(title, n) for title, n, fit in columns) + "  " + _("recon")]
    total = {**view["totals"], "channel": "", "mchid": "", "recon": None}
    for r in [*view["rows"], total]:
        verdict = day_words(r.get("recon"))
        if verdict is None:
            verdict = "" if r is total else w.run("no run yet")
        fees = money(r["fee_cent"]) if r["fee_cent"] is not None else _("not booked yet")
        cells = [
            w.channel(r["channel"]) if r is not total else _("TOTAL"),
            r["mchid"],
            f"{r['payments']} × {money(r['payment_cent'])}",
            f"{r['refunds']} × {money(r['refund_cent'])}",
            money(r["reversal_cent"]),
            fees,
            money(r["fee_returned_cent"]),
            money(r["net_cent"]),
        ]
        lines.append(
            "  "
            + " ".join(fit(cell, n) for cell, (_title, n, fit) in zip(cells, columns, strict=True))
            + f"  {verdict}"
        )
    for r in view["rows"]:  # where the money is: expected, landed, short by (R49)
        lines.append(
            "  "
            + _("money %(channel)s %(merchant)s: %(words)s")
            % {"channel": w.channel(r["channel"]), "merchant": r["mchid"], "words": w.landing(r)}
        )
    for r in view["rows"]:  # ledger = trade bill = fund flow (R45)
        v = r.get("verdict") or {}
        if v:
            legs = f" ({', '.join(v['differs'])})" if v.get("differs") else ""
            lines.append(
                "  "
                + _("three-way %(channel)s %(merchant)s: %(verdict)s%(legs)s: %(reason)s")
                % {
                    "channel": w.channel(r["channel"]),
                    "merchant": r["mchid"],
                    "verdict": w.verdict(v["code"]),
                    "legs": legs,
                    "reason": v["reason"],
                }
            )
    if any(r["fee_cent"] is None for r in view["rows"]):
        lines.append("  " + _("fees 'not booked yet': no recon run has read that bill; net leaves them out"))
    lines.append(
        "  "
        + _(
            "fees are a cost (positive); net = payments - refunds + reversals - fees + fees given back "
            "(docs/finance.md)"
        )
    )
    if csv_path:
        lines.append("  " + _("CSV written to %(path)s") % {"path": csv_path})
    return "\n".join(lines)


def day_words(recon: dict[str, Any] | None) -> str | None:
    """A day's recon state as people read it (R49): "differences open: 2 resolved, 3 open", "done (2 resolved,
    0 open)", "matched"; the state's words from Words.run."""
    if not recon:
        return None
    w = words()
    state = recon.get("state") or recon.get("status")
    if not recon.get("words"):
        return w.run(state)
    counts = _("%(worked)d resolved, %(open)d open") % {
        "worked": int(recon.get("worked_diffs") or 0),
        "open": int(recon.get("open_diffs") or 0),
    }
    if recon.get("expected_diffs"):
        counts += _(", %(n)d expected") % {"n": int(recon["expected_diffs"])}
    return f"{w.run(state)}: {counts}" if state == "DIFFS" else f"{w.run(state)} ({counts})"


# ---------------------------------------------------------------- backfill-settlement (R43, docs/settlement.md §8)


def register_backfill(ledger: argparse._SubParsersAction) -> None:
    fill = ledger.add_parser(
        "backfill-settlement",
        help=_("settlement figures for PAYMENT / REFUND entries booked before R43, from the kept raw rows"),
    )
    fill.add_argument("--channel", required=True, help=_("wechatpay, wechatpay-v2 or alipay"))
    fill.add_argument(
        "--from", dest="day_from", required=True, metavar="DATE", help=_("first bill date YYYY-MM-DD")
    )
    fill.add_argument("--to", dest="day_to", metavar="DATE", help=_("last bill date (default: --from)"))
    fill.add_argument("--merchant", help=_("only this merchant (mchid or Alipay app_id)"))
    fill.add_argument("--dry-run", action="store_true", help=_("count and list, write nothing"))
    add_json(fill)
    add_target(fill)
    fill.set_defaults(run=backfill_settlement)


def backfill_settlement(args: argparse.Namespace) -> int:
    import sys

    connect(args)
    from tally import bootstrap

    def progress(state: dict[str, Any]) -> None:  # long runs: a line on stderr, stdout stays one document
        print(
            f"  {state['day']}: "
            + _("%(examined)s examined, %(done)s done, %(already)s already, %(legacy)s stay legacy") % state,
            file=sys.stderr,
            flush=True,
        )

    result = bootstrap.settlement_backfill().run(
        args.channel,
        args.day_from,
        args.day_to,
        dry_run=args.dry_run,
        merchant=args.merchant,
        progress=progress,
    )
    emit(result, lambda: render_backfill(result), args)
    return 0


def render_backfill(result: dict[str, Any]) -> str:
    values = {**result, "verb": _("would write") if result["dry_run"] else _("written")}
    lines = [
        f"backfill-settlement {result['channel']} {result['from']}..{result['to']}"
        + ("  " + _("(dry run: nothing written)") if result["dry_run"] else ""),
        "  "
        + _(
            "%(examined)s entries examined: %(done)s %(verb)s, %(already)s had their figures already, "
            "%(legacy)s stay legacy (recon matches them on amount_cent, counted)"
        )
        % values,
    ]
    for reason, n in result["legacy_reasons"].items():
        lines.append(f"    {n} x {reason}")
    for e in result["legacy_entries"]:
        lines.append(
            "  "
            + _("legacy %(kind)s %(key)s  %(amount)s  %(day)s: %(why)s")
            % {
                "kind": e["kind"],
                "key": e["pk"],
                "amount": money_text(e["amount"]),
                "day": e["bill_date"],
                "why": e["reason"],
            }
        )
    if result["legacy_unlisted"]:
        lines.append(
            "  " + _("… and %(n)s more (--json lists the first 500)") % {"n": result["legacy_unlisted"]}
        )
    return "\n".join(lines)
