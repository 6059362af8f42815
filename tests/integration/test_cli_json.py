"""CLI conventions (docs/cli.md): every verb that has --json prints exactly ONE JSON document on stdout, log
lines go to stderr (and only with -v for info); `tally merchant list`; `refund create` refuses an accidental
second refund of the same order and amount within 10 minutes unless --again."""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import subprocess
import sys
import uuid

import pytest
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.observability import logger

from tally_cli import ledger as cli_ledger
from tally_cli import manual as cli_manual
from tally_cli import merchant as cli_merchant
from tally_cli import order as cli_order
from tally_cli import pending as cli_pending
from tally_cli import recon as cli_recon
from tally_cli import refund as cli_refund
from tally_cli.main import build_parser, main
from tests.integration.refund_helpers import paid_order

pytestmark = pytest.mark.usefixtures("days_of_2024")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BILLS = ROOT / "tests" / "fixtures" / "bills"
D = "2024-05-01"


def json_verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += json_verbs(sub, (*path, name))
    if any("--json" in a.option_strings for a in parser._actions):
        found.append(" ".join(path))
    return found


@pytest.fixture
def fresh_logger():
    """As in a fresh process: Powertools' logger writes to the stdout of the moment (pytest's capture here),
    unless main() redirects it; put back afterwards."""
    handler = logger.registered_handler
    before = handler.stream
    handler.stream = sys.stdout
    yield handler
    handler.stream = before


@pytest.fixture
def world(h, monkeypatch, tmp_path, fresh_logger):
    """A stack with something in every table a verb reads, and the files the offline verbs need."""
    from tally_cli import merchant_settlement as cli_settlement

    for module in (
        cli_merchant,
        cli_order,
        cli_refund,
        cli_pending,
        cli_manual,
        cli_recon,
        cli_ledger,
        cli_settlement,
    ):
        monkeypatch.setattr(module, "connect", lambda args: {"env": h.env, "api_url": "http://127.0.0.1:9"})
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn, _ = paid_order(h, m["mchid"], amount=500)
    missed = []
    for _ in range(2):  # two payments the channel has and we never heard of: two recon diffs
        lost = f"J{random.randrange(10**15, 10**16)}"
        assert h.create_order(m["mchid"], lost, amount_cent=120, prepay=True)["statusCode"] == 201
        missed.append(h.sim.pay(m["mchid"], lost, drop=True, success_time=f"{D}T10:00:00+08:00"))
    resource = h.sim.transaction_resource(m["mchid"], "JSON-VERIFY-1", 250)
    headers, body = h.sim.build_notification(m["mchid"], resource)
    (tmp_path / "headers.json").write_text(json.dumps(headers))
    (tmp_path / "body.json").write_bytes(body)
    (tmp_path / "pub.pem").write_text(h.sim.public_key_pem)
    ali = h.sim.alipay.register_test_merchant("public_key")
    (tmp_path / "ali.body").write_bytes(
        h.sim.alipay.build_notification(h.sim.alipay.notification_params(ali["app_id"], "JSON-A-1", 100))
    )
    (tmp_path / "ali.pem").write_text(ali["alipay_public_key_pem"])
    v2 = h.sim.wechatpay_v2.register_test_merchant()
    (tmp_path / "v2.body").write_bytes(
        h.sim.wechatpay_v2.build_notification(
            h.sim.wechatpay_v2.payment_params(v2["mch_id"], "JSON-V2-1", 90)
        )
    )
    odd = f"J{random.randrange(10**15, 10**16)}"  # an amount mismatch: one item in the work queue
    assert h.create_order(m["mchid"], odd, amount_cent=300)["statusCode"] == 201
    headers, body, _ = h.notification(m["mchid"], odd, total=30)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    return {"m": m, "otn": otn, "missed": missed, "tmp": tmp_path, "v2_key": v2["api_key"], "sim": h.sim}


def test_every_json_verb_prints_exactly_one_json_document_and_logs_only_on_stderr(world, capsys):
    m, otn, tmp = world["m"]["mchid"], world["otn"], world["tmp"]
    refund_no = f"RJ{uuid.uuid4().hex[:20]}"
    day = ["--channel", "wechatpay", "--mchid", m, "--date", D]
    assert main(["manual", "list", "--json", "--local"]) in (0, 3)
    item = json.loads(capsys.readouterr().out)["items"][0]["id"]
    bulk = ["--filter", f"merchant={m}", "--dry-run", "--by", "j", "--why", "json"]  # changes nothing
    runs = {
        "manual show": ["manual", "show", item],
        "manual ack": ["manual", "ack", *bulk],
        "manual resolve": ["manual", "resolve", *bulk, "--code", "junk"],
        "manual ignore": ["manual", "ignore", *bulk],
        "manual replay": ["manual", "replay", *bulk],
        "manual refund-outcome": ["manual", "refund-outcome", *bulk, "--outcome", "SUCCESS"],
        "manual close-task": ["manual", "close-task", *bulk, "--code", "refunded-at-channel"],
        "manual refund-now": ["manual", "refund-now", *bulk],
        "manual accept-amount": ["manual", "accept-amount", *bulk],
        "manual abnormal-refund": ["manual", "abnormal-refund", *bulk, "--to", "merchant-bank-card"],
        "merchant list": ["merchant", "list"],
        "merchant allow": ["merchant", "allow", "arn:aws:iam::123456789012:role/shop", m],
        "merchant principals": ["merchant", "principals"],
        "merchant disallow": ["merchant", "disallow", "arn:aws:iam::123456789012:role/shop"],
        "merchant check": ["merchant", "check", "wechatpay", m],
        "merchant show": ["merchant", "show", "wechatpay", m],
        "merchant update": [
            "merchant",
            "update",
            "wechatpay",
            m,
            "--settlement-lag",
            '{"settlement_days": 1}',
        ],
        "order show": ["order", "show", m, otn],
        "order story": ["order", "story", m, otn, "--raw"],
        "find": ["find", otn],
        "verify wechatpay": [
            "verify",
            "wechatpay",
            "--headers",
            str(tmp / "headers.json"),
            "--body",
            str(tmp / "body.json"),
            "--apiv3-key",
            world["m"]["apiv3_key"],
            "--public-key",
            str(tmp / "pub.pem"),
            "--public-key-id",
            "PUB_KEY_ID_0000000000000000000",  # wrong id: the FAILED answer must be one document too
        ],
        "verify alipay": [
            "verify",
            "alipay",
            "--body",
            str(tmp / "ali.body"),
            "--alipay-public-key",
            str(tmp / "ali.pem"),
        ],
        "verify wechatpay-v2": [
            "verify",
            "wechatpay-v2",
            "--body",
            str(tmp / "v2.body"),
            "--api-key",
            world["v2_key"],
        ],
        "refund create": ["refund", "create", m, otn, "100", "--refund-no", refund_no, "--reason", "json"],
        "refund show": ["refund", "show", refund_no],
        "refund list": ["refund", "list", m, otn],
        "pending": ["pending"],
        "manual list": ["manual", "list"],
        "recon run": ["recon", "run", *day],
        "recon show": ["recon", "show", *day],
        "recon diffs": ["recon", "diffs", *day],
        "recon resolve": [
            "recon",
            "resolve",
            *day,
            f"PAYMENT#wechatpay#{world['missed'][0]}",
            "--by",
            "j",
            "--note",
            "n",
        ],
        "diff resolve": [
            "diff",
            "resolve",
            *day,
            f"PAYMENT#wechatpay#{world['missed'][1]}",
            "--by",
            "j",
            "--note",
            "n",
            "--ignore",
        ],
        "diff list": ["diff", "list"],
        "bill parse": ["bill", "parse", "wechatpay", str(BILLS / "wechat_all_bom_crlf.csv")],
        "bill layout add": ["bill", "layout", "add", _mapping_file(tmp), "--by", "j", "--dry-run"],
        "ledger day": ["ledger", "day", D],
        "ledger backfill-settlement": [
            "ledger",
            "backfill-settlement",
            "--channel",
            "wechatpay",
            "--from",
            D,
            "--dry-run",
        ],
        # in-process moto has no console pool (create_from_template leaves it out): the refusal is one document
        "console add-user": ["console", "add-user", "dana", "--group", "viewers"],
        # docs/alerts.md: a destination on a closed port (test: a failed card, still one document)
        "alerts add": [
            "alerts",
            "add",
            "json-ops",
            "--kind",
            "slack",
            "--url",
            "http://127.0.0.1:9/services/T/B/X",
        ],
        "alerts list": ["alerts", "list"],
        "alerts snooze": ["alerts", "snooze", "json-ops", "--minutes", "0"],
        "alerts test": ["alerts", "test", "json-ops"],
        "alerts log": ["alerts", "log"],
        "alerts remove": ["alerts", "remove", "json-ops"],
        "incidents list": ["incidents", "list"],
        "incidents show": ["incidents", "show", "inc-none"],
        # docs/audit.md: a past day with no journal (nothing to seal; verify says so in one document)
        "audit seal": ["audit", "seal", "--day", D],
        "audit export": ["audit", "export", "--day", D, "--out", str(tmp / "audit")],
        "audit verify": ["audit", "verify", "--day", D],
    }
    assert set(runs) == set(json_verbs(build_parser())), "a verb with --json is missing from this test"
    offline = {"verify wechatpay", "verify alipay", "verify wechatpay-v2", "bill parse"}
    for verb, argv in runs.items():
        for verbose in (["-v"], []):
            capsys.readouterr()
            code = main([*verbose, *argv, "--json", *([] if verb in offline else ["--local"])])
            out, err = capsys.readouterr()
            try:
                json.loads(out)
            except ValueError as exc:
                pytest.fail(
                    f"tally {verb} --json (exit {code}) printed not one JSON document: {exc}\n{out[:600]}"
                )
            if verb == "refund create" and verbose:
                assert '"level":"INFO"' in err  # -v: info lines, on stderr only
            if not verbose:
                assert '"level":"INFO"' not in err  # WARNING and up unless -v


def _mapping_file(tmp) -> str:
    """A reviewed mapping of the ALL layout with one column added (tally bill layout add)."""
    from tally.channels.bill_layouts import known

    base = known("wechatpay")[0]
    path = tmp / "mapping.json"
    mapping = {
        "channel": "wechatpay",
        "base": base.kind,
        "header": [*base.shape.header, "新列"],
        "summary": [list(s) for s in base.shape.summary],
    }
    path.write_text(json.dumps(mapping, ensure_ascii=False))
    return str(path)


def test_human_output_has_no_log_lines_and_prints_yuan(world, capsys):
    m, otn = world["m"]["mchid"], world["otn"]
    assert (
        main(["refund", "create", m, otn, "123", "--refund-no", f"RH{uuid.uuid4().hex[:20]}", "--local"]) == 0
    )
    out = capsys.readouterr().out
    assert "¥1.23" in out and '"level"' not in out


def test_a_fresh_process_keeps_stdout_for_the_document(tmp_path):
    """The real entry point, in its own process (Powertools' logger built on the process's stdout)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tally_cli.main",
            "-v",
            "bill",
            "parse",
            "wechatpay",
            str(BILLS / "wechat_all_bom_crlf.csv"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "PASSED"
    bad = subprocess.run(
        [sys.executable, "-m", "tally_cli.main", "ledger", "day", "2024-02-30", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "calendar day" in bad.stderr
    assert json.loads(bad.stdout) == {
        "ok": False,
        "error": "date '2024-02-30' is not a calendar day",
        "exit": 2,
    }


def test_merchant_list_shows_mode_provider_and_expiry_never_a_secret(world, h, capsys):
    m = world["m"]
    sub = str(random.randrange(10**9, 10**10))
    from tally import bootstrap

    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid=sub, sp_mchid=m["mchid"])
    assert main(["merchant", "list", "--json", "--local"]) == 0
    out = capsys.readouterr().out
    rows = {r["id"]: r for r in json.loads(out)["merchants"]}
    assert rows[m["mchid"]]["mode"] == "direct" and rows[m["mchid"]]["channel"] == "wechatpay"
    assert rows[m["mchid"]]["cert_expiry"].endswith("+08:00")  # the platform certificate's not-after
    assert rows[sub]["mode"] == "partner" and rows[sub]["provider"] == m["mchid"]
    assert m["apiv3_key"] not in out and "PRIVATE KEY" not in out
    assert main(["merchant", "list", "--local"]) == 0
    human = capsys.readouterr().out
    assert sub in human and "partner" in human and m["apiv3_key"] not in human


def test_refund_create_without_refund_no_refuses_a_repeat_within_10_minutes_unless_again(world, h, capsys):
    m, otn = world["m"]["mchid"], world["otn"]
    assert main(["refund", "create", m, otn, "50", "--reason", "first", "--local"]) == 0
    first = capsys.readouterr().out
    assert first.startswith("created refund ")
    earlier = first.split()[2]
    # the person saw a timeout and runs the same line again: refused, naming the earlier refund
    assert main(["refund", "create", m, otn, "50", "--reason", "first", "--local"]) == 1
    out = capsys.readouterr().out
    assert earlier in out and "--again" in out and "¥0.50" in out
    refunds = lambda: [r for r in h.scan("REFUNDS_TABLE") if r.get("out_trade_no") == otn]  # noqa: E731
    assert len(refunds()) == 1
    assert main(["refund", "create", m, otn, "60", "--local"]) == 0  # another amount is another refund
    capsys.readouterr()
    assert main(["refund", "create", m, otn, "50", "--again", "--local"]) == 0  # said on purpose
    capsys.readouterr()
    assert len(refunds()) == 3


def test_r42_every_reading_verb_writes_nothing_and_asks_no_channel(world, monkeypatch, capsys):
    """show / story / list / day / diffs / pending: Query, GetItem and GetSecretValue only, and not one request to
    the channel (R42)."""
    import boto3
    from tally import bootstrap

    m, otn = world["m"]["mchid"], world["otn"]
    seen: list[str] = []
    original = boto3.client

    def client(*a, **kw):
        c = original(*a, **kw)
        c.meta.events.register("before-call.*.*", lambda model, **_: seen.append(model.name))
        return c

    monkeypatch.setattr(boto3, "client", client)
    bootstrap.reset()
    requests_before = len(world["sim"].requests)
    day = ["--channel", "wechatpay", "--mchid", m, "--date", D]
    for argv in (
        ["order", "show", m, otn],
        ["order", "story", m, otn, "--raw"],
        ["refund", "list", m, otn],
        ["merchant", "list"],
        ["pending"],
        ["manual", "list"],
        ["recon", "show", *day],
        ["recon", "diffs", *day],
        ["diff", "list"],
        ["ledger", "day", D],
    ):
        assert main([*argv, "--json", "--local"]) == 0, argv
        json.loads(capsys.readouterr().out)
    assert seen and set(seen) <= {"Query", "GetItem", "GetSecretValue", "Scan"}, set(seen)
    assert seen.count("Scan") <= 2  # the merchants table (small configuration): merchant list, ledger day
    assert len(world["sim"].requests) == requests_before  # not one request to the channel
