"""`tally merchant add|check|list` (and allow|disallow|principals: tally_cli/principals.py): channel credentials into Secrets Manager, the merchant row into DynamoDB;
the configured merchants with their mode and certificate expiry (never a secret)."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from tally.channels import registry as channel_registry
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.i18n import N_
from tally.service.merchants import list_merchants

from tally_cli import merchant_settlement, principals
from tally_cli.common import add_json, add_target, connect, emit, secret_arg
from tally_cli.speak import _, fault, pad


def register(sub: argparse._SubParsersAction) -> None:
    merchant = sub.add_parser("merchant", help=_("configure merchants")).add_subparsers(metavar="ACTION")
    add = merchant.add_parser("add", help=_("add or update a merchant's channel credentials")).add_subparsers(
        metavar="CHANNEL"
    )

    wx = add.add_parser(
        "wechatpay", help=_("WeChat Pay API v3 (direct merchant, service provider or sub-merchant)")
    )
    wx.add_argument("--mchid", required=True)
    wx.add_argument("--appid", default="", help=_("the appid orders are created with"))
    wx.add_argument("--apiv3-key", help=_("the 32-character APIv3 key, or @FILE to read it"))
    wx.add_argument("--merchant-key", type=pathlib.Path, help=_("merchant API private key PEM file"))
    wx.add_argument("--merchant-serial", help=_("serial of the merchant API certificate"))
    wx.add_argument(
        "--platform-cert",
        action="append",
        default=[],
        type=pathlib.Path,
        help=_("WeChat Pay platform certificate PEM (repeatable)"),
    )
    wx.add_argument("--public-key", type=pathlib.Path, help=_("WeChat Pay public key PEM (public-key mode)"))
    wx.add_argument("--public-key-id", help=_("its id, PUB_KEY_ID_…"))
    wx.add_argument(
        "--sp-mchid",
        help=_(
            "service-provider mode: this mchid is a sub-merchant of SP_MCHID (no keys: the provider's act)"
        ),
    )
    wx.add_argument("--notify-url", help=_("callback URL given to the channel (default: this stack's API)"))
    wx.add_argument("--tenant", help=_("tenant id (default: the mchid)"))
    add_target(wx)
    _no_check(wx)
    merchant_settlement.flags(wx)  # R45
    _name_flag(wx)
    wx.set_defaults(run=_named(merchant_add, "wechatpay", "mchid"))

    ali = add.add_parser(
        "alipay", help=_("Alipay (public-key or certificate mode, or app_auth_token sub-merchant)")
    )
    ali.add_argument("--app-id", required=True)
    ali.add_argument("--app-private-key", type=pathlib.Path, help=_("the app's RSA2 private key PEM file"))
    ali.add_argument(
        "--alipay-public-key", type=pathlib.Path, help=_("Alipay public key PEM (public-key mode)")
    )
    ali.add_argument(
        "--alipay-cert", type=pathlib.Path, help=_("alipayCertPublicKey_RSA2.crt (certificate mode)")
    )
    ali.add_argument("--app-cert", type=pathlib.Path, help=_("appCertPublicKey.crt (certificate mode)"))
    ali.add_argument("--root-cert", type=pathlib.Path, help=_("alipayRootCert.crt (certificate mode)"))
    ali.add_argument(
        "--sp-app-id", help=_("this merchant authorised the provider app SP_APP_ID (app_auth_token)")
    )
    ali.add_argument("--app-auth-token", help=_("the app_auth_token, or @FILE (with --sp-app-id)"))
    ali.add_argument("--notify-url", help=_("callback URL (default: this stack's /notify/alipay/{app_id})"))
    ali.add_argument("--tenant")
    add_target(ali)
    _no_check(ali)
    merchant_settlement.flags(ali)  # R45
    _name_flag(ali)
    ali.set_defaults(run=_named(merchant_add_alipay, "alipay", "app_id"))

    v2 = add.add_parser("wechatpay-v2", help=_("WeChat Pay API v2 (legacy XML callbacks)"))
    v2.add_argument("--mchid", required=True)
    v2.add_argument("--api-key", required=True, help=_("the 32-character API (v2) key, or @FILE"))
    v2.add_argument("--appid", default="")
    v2.add_argument(
        "--notify-url", help=_("callback URL (default: this stack's /notify/wechatpay-v2/{mchid})")
    )
    v2.add_argument("--tenant")
    v2.add_argument(
        "--client-cert", type=pathlib.Path, help=_("apiclient_cert.pem: refunds need it (mutual TLS)")
    )
    v2.add_argument("--client-key", type=pathlib.Path, help=_("apiclient_key.pem, with --client-cert"))
    v2.add_argument(
        "--bill-source",
        choices=("v2", "v3"),
        help=_(
            "the trade bill recon downloads: v2 /pay/downloadbill, or v3's (needs the v3 record too; R44)"
        ),
    )
    add_target(v2)
    _no_check(v2)
    merchant_settlement.flags(v2)  # R45
    _name_flag(v2)
    v2.set_defaults(run=_named(merchant_add_v2, "wechatpay-v2", "mchid"))

    cert = merchant.add_parser(
        "add-cert", help=_("rotation: add Alipay's new certificate next to the old ones")
    )
    cert.add_argument("channel", choices=["alipay"])
    cert.add_argument("merchant_id", help=_("the Alipay app_id"))
    cert.add_argument("certificate", type=pathlib.Path, help=_("the new alipayCertPublicKey_RSA2.crt"))
    add_target(cert)
    cert.set_defaults(run=merchant_add_cert)

    listing = merchant.add_parser(
        "list", help=_("configured merchants: channel, id, mode, provider, certificate expiry (no secret)")
    )
    add_json(listing)
    add_target(listing)
    listing.set_defaults(run=merchant_list)

    check = merchant.add_parser("check", help=_("prove a stored merchant configuration works"))
    check.add_argument("channel", choices=[c.route for c in channel_registry.all_channels()])
    check.add_argument("merchant_id", help=_("mchid or Alipay app_id"))
    add_json(check)
    check.add_argument(
        "--live",
        action="store_true",
        help=_(
            "R47: harmless signed calls to the channel; a failure names the wrong credential and marks the "
            "merchant not ready (orders refused with 409) until a check passes"
        ),
    )
    add_target(check)
    check.set_defaults(run=merchant_check)
    named = merchant.add_parser("set", help=_("set a merchant's display name (what people call it)"))
    named.add_argument("channel", choices=[c.route for c in channel_registry.all_channels()])
    named.add_argument("merchant_id", help=_("mchid or Alipay app_id"))
    _name_flag(named, required=True)
    add_target(named)
    named.set_defaults(run=merchant_set)
    merchant_settlement.register(merchant)  # update, show (R45)
    principals.register(merchant)  # allow, disallow, principals (R53)


def _no_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-check", action="store_true", help=_("skip the live credential check after saving (R47)")
    )


def _check_after_add(args: argparse.Namespace, route: str, merchant_id: str) -> None:
    """R47: a saved merchant is checked live at once; a failure marks it not ready and says why. The add
    itself succeeded (its exit status is 0): the readiness is what gates its orders."""
    if getattr(args, "no_check", False):
        return
    from tally import bootstrap
    from tally.service.merchants import live_check

    print(render_live(live_check(bootstrap.merchants(), route, merchant_id)))


def render_live(report: dict[str, Any]) -> str:
    """One line per call, then the readiness: what a person reads after `check --live` or `add`."""
    lines = [_("live check %(channel)s/%(id)s:") % {"channel": report["channel"], "id": report["merchant"]}]
    for f in report["findings"]:
        line = f"{_verdict(f['verdict'])} {f['check']}"
        if f["item"]:
            line += f"\n     {f['item']}"
        if f["fix"]:
            line += "\n     " + _("fix: %(fix)s") % {"fix": f["fix"]}
        if f["detail"]:
            line += f"\n     ({f['detail']})"
        lines.append(line)
    if report["verdict"] == "pass":
        lines.append(_("ready: orders are taken"))
    elif report["verdict"] == "fail":
        lines.append(_("NOT READY: POST /orders answers 409 until `tally merchant check --live` passes"))
    elif report["ready"] is False:
        lines.append(_("could not check: readiness unchanged (not ready)"))
    else:
        lines.append(_("could not check: readiness unchanged (ready)"))
    return "\n".join(lines)


VERDICTS = {"pass": N_("OK"), "fail": N_("FAIL"), "unknown": N_("??")}


def _verdict(verdict: str) -> str:
    """A check's verdict in four terminal columns (OK, FAIL, ??), so the check names line up."""
    return pad(_(VERDICTS[verdict]), 4)


def _directory(bootstrap: Any) -> Any:
    """The merchant directory, its changes journaled as this CLI caller's (docs/audit.md)."""
    directory = bootstrap.merchants()
    directory.actor = principals.caller_name(None)
    return directory


def _notify_url(args: argparse.Namespace, state: dict, route: str, merchant_id: str) -> str:
    return args.notify_url or f"{state['api_url'].rstrip('/')}/notify/{route}/{merchant_id}"


def merchant_add(args: argparse.Namespace) -> int:
    if args.sp_mchid:
        state = connect(args)
        from tally import bootstrap

        row = wechatpay_v3_desk(_directory(bootstrap)).add_wechatpay_partner(
            sub_mchid=args.mchid, sp_mchid=args.sp_mchid, sub_appid=args.appid, tenant=args.tenant
        )
        print(
            _("merchant wechatpay/%(id)s saved as a sub-merchant of %(provider)s")
            % {"id": args.mchid, "provider": args.sp_mchid}
        )
        print(_("notify_url: %(url)s (the provider's)") % {"url": row["notify_url"]})
        return 0
    if not (args.apiv3_key and args.merchant_key and args.merchant_serial):
        raise fault(ValueError, N_("give --apiv3-key, --merchant-key and --merchant-serial (or --sp-mchid)"))
    if bool(args.public_key) != bool(args.public_key_id):
        raise fault(ValueError, N_("--public-key and --public-key-id go together"))
    if not args.platform_cert and not args.public_key:
        raise fault(ValueError, N_("give --platform-cert PEM or --public-key PEM --public-key-id ID"))
    state = connect(args)
    from tally import bootstrap

    notify_url = _notify_url(args, state, "wechatpay", args.mchid)
    row = wechatpay_v3_desk(_directory(bootstrap)).add_wechatpay(
        mchid=args.mchid,
        apiv3_key=secret_arg(args.apiv3_key),
        merchant_key_pem=args.merchant_key.read_text(),
        merchant_serial=args.merchant_serial,
        appid=args.appid,
        notify_url=notify_url,
        platform_certs=[p.read_text() for p in args.platform_cert],
        public_key=args.public_key.read_text() if args.public_key else None,
        public_key_id=args.public_key_id,
        tenant=args.tenant,
    )
    print(_saved("wechatpay", args.mchid, row["secret_name"]))
    print(_("notify_url: %(url)s") % {"url": notify_url})
    merchant_settlement.after_add(args, "wechatpay", args.mchid)
    _check_after_add(args, "wechatpay", args.mchid)
    return 0


def merchant_add_cert(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    row = alipay_desk(_directory(bootstrap)).add_alipay_certificate(
        app_id=args.merchant_id, alipay_cert=args.certificate.read_text()
    )
    print(
        _("merchant alipay/%(id)s: Alipay certificates %(serials)s (several valid at once)")
        % {"id": args.merchant_id, "serials": ", ".join(row["alipay_cert_sns"])}
    )
    return 0


def merchant_add_alipay(args: argparse.Namespace) -> int:
    if args.sp_app_id:
        if not args.app_auth_token:
            raise fault(ValueError, N_("--sp-app-id needs --app-auth-token"))
        state = connect(args)
        from tally import bootstrap

        row = alipay_desk(_directory(bootstrap)).add_alipay_sub(
            app_id=args.app_id,
            sp_app_id=args.sp_app_id,
            app_auth_token=secret_arg(args.app_auth_token),
            tenant=args.tenant,
        )
        print(
            _("merchant alipay/%(id)s saved: acts through provider app %(provider)s")
            % {"id": args.app_id, "provider": args.sp_app_id}
        )
        print(_("notify_url: %(url)s (the provider's)") % {"url": row["notify_url"]})
        return 0
    cert_mode = [args.alipay_cert, args.app_cert, args.root_cert]
    if not args.app_private_key:
        raise fault(ValueError, N_("give --app-private-key PEM"))
    if any(cert_mode) and not all(cert_mode):
        raise fault(
            ValueError, N_("certificate mode needs --alipay-cert, --app-cert and --root-cert together")
        )
    if not args.alipay_public_key and not all(cert_mode):
        raise fault(
            ValueError,
            N_("give --alipay-public-key PEM, or --alipay-cert CRT --app-cert CRT --root-cert CRT"),
        )
    state = connect(args)
    from tally import bootstrap

    notify_url = _notify_url(args, state, "alipay", args.app_id)

    def text(path: pathlib.Path | None) -> str | None:
        return path.read_text() if path else None

    row = alipay_desk(_directory(bootstrap)).add_alipay(
        app_id=args.app_id,
        app_private_key=args.app_private_key.read_text(),
        notify_url=notify_url,
        alipay_public_key=text(args.alipay_public_key),
        alipay_cert=text(args.alipay_cert),
        app_cert=text(args.app_cert),
        root_cert=text(args.root_cert),
        tenant=args.tenant,
    )
    print(
        _("merchant alipay/%(id)s saved (%(key_mode)s mode; credentials in Secrets Manager as %(secret)s)")
        % {"id": args.app_id, "key_mode": row["key_mode"], "secret": row["secret_name"]}
    )
    print(_("notify_url: %(url)s") % {"url": notify_url})
    merchant_settlement.after_add(args, "alipay", args.app_id)
    _check_after_add(args, "alipay", args.app_id)
    return 0


def merchant_add_v2(args: argparse.Namespace) -> int:
    state = connect(args)
    from tally import bootstrap

    notify_url = _notify_url(args, state, "wechatpay-v2", args.mchid)
    row = wechatpay_v2_desk(_directory(bootstrap)).add_wechatpay_v2(
        mchid=args.mchid,
        api_key=secret_arg(args.api_key),
        notify_url=notify_url,
        appid=args.appid,
        tenant=args.tenant,
        client_cert_pem=args.client_cert.read_text() if args.client_cert else None,
        client_key_pem=args.client_key.read_text() if args.client_key else None,
        bill_source=args.bill_source,
    )
    print(_saved("wechatpay-v2", args.mchid, row["secret_name"]))
    print(_("notify_url: %(url)s") % {"url": notify_url})
    merchant_settlement.after_add(args, "wechatpay-v2", args.mchid)
    _check_after_add(args, "wechatpay-v2", args.mchid)
    return 0


def _saved(route: str, merchant_id: str, secret: str) -> str:
    return _("merchant %(channel)s/%(id)s saved (credentials in Secrets Manager as %(secret)s)") % {
        "channel": route,
        "id": merchant_id,
        "secret": secret,
    }


def merchant_check(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes (a certificate expiring within 7 days fails). --live (R47): 0 pass,
    1 a credential fails (named, merchant marked not ready), 2 could not check (channel or network down)."""
    connect(args)
    from tally import bootstrap
    from tally.service.merchants import check_merchant

    if args.live:
        report = live_check_cli(bootstrap.merchants(), args.channel, args.merchant_id)
        emit(report, lambda: render_live(report), args)
        return {"pass": 0, "fail": 1}.get(report["verdict"], 2)

    checks = check_merchant(bootstrap.merchants(), args.channel, args.merchant_id)
    emit(
        {"ok": all(c["ok"] for c in checks), "checks": checks},
        lambda: "\n".join(
            f"{_verdict('pass' if c['ok'] else 'fail')} {c['check']}"
            + (f"  ({c['detail']})" if c["detail"] else "")
            for c in checks
        ),
        args,
    )
    return 0 if all(c["ok"] for c in checks) else 1


def live_check_cli(directory: Any, channel: str, merchant_id: str) -> dict[str, Any]:
    from tally.service.merchants import live_check

    return live_check(directory, channel, merchant_id)


# ------------------------------------------------------------------ merchant list


def merchant_list(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    rows = list_merchants(bootstrap.merchants())
    emit({"merchants": rows}, lambda: render_merchants(rows), args)
    return 0


def render_merchants(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return _("no merchants configured (tally merchant add …)")
    heading = [
        (N_("channel"), 13),
        (N_("id"), 20),
        (N_("mode"), 8),
        (N_("provider"), 20),
        (N_("key mode"), 11),
    ]
    lines = [" ".join(pad(_(label), columns) for label, columns in heading) + " " + _("certificate expiry")]
    for r in rows:
        expiry = r["cert_expiry"] or (
            "-" if not r.get("cert_error") else _("unknown (%(why)s)") % {"why": r["cert_error"]}
        )
        lines.append(
            f"{r['channel']:<13} {r['id']:<20} {r['mode']:<8} {r['provider'] or '-':<20} "
            f"{r['key_mode'] or '-':<11} {expiry}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------ display names


def _name_flag(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument(
        "--name",
        required=required,
        help=_("the merchant's display name, shown next to its id in the console"),
    )


def _named(add: Any, route: str, id_flag: str) -> Any:
    """`merchant add … --name NAME`: the add, then the name stored on the merchant's row."""

    def run(args: argparse.Namespace) -> int:
        done = int(add(args))
        if done == 0 and args.name:
            _store_name(route, getattr(args, id_flag), args.name)
        return done

    return run


def merchant_set(args: argparse.Namespace) -> int:
    connect(args)
    _store_name(args.channel, args.merchant_id, args.name)
    print(
        _("merchant %(channel)s/%(id)s: %(name)s")
        % {"channel": args.channel, "id": args.merchant_id, "name": args.name.strip()}
    )
    return 0


def _store_name(route: str, merchant_id: str, name: str) -> None:
    from tally import bootstrap
    from tally.store.tables import MerchantStore

    found = channel_registry.find(lambda c: c.route == route)
    if found is None or not name.strip():
        raise fault(ValueError, N_("give a channel and a non-empty --name"))
    MerchantStore(bootstrap.tables()).set_name(found.merchant_kind, merchant_id, name)
