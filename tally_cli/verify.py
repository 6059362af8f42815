"""`tally verify CHANNEL`: the notify function's own verify/decrypt code, offline."""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from tally.i18n import N_

from tally_cli.common import add_json, secret_arg
from tally_cli.speak import _, fault, money


def register(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser("verify", help=_("verify and decrypt a callback offline")).add_subparsers(
        metavar="CHANNEL"
    )
    wxv = verify.add_parser(
        "wechatpay", help=_("WeChat Pay v3 callback: the same code as the notify function")
    )
    wxv.add_argument(
        "--headers", required=True, type=pathlib.Path, help=_("JSON file of the request headers")
    )
    wxv.add_argument("--body", required=True, type=pathlib.Path, help=_("file with the exact raw body"))
    wxv.add_argument("--apiv3-key", required=True, help=_("the 32-character APIv3 key, or @FILE"))
    wxv.add_argument("--platform-cert", action="append", default=[], type=pathlib.Path)
    wxv.add_argument("--public-key", type=pathlib.Path)
    wxv.add_argument("--public-key-id")
    wxv.add_argument(
        "--now", type=int, help=_("epoch seconds to judge the timestamp window by (default: now)")
    )
    add_json(wxv)
    wxv.set_defaults(run=verify_wechatpay)

    ali = verify.add_parser(
        "alipay", help=_("Alipay notification (form body): the same code as the notify function")
    )
    ali.add_argument("--body", required=True, type=pathlib.Path, help=_("file with the exact raw form body"))
    ali.add_argument(
        "--alipay-public-key", type=pathlib.Path, help=_("Alipay public key PEM (public-key mode)")
    )
    ali.add_argument(
        "--alipay-cert", type=pathlib.Path, help=_("alipayCertPublicKey_RSA2.crt (certificate mode)")
    )
    ali.add_argument("--root-cert", type=pathlib.Path, help=_("alipayRootCert.crt (certificate mode)"))
    add_json(ali)
    ali.set_defaults(run=verify_alipay)

    v2 = verify.add_parser("wechatpay-v2", help=_("WeChat Pay v2 XML callback (payment or refund)"))
    v2.add_argument("--body", required=True, type=pathlib.Path, help=_("file with the exact raw XML body"))
    v2.add_argument("--api-key", required=True, help=_("the 32-character API key, or @FILE"))
    add_json(v2)
    v2.set_defaults(run=verify_wechatpay_v2)


def verify_wechatpay(args: argparse.Namespace) -> int:
    """Exit 0 with the decrypted resource; exit 1 with the reason."""
    from tally.channels.wechatpay_v3 import wire as wx

    headers = {str(k).lower(): str(v) for k, v in json.loads(args.headers.read_text()).items()}
    body = args.body.read_bytes()
    try:
        keys = wx.PlatformKeys.from_pems(
            [p.read_text() for p in args.platform_cert],
            args.public_key.read_text() if args.public_key else None,
            args.public_key_id,
        )
        serial = wx.verify_signed(headers, body, keys, args.now if args.now is not None else time.time())
        resource = wx.open_resource(wx.parse_envelope(body), secret_arg(args.apiv3_key).encode())
    except (wx.WeChatSignatureError, wx.DecryptError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        print(
            json.dumps({"ok": False, "reason": reason})
            if args.json
            else _("FAILED: %(why)s") % {"why": reason}
        )
        return 1
    if args.json:
        print(json.dumps({"ok": True, "serial": serial, "resource": resource}, ensure_ascii=False))
    else:
        print(_("signature OK (serial %(serial)s); decrypted resource:") % {"serial": serial})
        print(json.dumps(resource, ensure_ascii=False, indent=2))
    return 0


def _report(args: argparse.Namespace, ok: bool, payload: dict) -> int:
    if args.json:
        print(json.dumps({"ok": ok, **payload}, ensure_ascii=False))
    elif ok:
        notice = payload.get("notice") or {}
        if "order_total_cent" in notice:
            print(
                _("signature OK; %(outcome)s: order %(total)s, paid %(paid)s")
                % {
                    "outcome": payload.get("outcome"),
                    "total": money(notice["order_total_cent"]),
                    "paid": money(notice.get("paid_cent")),
                }
            )
        elif "refund_cent" in payload:
            print(_("signature OK; refund of %(amount)s") % {"amount": money(payload["refund_cent"])})
        print(_("normalised notification (machine fields in cents):"))
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(_("FAILED: %(why)s") % {"why": payload["reason"]})
    return 0 if ok else 1


def verify_alipay(args: argparse.Namespace) -> int:
    """Exit 0 with the normalised notification; exit 1 with the reason."""
    from dataclasses import asdict

    from tally.channels.alipay import wire as ali

    if not args.alipay_public_key and not (args.alipay_cert and args.root_cert):
        raise fault(ValueError, N_("give --alipay-public-key PEM, or --alipay-cert CRT --root-cert CRT"))
    try:
        keys = ali.AlipayKeys.from_pems(
            args.alipay_public_key.read_text() if args.alipay_public_key else None,
            [args.alipay_cert.read_text()] if args.alipay_cert else [],
            args.root_cert.read_text() if args.root_cert else None,
        )
        params = ali.parse_form(args.body.read_bytes())
        key = ali.verify_notification(params, keys)
        if ali.is_refund(params):
            return _report(
                args,
                True,
                {
                    "key": key,
                    "kind": "refund",
                    "trade_no": params.get("trade_no"),
                    "out_biz_no": params.get("out_biz_no"),
                    "refund_cent": ali.amount_cents(params, "refund_fee"),
                },
            )
        notice = ali.to_payment_notice(params)
    except (ali.FormError, ali.SignatureError, ali.ParseError, ValueError) as exc:
        return _report(args, False, {"reason": getattr(exc, "reason", None) or str(exc)})
    return _report(
        args,
        True,
        {
            "key": key,
            "kind": "payment",
            "outcome": _outcome("alipay", notice.trade_state),
            "notice": asdict(notice),
        },
    )


def verify_wechatpay_v2(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from tally.channels.wechatpay_v2 import wire as wx2

    api_key = secret_arg(args.api_key)
    try:
        params = wx2.parse_xml(args.body.read_bytes())
        if "req_info" in params:
            return _report(
                args, True, {"kind": "refund", "refund": wx2.decrypt_req_info(params["req_info"], api_key)}
            )
        algorithm = wx2.verify(params, api_key)
        notice = wx2.to_payment_notice(params)
    except (wx2.XmlError, wx2.SignatureError, wx2.ParseError) as exc:
        return _report(args, False, {"reason": getattr(exc, "reason", None) or str(exc)})
    return _report(
        args,
        True,
        {
            "sign_type": algorithm,
            "kind": "payment",
            "outcome": _outcome("wechatpay_v2", notice.trade_state),
            "notice": asdict(notice),
        },
    )


def _outcome(name: str, state: str) -> str:
    """The channel's state table, as the worker reads it (channels/registry.py)."""
    from tally.channels import registry

    found = registry.get(name).outcome_of(state)
    return found.value if found else "UNKNOWN (goes to a person)"
