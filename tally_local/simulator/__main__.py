"""``python -m tally_local.simulator``: run the channel simulator in the foreground.

python -m tally_local.simulator [--host 127.0.0.1] [--port 8089] [--time-scale 0.01] [--fixed-keys]
                                [--test-merchant public_key|certificate|mixed]
python -m tally_local.simulator sample --out-trade-no ORDER0001 --total 100   # print a signed callback
python -m tally_local.simulator regen-testkeys   # rewrite testkeys/ (changes every fixed serial!)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import signal
import threading

from . import _crypto as c
from .simulator import ChannelSimulator
from .wechatpay_v3 import TESTKEYS_DIR


def _serve(args: argparse.Namespace) -> None:
    sim = ChannelSimulator(args.host, args.port, args.time_scale, fixed_keys=args.fixed_keys).start()
    if args.test_merchant:
        m = sim.register_test_merchant(args.test_merchant)
        print(f"test merchant {m['mchid']} registered ({args.test_merchant})")
    print(
        f"channel simulator on {sim.url}  platform_serial={sim.platform_serial}  "
        f"public_key_id={sim.public_key_id}",
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    sim.stop()


def _sample(args: argparse.Namespace) -> None:
    """Deterministic-keyed (not byte-identical: fresh nonces/ids) signed TRANSACTION.SUCCESS callback."""
    sim = ChannelSimulator(fixed_keys=True, seed=args.seed)
    m = sim.register_test_merchant(args.verify_mode)
    resource = sim.transaction_resource(m["mchid"], args.out_trade_no, args.total)
    headers, body = sim.build_notification(m["mchid"], resource)
    print(
        json.dumps(
            {"headers": headers, "body": body.decode("utf-8"), "resource": resource},
            ensure_ascii=False,
            indent=2,
        )
    )


def _regen_testkeys(_: argparse.Namespace) -> None:
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    end = dt.datetime(2049, 12, 31, tzinfo=dt.UTC)
    for stem, cn in (
        ("platform", "Tally Simulator WeChat Pay Platform Certificate (TEST ONLY)"),
        ("platform2", "Tally Simulator WeChat Pay Platform Certificate #2 (TEST ONLY)"),
        ("merchant", "Tally Test Merchant API Certificate (TEST ONLY)"),
    ):
        key = c.new_rsa_key()
        cert = c.make_certificate(key, cn, not_before=start, not_after=end)
        (TESTKEYS_DIR / f"{stem}_key.pem").write_text(c.private_key_pem(key))
        (TESTKEYS_DIR / f"{stem}_cert.pem").write_text(c.certificate_pem(cert))
        if stem == "merchant":
            meta = {
                "mchid": "1900000109",
                "appid": "wxd678efh567hg6787",
                "apiv3_key": "TallyTestOnlyApiV3Key0123456789a",
                "merchant_serial": c.serial_hex(cert),
            }
            (TESTKEYS_DIR / "merchant.json").write_text(json.dumps(meta, indent=2) + "\n")
    key = c.new_rsa_key()
    (TESTKEYS_DIR / "pubkey_key.pem").write_text(c.private_key_pem(key))
    (TESTKEYS_DIR / "pubkey.pem").write_text(c.public_key_pem(key.public_key()))
    (TESTKEYS_DIR / "pub_key_id.txt").write_text("PUB_KEY_ID_0114000000000000000000000000000001\n")
    print(f"wrote {TESTKEYS_DIR}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tally_local.simulator")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8089)
    p.add_argument("--time-scale", type=float, default=0.01)
    p.add_argument("--fixed-keys", action="store_true")
    p.add_argument("--test-merchant", choices=("public_key", "certificate", "mixed"))
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("sample", help="print a signed TRANSACTION.SUCCESS callback for the test merchant")
    s.add_argument("--out-trade-no", default="TALLYSAMPLE0001")
    s.add_argument("--total", type=int, default=100)
    s.add_argument("--verify-mode", default="public_key", choices=("public_key", "certificate"))
    s.add_argument("--seed", type=int, default=None)
    sub.add_parser("regen-testkeys", help="regenerate testkeys/ (TEST ONLY keys)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    {"sample": _sample, "regen-testkeys": _regen_testkeys}.get(args.cmd or "", _serve)(args)


if __name__ == "__main__":
    main()
