"""`tally merchant update|show` and the `--settlement-lag` / `--fund-accounts` flags of `tally merchant add` (R45):
the merchant record's fund-flow figures, validated by service/settlement_config.py before they are stored."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally.channels import registry as channel_registry
from tally.i18n import N_

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, fault, words


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--settlement-lag",
        metavar="JSON",
        help=_(
            "the fund-flow lag, e.g. '{\"settlement_days\": 7}' (also refund_days, fee_days, fee_return_days; "
            "default: the channel's, docs/recon.md)"
        ),
    )
    parser.add_argument(
        "--fund-accounts",
        metavar="LIST",
        help=_(
            "fund-flow accounts to check, e.g. BASIC or BASIC,FEES (WeChat: BASIC, OPERATION, FEES; Alipay: ALIPAY)"
        ),
    )


def register(merchant: argparse._SubParsersAction) -> None:
    routes = [c.route for c in channel_registry.all_channels()]
    update = merchant.add_parser(
        "update", help=_("set a merchant's settlement lag / fund-flow accounts (R45)")
    )
    update.add_argument("channel", choices=routes)
    update.add_argument("merchant_id", help=_("mchid or Alipay app_id"))
    flags(update)
    update.add_argument("--clear-settlement", action="store_true", help=_("back to the channel's defaults"))
    add_json(update)
    add_target(update)
    update.set_defaults(run=merchant_update)

    show = merchant.add_parser(
        "show", help=_("one merchant's record: mode, readiness, bill source, fund flow")
    )
    show.add_argument("channel", choices=routes)
    show.add_argument("merchant_id", help=_("mchid or Alipay app_id"))
    add_json(show)
    add_target(show)
    show.set_defaults(run=merchant_show)


def parsed(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as the service takes them; a lag that is not a JSON object is refused here, saying so."""
    out: dict[str, Any] = {}
    if getattr(args, "settlement_lag", None):
        try:
            out["settlement_lag"] = json.loads(args.settlement_lag)
        except json.JSONDecodeError as exc:
            raise fault(
                ValueError,
                N_("--settlement-lag is JSON, e.g. '{\"settlement_days\": 1}': %(why)s"),
                {"why": exc.msg},
            ) from None
    if getattr(args, "fund_accounts", None):
        out["fund_accounts"] = [w.strip() for w in args.fund_accounts.split(",") if w.strip()]
    return out


def _service() -> Any:
    from tally import bootstrap
    from tally.service.settlement_config import MerchantSettlement
    from tally.store.tables import MerchantStore

    return MerchantSettlement(MerchantStore(bootstrap.tables()))


def after_add(args: argparse.Namespace, route: str, merchant_id: str) -> None:
    """`tally merchant add … --settlement-lag … --fund-accounts …`: stored once the record exists."""
    figures = parsed(args)
    if figures:
        kind = _kind(route)
        shown = _service().update(kind, merchant_id, **figures)
        print(render(shown).splitlines()[-1])


def merchant_update(args: argparse.Namespace) -> int:
    figures = parsed(args)
    if not figures and not args.clear_settlement:
        raise fault(ValueError, N_("give --settlement-lag, --fund-accounts or --clear-settlement"))
    connect(args)
    shown = _service().update(_kind(args.channel), args.merchant_id, clear=args.clear_settlement, **figures)
    emit(shown, lambda: render(shown), args)
    return 0


def merchant_show(args: argparse.Namespace) -> int:
    connect(args)
    shown = _service().show(_kind(args.channel), args.merchant_id)
    emit(shown, lambda: render(shown), args)
    return 0


def _kind(route: str) -> str:
    channel = channel_registry.by_route(route)
    if channel is None:
        raise fault(ValueError, N_("unknown channel %(channel)r"), {"channel": route})
    return channel.merchant_kind


FIELDS = {
    "mode": N_("mode"),
    "appid": N_("appid"),
    "notify_url": N_("notify URL"),
    "bill_source": N_("bill source"),
    "ready": N_("ready"),
    "ready_reason": N_("why (not) ready"),
}


def render(shown: dict[str, Any]) -> str:
    w = words()
    lines = [_("merchant %(channel)s %(id)s") % {"channel": w.channel(shown["channel"]), "id": shown["id"]}]
    for name, label in FIELDS.items():
        if shown.get(name) is not None:
            lines.append(f"  {_(label)}: {shown[name]}")
    fund = shown.get("fund_flow") or {}
    if "error" in fund:
        lines.append("  " + _("fund flow: UNUSABLE RECORD: %(why)s") % {"why": fund["error"]})
    else:
        if shown.get("settlement_lag") or shown.get("fund_accounts"):
            own = _("merchant record")
        else:
            own = _("channel default")
        lines.append(
            "  "
            + _(
                "fund flow: accounts %(accounts)s; credit T+%(credit)s, fee T+%(fee)s, refund T+%(refund)s, "
                "fee back T+%(fee_back)s (%(whose)s)"
            )
            % {
                "accounts": ", ".join(fund["accounts"]),
                "credit": fund["settlement_days"],
                "fee": fund["fee_days"],
                "refund": fund["refund_days"],
                "fee_back": fund["fee_return_days"],
                "whose": own,
            }
        )
    return "\n".join(lines)
