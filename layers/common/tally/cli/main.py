"""`tally`: merchant set-up, order inspection, offline verification of a rejected callback."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

from tally.cli.env import StackNotFound, use_deployed, use_local


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except (StackNotFound, ValueError, LookupError, OSError) as exc:
        print(f"tally: {exc}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally", description="Operate Tally, the payment-callback service.")
    sub = p.add_subparsers(metavar="COMMAND")

    merchant = sub.add_parser("merchant", help="configure merchants").add_subparsers(metavar="ACTION")
    add = merchant.add_parser("add", help="add or update a merchant's channel credentials")
    add.add_argument("channel", choices=["wechatpay"])
    add.add_argument("--mchid", required=True)
    add.add_argument("--appid", default="", help="the appid orders are created with")
    add.add_argument("--apiv3-key", required=True, help="the 32-character APIv3 key, or @FILE to read it")
    add.add_argument("--merchant-key", required=True, type=pathlib.Path, help="merchant API private key PEM file")
    add.add_argument("--merchant-serial", required=True, help="serial of the merchant API certificate")
    add.add_argument("--platform-cert", action="append", default=[], type=pathlib.Path,
                     help="WeChat Pay platform certificate PEM (repeatable)")
    add.add_argument("--public-key", type=pathlib.Path, help="WeChat Pay public key PEM (public-key mode)")
    add.add_argument("--public-key-id", help="its id, PUB_KEY_ID_…")
    add.add_argument("--notify-url", help="callback URL given to the channel (default: this stack's API)")
    add.add_argument("--tenant", help="tenant id (default: the mchid)")
    _target(add)
    add.set_defaults(run=merchant_add)

    order = sub.add_parser("order", help="inspect orders").add_subparsers(metavar="ACTION")
    show = order.add_parser("show", help="an order with its transitions and raw notifications")
    show.add_argument("mchid")
    show.add_argument("out_trade_no")
    show.add_argument("--json", action="store_true")
    _target(show)
    show.set_defaults(run=order_show)

    verify = sub.add_parser("verify", help="verify and decrypt a callback offline").add_subparsers(metavar="CHANNEL")
    wxv = verify.add_parser("wechatpay", help="WeChat Pay v3 callback: the same code as the notify function")
    wxv.add_argument("--headers", required=True, type=pathlib.Path, help="JSON file of the request headers")
    wxv.add_argument("--body", required=True, type=pathlib.Path, help="file with the exact raw body")
    wxv.add_argument("--apiv3-key", required=True, help="the 32-character APIv3 key, or @FILE")
    wxv.add_argument("--platform-cert", action="append", default=[], type=pathlib.Path)
    wxv.add_argument("--public-key", type=pathlib.Path)
    wxv.add_argument("--public-key-id")
    wxv.add_argument("--now", type=int, help="epoch seconds to judge the timestamp window by (default: now)")
    wxv.add_argument("--json", action="store_true")
    wxv.set_defaults(run=verify_wechatpay)
    return p


def _target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", action="store_true", help="talk to the stack `make run` started")
    p.add_argument("--stack", default="tally", help="deployed CloudFormation stack name (default: tally)")


def _connect(args: argparse.Namespace) -> dict[str, Any]:
    return use_local() if args.local else use_deployed(args.stack)


def _secret_arg(value: str) -> str:
    return pathlib.Path(value[1:]).read_text().strip() if value.startswith("@") else value


def merchant_add(args: argparse.Namespace) -> int:
    state = _connect(args)
    from tally import bootstrap

    if bool(args.public_key) != bool(args.public_key_id):
        raise ValueError("--public-key and --public-key-id go together")
    if not args.platform_cert and not args.public_key:
        raise ValueError("give --platform-cert PEM or --public-key PEM --public-key-id ID")
    notify_url = args.notify_url or f"{state['api_url'].rstrip('/')}/notify/wechatpay/{args.mchid}"
    row = bootstrap.merchants().add_wechatpay(
        mchid=args.mchid, apiv3_key=_secret_arg(args.apiv3_key), merchant_key_pem=args.merchant_key.read_text(),
        merchant_serial=args.merchant_serial, appid=args.appid, notify_url=notify_url,
        platform_certs=[p.read_text() for p in args.platform_cert],
        public_key=args.public_key.read_text() if args.public_key else None, public_key_id=args.public_key_id,
        tenant=args.tenant,
    )
    print(f"merchant wechatpay/{args.mchid} saved (credentials in Secrets Manager as {row['secret_name']})")
    print(f"notify_url: {notify_url}")
    return 0


def order_show(args: argparse.Namespace) -> int:
    _connect(args)
    from tally import bootstrap

    view = bootstrap.order_service().show(args.mchid, args.out_trade_no)
    if args.json:
        print(json.dumps(view, ensure_ascii=False, indent=2))
        return 0
    print(render_order(view))
    return 0


def render_order(view: dict[str, Any]) -> str:
    from tally.domain.money import format_cents

    lines = [
        f"order {view['mchid']}/{view['out_trade_no']}  {view['status']}",
        f"  amount   {format_cents(view['amount_cent'])} {view['currency']}   paid {format_cents(view.get('paid_cent', 0))}"
        f"   refundable {format_cents(view.get('refundable_cent', 0))}",
        f"  transaction_id {view.get('transaction_id') or '-'}   created {view.get('created_at')}   "
        f"expires {view.get('expire_at')}",
        "  transitions:",
    ]
    lines += [f"    {t['at']}  {t['from_status']} --{t['event']}--> {t['to_status']}  ({t['source']})"
              for t in view["transitions"]] or ["    (none)"]
    lines.append("  raw notifications (handled: 0 pending, 1 booked, 2 with a person):")
    lines += [f"    {r['pk']}  handled={r['handled']}  {r.get('outcome') or r.get('manual_reason') or ''}"
              f"  paid {format_cents(r['paid_cent'])} of {format_cents(r['order_total_cent'])}  via {r['source']}"
              for r in view["raw"]] or ["    (none)"]
    return "\n".join(lines)


def verify_wechatpay(args: argparse.Namespace) -> int:
    """Exit 0 with the decrypted resource; exit 1 with the reason (the notify function's own code)."""
    import time

    from tally.channels import wechatpay_v3 as wx

    headers = {str(k).lower(): str(v) for k, v in json.loads(args.headers.read_text()).items()}
    body = args.body.read_bytes()
    try:
        keys = wx.PlatformKeys.from_pems([p.read_text() for p in args.platform_cert],
                                         args.public_key.read_text() if args.public_key else None,
                                         args.public_key_id)
        serial = wx.verify_signed(headers, body, keys, args.now if args.now is not None else time.time())
        resource = wx.open_resource(wx.parse_envelope(body), _secret_arg(args.apiv3_key).encode())
    except (wx.SignatureError, wx.DecryptError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        print(json.dumps({"ok": False, "reason": reason}) if args.json else f"FAILED: {reason}")
        return 1
    if args.json:
        print(json.dumps({"ok": True, "serial": serial, "resource": resource}, ensure_ascii=False))
    else:
        print(f"signature OK (serial {serial}); decrypted resource:")
        print(json.dumps(resource, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
