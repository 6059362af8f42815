"""`tally refund create|show|list`: make a refund through the same service as POST /refunds, and look at them.

`refund create` without `--refund-no` refuses a second refund of the same order and amount within
AGAIN_WINDOW_S unless `--again`: a person who re-runs the command after a timeout must not refund twice.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any

from tally_cli.common import add_target, connect, emit, yuan

AGAIN_WINDOW_S = 10 * 60
SPENT = ("FAIL", "CLOSED")
STATES = (
    "PENDING",
    "ACCEPTED",
    "SUCCESS",
    "FAIL",
    "MANUAL",
)  # domain/refunds.RefundStatus  # refunds that paid nothing out do not block another try


def register(sub: argparse._SubParsersAction) -> None:
    refund = sub.add_parser("refund", help="create and inspect refunds").add_subparsers(metavar="ACTION")
    create = refund.add_parser(
        "create", help="refund (part of) a paid order; safe to repeat with --refund-no"
    )
    create.add_argument("mchid")
    create.add_argument("out_trade_no")
    create.add_argument("amount_cent", type=int, help="integer cents (fen), e.g. 1230 for 12.30")
    create.add_argument("--reason", default="", help="shown to the payer (at most 80 characters)")
    create.add_argument("--refund-no", help="your idempotency key; generated when absent (R26)")
    create.add_argument(
        "--again",
        action="store_true",
        help="without --refund-no: refund the same amount again although a refund of it is under 10 minutes old",
    )
    create.set_defaults(run=refund_create)
    show = refund.add_parser("show", help="one refund with every channel report about it")
    show.add_argument("refund_no")
    show.add_argument(
        "--mchid", help="the merchant (refund numbers are per merchant; needed if several use it)"
    )
    show.set_defaults(run=refund_show)
    listing = refund.add_parser("list", help="refunds of an order, or those due for polling / with a person")
    listing.add_argument("mchid", nargs="?")
    listing.add_argument("out_trade_no", nargs="?")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("--manual", action="store_true", help="refunds waiting for a person (status MANUAL)")
    which.add_argument("--due", action="store_true", help="refunds the poller will look at now")
    which.add_argument(
        "--day",
        help="every refund that changed on this day (Asia/Shanghai; today, yesterday), in any state",
    )
    listing.add_argument("--state", help="with --day: only this state (PENDING ACCEPTED SUCCESS FAIL MANUAL)")
    listing.add_argument("--merchant", help="with --day: only this merchant")
    listing.set_defaults(run=refund_list)
    for p in (create, show, listing):
        p.add_argument("--json", action="store_true")
        add_target(p)


def _service(args: argparse.Namespace) -> Any:
    connect(args)
    from tally import bootstrap

    return bootstrap.refund_service()


def refund_create(args: argparse.Namespace) -> int:
    from tally.domain.refunds import ExceedsRefundable
    from tally.service.refunds import RefundConflict

    request = {
        "mchid": args.mchid,
        "out_trade_no": args.out_trade_no,
        "amount_cent": args.amount_cent,
        "reason": args.reason,
    }
    if args.refund_no:
        request["refund_no"] = args.refund_no
    service = _service(args)
    if not args.refund_no and not args.again:
        earlier = recent_same_refund(service, args.mchid, args.out_trade_no, args.amount_cent)
        if earlier is not None:
            message = (
                f"refused: refund {earlier['refund_no']} of {yuan(args.amount_cent, 'yuan')} on order "
                f"{args.out_trade_no} was made at {earlier['created_at']} ({earlier['status']}); "
                "a second one within 10 minutes needs --again (or pass --refund-no to retry that refund safely)"
            )
            emit(
                {"ok": False, "refused": "possible_repeat", "earlier": earlier, "error": message},
                message,
                args,
            )
            return 1
    try:
        view, created = service.create(request)
    except (ExceedsRefundable, RefundConflict) as exc:
        emit({"ok": False, "error": str(exc)}, f"tally: refused: {exc}", args)
        return 1
    emit(view, lambda: ("created " if created else "existing ") + render_line(view), args)
    return 0


def recent_same_refund(
    service: Any, mchid: str, out_trade_no: str, amount_cent: int
) -> dict[str, Any] | None:
    """The newest refund (row, or hold whose answer is not stored yet) of this order and amount made within
    AGAIN_WINDOW_S that has not failed; None if there is none. Reads only: the order's refunds
    (GSI refunds_of_order) and the order's open holds."""
    from tally import bootstrap
    from tally.store.refunds import open_holds

    now = time.time()
    found = [
        {"refund_no": r["refund_no"], "created_at": r.get("created_at"), "status": r.get("status")}
        for r in service.for_order(mchid, out_trade_no)
        if int(r.get("amount_cent", -1)) == amount_cent and r.get("status") not in SPENT
    ]
    order = bootstrap.order_service().orders.get(mchid, out_trade_no) or {}
    found += [
        {"refund_no": no, "created_at": h.get("created_at"), "status": "RESERVED"}
        for no, h in open_holds(order).items()
        if int(h.get("amount_cent", -1)) == amount_cent
    ]
    recent = [f for f in found if now - _epoch(f["created_at"]) < AGAIN_WINDOW_S]
    return max(recent, key=lambda f: str(f["created_at"])) if recent else None


def _epoch(iso: Any) -> float:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def refund_show(args: argparse.Namespace) -> int:
    view = _service(args).show(args.refund_no, getattr(args, "mchid", None))
    emit(view, lambda: render_show(view), args)
    return 0


def render_show(view: dict[str, Any]) -> str:
    lines = [
        render_line(view),
        f"  order {view['mchid']}/{view['out_trade_no']}  transaction {view.get('transaction_id') or '-'}"
        f"  channel refund id {view.get('refund_id') or '-'}",
        f"  created {view['created_at']}  updated {view.get('updated_at')}  expires {view['expire_at']}"
        f"  reserved on {view['hold']}",
    ]
    if view.get("manual_reason") and view["status"] == "MANUAL":
        lines.append(f"  WITH A PERSON: {view['manual_reason']}")
    if view.get("fail_reason"):
        lines.append(f"  failed: {view['fail_reason']}")
    lines.append("  channel reports (handled: 0 pending, 1 applied, 2 with a person):")
    lines += [
        f"    {r['sk']:<9} via {r['source']:<6} handled={r['handled']}  {r.get('outcome') or ''}"
        for r in view["reports"]
    ] or ["    (none)"]
    return "\n".join(lines)


def refund_list(args: argparse.Namespace) -> int:
    service = _service(args)
    if args.manual:
        rows = service.manual()
    elif args.due:
        rows = service.due()
    elif args.day or args.state or args.merchant:
        from tally_cli.common import parse_date

        state = (args.state or "").upper()
        if state and state not in STATES:
            raise ValueError(f"--state takes one of {', '.join(STATES)}, not {args.state!r}")
        rows = service.of_day(parse_date(args.day or "today"), state=state, merchant=args.merchant or "")
    elif args.mchid and args.out_trade_no:
        rows = service.for_order(args.mchid, args.out_trade_no)
    else:
        raise ValueError("give MCHID OUT_TRADE_NO, or --manual, --due or --day DATE")
    emit(rows, lambda: "\n".join(render_line(r) for r in rows) or "(no refunds)", args)
    return 0


def render_line(view: dict[str, Any]) -> str:
    return (
        f"refund {view['refund_no']}  {view['status']:<8} {yuan(view['amount_cent'])} "
        f"{view.get('currency', 'CNY')}  order {view['out_trade_no']}  {view.get('reason') or ''}"
    ).rstrip()
