"""`tally merchant add`: channel credentials into Secrets Manager, the merchant row into DynamoDB."""

from __future__ import annotations

import argparse
import pathlib

from tally.cli.common import add_target, connect, secret_arg


def register(sub: argparse._SubParsersAction) -> None:
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
    add_target(add)
    add.set_defaults(run=merchant_add)


def merchant_add(args: argparse.Namespace) -> int:
    if bool(args.public_key) != bool(args.public_key_id):
        raise ValueError("--public-key and --public-key-id go together")
    if not args.platform_cert and not args.public_key:
        raise ValueError("give --platform-cert PEM or --public-key PEM --public-key-id ID")
    state = connect(args)
    from tally import bootstrap

    notify_url = args.notify_url or f"{state['api_url'].rstrip('/')}/notify/wechatpay/{args.mchid}"
    row = bootstrap.merchants().add_wechatpay(
        mchid=args.mchid, apiv3_key=secret_arg(args.apiv3_key), merchant_key_pem=args.merchant_key.read_text(),
        merchant_serial=args.merchant_serial, appid=args.appid, notify_url=notify_url,
        platform_certs=[p.read_text() for p in args.platform_cert],
        public_key=args.public_key.read_text() if args.public_key else None, public_key_id=args.public_key_id,
        tenant=args.tenant,
    )
    print(f"merchant wechatpay/{args.mchid} saved (credentials in Secrets Manager as {row['secret_name']})")
    print(f"notify_url: {notify_url}")
    return 0
