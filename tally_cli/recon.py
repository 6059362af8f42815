"""`tally recon run|show|diffs|resolve|confirm`, `tally diff list|resolve` (`tally bill …`: tally_cli/bill.py).

Everything here talks to the stack (`--local` or `--stack`).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tally.channels import registry as channel_registry

from tally_cli.common import UsageError, add_json, add_target, connect, emit, parse_date
from tally_cli.speak import _, money, pad, when, words

CHANNELS = list(channel_registry.reconciled())  # the stored channels with bills: wechatpay, alipay


def stored_channel(word: str) -> str:
    """--channel: a stored channel, or a channel's CLI word (`wechatpay-v2` is reconciled in the merchant's
    WeChat bill, stored "wechatpay"; its merchant record picks the v2 or v3 download, R44)."""
    owner = channel_registry.by_route(word)
    return owner.stored if owner is not None and owner.reconciled else word


def register(sub: argparse._SubParsersAction) -> None:
    recon = sub.add_parser("recon", help=_("reconcile a day's bill against the ledger")).add_subparsers(
        metavar="ACTION"
    )

    def day(p: argparse.ArgumentParser, every_merchant: bool = False) -> None:
        p.add_argument("--channel", required=not every_merchant, choices=CHANNELS, type=stored_channel)
        p.add_argument(
            "--mchid",
            required=not every_merchant,
            help=_("merchant id (Alipay: app_id)")
            + (_("; without --channel and --mchid: every merchant") if every_merchant else ""),
        )
        p.add_argument(
            "--date",
            help=_(
                "bill date YYYY-MM-DD, today or yesterday (the channel's day, Asia/Shanghai; default yesterday)"
            ),
        )
        add_target(p)

    run = recon.add_parser("run", help=_("download (or re-use --s3-key), guard, match; prints the run"))
    day(run)
    run.add_argument(
        "--s3-key", help=_("reconcile a bill already in the bills bucket instead of downloading")
    )
    add_json(run)
    run.set_defaults(run=recon_run)

    show = recon.add_parser("show", help=_("the day's runs, diffs and a link to the latest report"))
    day(show, every_merchant=True)
    add_json(show)
    show.set_defaults(run=recon_show)

    diffs = recon.add_parser("diffs", help=_("the day's differences"))
    day(diffs)
    add_json(diffs)
    diffs.set_defaults(run=recon_diffs)

    resolve = recon.add_parser(
        "resolve", help=_("close a diff (RESOLVED, or IGNORED); --reverse books a reversal")
    )
    day(resolve)
    _resolve_args(resolve)

    confirm = recon.add_parser(
        "confirm", help=_("confirm a volume drop (R33) and re-run the day from the kept bill")
    )
    day(confirm)
    confirm.add_argument("--by", required=True)
    confirm.add_argument("--note", default="")
    confirm.set_defaults(run=recon_confirm)

    diff = sub.add_parser("diff", help=_("reconciliation differences across days")).add_subparsers(
        metavar="ACTION"
    )
    listing = diff.add_parser("list", help=_("OPEN differences, oldest first"))
    listing.add_argument("--limit", type=int, default=200)
    add_json(listing)
    add_target(listing)
    listing.set_defaults(run=diff_list)
    dres = diff.add_parser("resolve", help=_("same as `tally recon resolve`"))
    day(dres)
    _resolve_args(dres)


def _resolve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sk", help=_("the diff's key as `recon diffs` shows it, e.g. PAYMENT#wechatpay#4200…"))
    p.add_argument("--by", required=True, help=_("who decides"))
    p.add_argument("--note", required=True, help=_("why (kept in the diff's history)"))
    p.add_argument("--ignore", action="store_true", help=_("IGNORED instead of RESOLVED"))
    p.add_argument(
        "--reverse",
        action="store_true",
        help=_("also write a reversing ledger entry (local-only / amount-differs; amount computed)"),
    )
    add_json(p)
    p.set_defaults(run=recon_resolve)


# ------------------------------------------------------------------ commands


def _service(args: argparse.Namespace) -> Any:
    if hasattr(args, "date"):  # checked and resolved locally before anything is sent or recorded
        args.date = parse_date(args.date)
    connect(args)
    from tally import bootstrap

    service = bootstrap.recon_service()
    service.progress = _progress_bar()
    return service


def recon_run(args: argparse.Namespace) -> int:
    run = _service(args).run(args.channel, args.mchid, args.date, pass_="cli", s3_key=args.s3_key)
    emit(run, lambda: render_run(run), args)
    return 0 if run["status"] in ("MATCHED", "QUIET") else 1


def recon_show(args: argparse.Namespace) -> int:
    if bool(args.channel) != bool(args.mchid):
        raise UsageError(_("give --channel and --mchid together, or neither for every merchant"))
    service = _service(args)
    if args.channel:
        view = service.show(args.channel, args.mchid, args.date)
        if args.json:
            emit(view, "", args)
            return 0
        print(render_show(view))
        return 0
    views = [
        {"channel": channel, "mchid": mchid, **service.show(channel, mchid, args.date)}
        for channel, mchid in reconciled_merchants()
    ]
    emit({"date": args.date, "merchants": views}, lambda: render_every_merchant(args.date, views), args)
    return 0


def reconciled_merchants() -> list[tuple[str, str]]:
    """(stored channel, merchant id) of every configured merchant whose channel has bills, once each (a WeChat
    Pay v2 merchant reconciles in the WeChat bill); the heartbeat's synthetic merchant left out (R54)."""
    from tally import bootstrap
    from tally.store.tables import MerchantStore

    hidden = bootstrap.settings().heartbeat_mchid
    pairs = []
    for kind, mchid in MerchantStore(bootstrap.tables()).configured():
        owner = channel_registry.by_merchant_kind(kind)
        if owner is not None and owner.reconciled and mchid != hidden:
            pairs.append((owner.stored, mchid))
    return list(dict.fromkeys(pairs))


def render_every_merchant(day: str, views: list[dict[str, Any]]) -> str:
    if not views:
        return _("%(day)s: no merchant is configured") % {"day": day}
    w = words()
    blocks = [f"{w.channel(v['channel'])} {v['mchid']}\n" + render_show(v) for v in views]
    return "\n\n".join(blocks)


def render_show(view: dict[str, Any]) -> str:
    """The day as it stands: the latest run, the earlier ones, a confirmed volume drop, the differences and
    the report's link."""
    w = words()
    if not view["runs"]:
        return _("%(day)s: no runs yet") % {"day": view["pk"]}
    lines = [render_run(as_it_stands(view["runs"][0], view["diffs"]))]
    if len(view["runs"]) > 1:
        lines.append("  " + _("earlier runs:"))
        lines += [f"    {r['sk']}  {w.run(r['status'])}  {r.get('reason', '')}" for r in view["runs"][1:]]
    if view.get("confirmation"):
        c = view["confirmation"]
        lines.append(
            "  "
            + _("volume drop confirmed by %(by)s at %(at)s: %(note)s")
            % {"by": c["confirmed_by"], "at": when(c["confirmed_at"]), "note": c.get("note", "")}
        )
    lines.append(render_diffs(view["diffs"]))
    if view.get("report_url"):
        lines.append("  " + _("report (CSV, 1 h link): %(url)s") % {"url": view["report_url"]})
    return "\n".join(lines)


def recon_diffs(args: argparse.Namespace) -> int:
    rows = _service(args).show(args.channel, args.mchid, args.date)["diffs"]
    emit(rows, lambda: render_diffs(rows), args)
    return 0


def recon_resolve(args: argparse.Namespace) -> int:
    """Through the work queue (R48): a difference that is a part of a case closes the case with it."""
    from tally import bootstrap
    from tally.store.recon import recon_pk

    service = _service(args)
    pk = recon_pk(args.channel, args.mchid, args.date)
    done = bootstrap.work_queue().resolve_diff(
        pk, args.sk, by=args.by, reason=args.note, ignore=args.ignore, reverse=args.reverse
    )
    row = {**(service.store.diff(pk, args.sk) or {}), "outcome": done["outcome"]}
    if args.json:
        emit(row, "", args)
    else:
        w = words()
        print(
            _("%(key)s: %(status)s by %(by)s")
            % {"key": row["sk"], "status": w.diff_status(row["handle_status"]), "by": row["handler"]}
        )
        if ";" in done["outcome"]:
            print("  " + _("the case: %(outcome)s") % {"outcome": done["outcome"]})
        last = row["history"][-1]
        if last.get("reversal"):
            print(
                "  "
                + _("reversing ledger entry %(entry)s: %(amount)s")
                % {"entry": last["reversal"], "amount": money(last["amount_cent"])}
            )
    return 0


def recon_confirm(args: argparse.Namespace) -> int:
    run = _service(args).confirm(args.channel, args.mchid, args.date, args.by, args.note)
    print(render_run(run))
    return 0 if run["status"] in ("MATCHED", "QUIET") else 1


def as_it_stands(run: dict[str, Any], diffs: list[dict[str, Any]]) -> dict[str, Any]:
    """The latest run as the day stands now (R49): its differences counted worked and open apart, a run that
    ended DIFFS whose differences are all worked shown DONE; what the run itself said stays in `tally recon
    show --json`."""
    from tally.domain.merchant_day import count_diffs, day_state

    from tally_cli.ledger import day_words

    counted = count_diffs(diffs)
    state, said = day_state(run.get("status"), counted)
    if not said:
        return run
    recon = {
        "state": state,
        "words": said,
        "open_diffs": counted.open,
        "worked_diffs": counted.worked,
        "expected_diffs": counted.expected,
    }
    return {**run, "status": state, "reason": day_words(recon), "open_diffs": counted.open}


def diff_list(args: argparse.Namespace) -> int:
    rows = _service(args).store.open_diffs(args.limit)
    emit(rows, lambda: render_diffs(rows, with_day=True), args)
    return 0


# ------------------------------------------------------------------ rendering


def render_run(run: dict[str, Any]) -> str:
    w = words()
    totals = run.get("totals") or {}
    lines = [
        f"{run['pk']}  {w.run(run['status'])}  "
        + _("(%(pass)s, %(at)s Asia/Shanghai)")
        % {"pass": run.get("pass"), "at": when(run.get("started_at"))},
        f"  {run.get('reason', '')}",
    ]
    if totals:
        lines.append(
            "  "
            + _(
                "bill: %(rows)s rows, %(payments)s payments %(payment_amount)s, %(refunds)s refunds "
                "%(refund_amount)s; guard %(guard)s"
            )
            % {
                "rows": totals.get("rows"),
                "payments": totals.get("payments"),
                "payment_amount": money(totals.get("payment_cent", 0)),
                "refunds": totals.get("refunds"),
                "refund_amount": money(totals.get("refund_cent", 0)),
                "guard": run.get("guard"),
            }
        )
    if run.get("bill_source"):
        lines.append(
            "  "
            + _("bill source: %(source)s (%(why)s)")
            % {"source": run["bill_source"], "why": run.get("bill_source_why", "")}
        )
    if run.get("bill_key"):
        lines.append("  " + _("kept: %(key)s") % {"key": f"s3://…/{run['bill_key']}"})
    if run.get("layout_fingerprint"):
        kind = run.get("layout_kind") or _("new, quarantined")
        mapped = (
            _(", mapped onto %(base)s") % {"base": run["layout_mapped_onto"]}
            if run.get("layout_mapped_onto")
            else ""
        )
        lines.append("  " + _("layout: %(kind)s") % {"kind": f"{kind} ({run['layout_fingerprint']}{mapped})"})
    if run.get("layout_diff"):
        lines += [f"    {x}" for x in run["layout_diff"].get("lines", [])]
        sample = run.get("layout_sample") or {}
        if sample:
            lines.append("    " + _("sample row:") + " " + ", ".join(f"{k}={v}" for k, v in sample.items()))
    if run.get("stats"):
        s = run["stats"]
        lines.append(
            "  "
            + _("matched %(matched)s, new diffs %(new)s, auto-resolved %(auto)s, open %(open)s")
            % {
                "matched": s["matched"],
                "new": s["new_diffs"],
                "auto": s["auto_resolved"],
                "open": run.get("open_diffs", 0),
            }
        )
    if run.get("report_key"):
        lines.append(
            "  " + _("report: %(key)s (tally recon show … prints a link)") % {"key": run["report_key"]}
        )
    return "\n".join(lines)


def render_diffs(rows: list[dict[str, Any]], with_day: bool = False) -> str:
    """Each difference: its state and what it is in words (Words.diff), its key, both amounts, the detail."""
    if not rows:
        return "  " + _("no differences")
    w = words()
    out = ["  " + _("differences:")]
    for d in rows:
        amounts = _("channel %(channel)s / ours %(ours)s") % {
            "channel": money(d.get("channel_amount_cent")),
            "ours": money(d.get("local_amount_cent")),
        }
        where = f"{d['bill_date']} {d['mchid']}  " if with_day else ""
        out.append(
            f"    {where}{pad(w.diff_status(d['handle_status']), 8)} {pad(w.diff(d['cls']).title, 28)} "
            f"{d['sk']}  {amounts}  {d.get('detail', '')}"
            + (f"  [{d['recovery']}]" if d.get("recovery") else "")
        )
    return "\n".join(out)


def _progress_bar() -> Any:
    """Rows parsed, on stderr, when stderr is a terminal (long bills take a while)."""
    if not sys.stderr.isatty():
        return None
    start = time.monotonic()

    def report(n: int) -> None:
        sys.stderr.write(f"\r  {n:,} rows  {time.monotonic() - start:5.1f}s")
        sys.stderr.flush()

    return report
