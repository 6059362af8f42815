"""`tally refund create|show|list`: make a refund through the same service as POST /refunds, and look at them.

`refund create` without `--refund-no` refuses a second refund of the same order and amount within
AGAIN_WINDOW_S unless `--again`: a person who re-runs the command after a timeout must not refund twice.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any

from tally.i18n import N_

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, fault, money, when, words

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
    refund = sub.add_parser("refund", help=_("create and inspect refunds")).add_subparsers(metavar="ACTION")
    create = refund.add_parser(
        "create", help=_("refund (part of) a paid order; safe to repeat with --refund-no")
    )
    create.add_argument("mchid", help=_("the merchant id (Alipay: app_id)"))
    create.add_argument("out_trade_no", help=_("the merchant's order number"))
    create.add_argument("amount_cent", type=int, help=_("integer cents (fen), e.g. 1230 for 12.30"))
    create.add_argument("--reason", default="", help=_("shown to the payer (at most 80 characters)"))
    create.add_argument("--refund-no", help=_("your idempotency key; generated when absent (R26)"))
    create.add_argument(
        "--again",
        action="store_true",
        help=_(
            "without --refund-no: refund the same amount again although a refund of it is under 10 minutes old"
        ),
    )
    create.set_defaults(run=refund_create)
    show = refund.add_parser("show", help=_("one refund with every channel report about it"))
    show.add_argument("refund_no", help=_("the refund number"))
    show.add_argument(
        "--mchid", help=_("the merchant (refund numbers are per merchant; needed if several use it)")
    )
    show.set_defaults(run=refund_show)
    listing = refund.add_parser(
        "list", help=_("refunds of an order, or those due for polling / with a person")
    )
    listing.add_argument("mchid", nargs="?", help=_("the merchant id (Alipay: app_id)"))
    listing.add_argument("out_trade_no", nargs="?", help=_("the merchant's order number"))
    which = listing.add_mutually_exclusive_group()
    which.add_argument(
        "--manual", action="store_true", help=_("refunds waiting for a person (status MANUAL)")
    )
    which.add_argument("--due", action="store_true", help=_("refunds the poller will look at now"))
    which.add_argument(
        "--day",
        help=_("every refund that changed on this day (Asia/Shanghai; today, yesterday), in any state"),
    )
    listing.add_argument(
        "--state", help=_("with --day: only this state (PENDING ACCEPTED SUCCESS FAIL MANUAL)")
    )
    listing.add_argument("--merchant", help=_("with --day: only this merchant"))
    listing.set_defaults(run=refund_list)
    for p in (create, show, listing):
        add_json(p)
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
            refused = (
                "refused: refund %(refund)s of %(amount)s on order %(order)s was made at %(at)s (%(status)s); "
                "a second one within 10 minutes needs --again (or pass --refund-no to retry that refund safely)"
            )
            values = {
                "refund": earlier["refund_no"],
                "amount": money(args.amount_cent),
                "order": args.out_trade_no,
                "at": when(earlier["created_at"]),
                "status": earlier["status"],
            }
            emit(  # the document keeps the English sentence: --json is the same in every language
                {"ok": False, "refused": "possible_repeat", "earlier": earlier, "error": refused % values},
                _(refused) % {**values, "status": words().refund_status(earlier["status"])},
                args,
            )
            return 1
    try:
        view, created = service.create(request)
    except (ExceedsRefundable, RefundConflict) as exc:
        emit({"ok": False, "error": str(exc)}, _("tally: refused: %(why)s") % {"why": exc}, args)
        return 1
    emit(view, lambda: (_("created ") if created else _("existing ")) + render_line(view), args)
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
        "  "
        + _("order %(merchant)s/%(order)s  transaction %(txn)s  channel refund id %(refund_id)s")
        % {
            "merchant": view["mchid"],
            "order": view["out_trade_no"],
            "txn": view.get("transaction_id") or "-",
            "refund_id": view.get("refund_id") or "-",
        },
        "  "
        + _("created %(created)s  updated %(updated)s  expires %(expires)s  reserved on %(hold)s")
        % {
            "created": when(view["created_at"]),
            "updated": when(view.get("updated_at")),
            "expires": when(view["expire_at"]),
            "hold": view["hold"],
        },
    ]
    if view.get("manual_reason") and view["status"] == "MANUAL":
        lines.append("  " + _("WITH A PERSON: %(why)s") % {"why": view["manual_reason"]})
    if view.get("fail_reason"):
        lines.append("  " + _("failed: %(why)s") % {"why": view["fail_reason"]})
    lines.append("  " + _("channel reports (handled: 0 pending, 1 applied, 2 with a person):"))
    lines += [
        f"    {r['sk']:<9} " + _("via %(source)s") % {"source": r["source"]} + f"  handled={r['handled']}  "
        f"{r.get('outcome') or ''}"
        for r in view["reports"]
    ] or ["    " + _("(none)")]
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
            raise fault(
                ValueError,
                N_("--state takes one of %(states)s, not %(state)r"),
                {"states": ", ".join(STATES), "state": args.state},
            )
        rows = service.of_day(parse_date(args.day or "today"), state=state, merchant=args.merchant or "")
    elif args.mchid and args.out_trade_no:
        rows = service.for_order(args.mchid, args.out_trade_no)
    else:
        raise fault(ValueError, N_("give MCHID OUT_TRADE_NO, or --manual, --due or --day DATE"))
    emit(rows, lambda: "\n".join(render_line(r) for r in rows) or _("(no refunds)"), args)
    return 0


def render_line(view: dict[str, Any]) -> str:
    return (
        _("refund %(refund)s  %(status)s  %(amount)s  order %(order)s  %(reason)s")
        % {
            "refund": view["refund_no"],
            "status": words().refund_status(view["status"]),
            "amount": money(view["amount_cent"]),
            "order": view["out_trade_no"],
            "reason": view.get("reason") or "",
        }
    ).rstrip()
