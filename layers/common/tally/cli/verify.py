"""`tally verify CHANNEL`: the notify function's own verify/decrypt code, offline."""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from tally.cli.common import secret_arg


def register(sub: argparse._SubParsersAction) -> None:
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


def verify_wechatpay(args: argparse.Namespace) -> int:
    """Exit 0 with the decrypted resource; exit 1 with the reason."""
    from tally.channels import wechatpay_v3 as wx

    headers = {str(k).lower(): str(v) for k, v in json.loads(args.headers.read_text()).items()}
    body = args.body.read_bytes()
    try:
        keys = wx.PlatformKeys.from_pems([p.read_text() for p in args.platform_cert],
                                         args.public_key.read_text() if args.public_key else None,
                                         args.public_key_id)
        serial = wx.verify_signed(headers, body, keys, args.now if args.now is not None else time.time())
        resource = wx.open_resource(wx.parse_envelope(body), secret_arg(args.apiv3_key).encode())
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
