"""Issue #36 on the embedded stack (moto's DynamoDB, KMS and S3 Object Lock): a day's journal sealed by the
SealFunction, exported by `tally audit export`, verified OFFLINE in a fresh process; each tamper named."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from botocore.exceptions import ClientError
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.domain.journal import shanghai_day
from tally.store.audit import seal_key
from tally.store.codec import to_item

from tally_cli import audit as cli_audit
from tally_cli.main import main
from tests.integration.audit_helpers import change_ledger_amount, pay, seal_tomorrow

ROOT = pathlib.Path(__file__).resolve().parents[2]
OFFLINE = (
    "import socket, sys\n"
    "def _refuse(*a, **k):\n"
    "    raise OSError('offline: no network for an auditor')\n"
    "socket.socket.connect = _refuse\n"
    "socket.create_connection = _refuse\n"
    "from tally_cli.main import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


@pytest.fixture
def m(h, monkeypatch):
    monkeypatch.setattr(cli_audit, "connect", lambda args: {"env": h.env})
    return h.add_merchant()


@pytest.fixture
def sealed_day(h, m):
    """Three payments today, then tomorrow's seal run: the day is sealed (signed, locked)."""
    for amount in (101, 202, 303):
        pay(h, m["mchid"], amount)
    assert h.drain() == []
    day = shanghai_day(time.time())
    result = seal_tomorrow(h)
    # the three bookings and the merchant's configuration (its key change); the test principal's grant on the
    # deployment's own chain
    assert [(s["merchant"], s["records"]) for s in result["sealed"]] == [(m["mchid"], 4), ("tally", 1)]
    assert h.metric("AuditSealed") == 2
    return day


def export(day, folder):
    assert main(["audit", "export", "--day", day, "--out", str(folder), "--json"]) == 0
    return folder


def offline_verify(folder, *extra):
    """`tally audit verify --from DIR` in a fresh process: no AWS variable, every socket connect refused."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "HOME": str(folder),
    }
    assert not any(k.startswith("AWS") for k in env)
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE, "audit", "verify", "--from", str(folder), "--json", *extra],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def records(h):
    return {
        r["pk"] + "/" + str(r["seq"]): json.loads(r["record"])
        for r in h.scan("JOURNAL_TABLE")
        if r["sk"] != "head"
    }


def seal_today(h):
    day = shanghai_day(time.time())
    bootstrap.set_clock(lambda: time.time() + 86400)
    try:
        bootstrap.audit_service().seal_day(day)
    finally:
        bootstrap.set_clock(time.time)
    return day


def test_a_sealed_day_verifies_offline_in_a_fresh_process_with_only_the_export(h, m, sealed_day, tmp_path):
    folder = export(sealed_day, tmp_path / "export")
    assert (folder / "public_key.pem").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert len(list((folder / "evidence").iterdir())) == 3  # the three raw bodies, kept by hash
    code, verdict, err = offline_verify(folder)
    assert code == 0, (verdict, err)
    assert verdict["ok"] and verdict["records"] == 5 and verdict["merchants"] == {m["mchid"]: [], "tally": []}


def test_the_seal_is_locked_in_compliance_mode_and_cannot_be_deleted(h, m, sealed_day):
    s3 = bootstrap._client("s3")
    bucket = h.env["AUDIT_BUCKET"]
    key = seal_key(sealed_day, m["mchid"])
    (version,) = [v for v in s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]]
    with pytest.raises(ClientError) as refused:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError):
        s3.delete_object(
            Bucket=bucket, Key=key, VersionId=version["VersionId"], BypassGovernanceRetention=True
        )
    assert s3.get_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])["Body"].read()


def test_a_second_seal_run_rewrites_nothing(h, m, sealed_day):
    bootstrap.set_clock(lambda: time.time() + 86400)
    try:
        assert bootstrap.audit_service().seal_day(sealed_day) == []
    finally:
        bootstrap.set_clock(time.time)


def test_an_open_day_cannot_be_sealed(h, m):
    with pytest.raises(ValueError, match="has not closed"):
        bootstrap.audit_service().seal_day(shanghai_day(time.time()))


def test_a_changed_ledger_amount_fails_verify_naming_its_record(h, m, sealed_day, tmp_path):
    (entry, *_) = sorted(h.scan("LEDGER_TABLE"), key=lambda r: r["amount_cent"])
    change_ledger_amount(h, entry, 1)
    code, verdict, _ = offline_verify(export(sealed_day, tmp_path / "export"))
    assert code == 1 and not verdict["ok"]
    (finding,) = verdict["merchants"][m["mchid"]]
    name = next(n for n, r in records(h).items() if r["facts"].get("raw_key") == entry["pk"])
    assert finding.startswith(name + ":") and "amount_cent is 1, journaled 101" in finding


def test_a_deleted_order_history_line_fails_verify_naming_its_record(h, m, sealed_day, tmp_path):
    (line, *_) = h.scan("TRANSITIONS_TABLE")
    h.ddb.delete_item(TableName=h.env["TRANSITIONS_TABLE"], Key=to_item({"pk": line["pk"], "sk": line["sk"]}))
    code, verdict, _ = offline_verify(export(sealed_day, tmp_path / "export"))
    (finding,) = verdict["merchants"][m["mchid"]]
    name = next(n for n, r in records(h).items() if r["subject"] == line["pk"])
    assert code == 1 and finding.startswith(name + ":") and "is missing" in finding


def test_a_replaced_raw_body_fails_verify_naming_its_record(h, m, sealed_day, tmp_path):
    (raw, *_) = h.scan("NOTIFY_RAW_TABLE")
    h.ddb.update_item(
        TableName=h.env["NOTIFY_RAW_TABLE"],
        Key=to_item({"pk": raw["pk"]}),
        UpdateExpression="SET body = :b",
        ExpressionAttributeValues={":b": {"S": raw["body"].replace("SUCCESS", "REFUND")}},
    )
    code, verdict, _ = offline_verify(export(sealed_day, tmp_path / "export"))
    (finding,) = verdict["merchants"][m["mchid"]]
    name = next(n for n, r in records(h).items() if r["facts"].get("raw_key") == raw["pk"])
    assert code == 1 and finding.startswith(name + ":") and "not the body sealed" in finding


def test_a_rewritten_or_deleted_journal_record_fails_verify(h, m, sealed_day, tmp_path):
    table = h.env["JOURNAL_TABLE"]
    rows = sorted(
        (r for r in h.scan("JOURNAL_TABLE") if r["sk"] != "head"), key=lambda r: (r["pk"], r["seq"])
    )
    first = rows[0]
    record = json.loads(first["record"])
    record["facts"]["paid_cent"] = 1  # someone with write access edits the journal itself
    h.ddb.update_item(
        TableName=table,
        Key=to_item({"pk": first["pk"], "sk": first["sk"]}),
        UpdateExpression="SET #r = :r",
        ExpressionAttributeNames={"#r": "record"},
        ExpressionAttributeValues={":r": {"S": json.dumps(record)}},
    )
    code, verdict, _ = offline_verify(export(sealed_day, tmp_path / "one"))
    assert code == 1 and any(
        f.startswith(f"{first['pk']}/{first['seq']}:") and "changed after writing" in f
        for f in verdict["merchants"][m["mchid"]]
    )
    h.ddb.delete_item(TableName=table, Key=to_item({"pk": first["pk"], "sk": first["sk"]}))
    code, verdict, _ = offline_verify(export(sealed_day, tmp_path / "two"))
    assert code == 1 and verdict["merchants"][m["mchid"]]  # a gap, or a head/root that no longer matches


def test_a_forged_signature_or_another_key_fails_verify(h, m, sealed_day, tmp_path):
    folder = export(sealed_day, tmp_path / "export")
    seal_path = folder / m["mchid"] / "seal.json"
    seal = json.loads(seal_path.read_text())
    seal["payload"]["records"] = 2
    seal_path.write_text(json.dumps(seal))
    code, verdict, _ = offline_verify(folder)
    assert code == 1 and any("signature does not verify" in f for f in verdict["merchants"][m["mchid"]])


def test_verify_against_the_stack_reports_an_unsealed_day(h, m, capsys):
    pay(h, m["mchid"], 150)
    assert h.drain() == []
    capsys.readouterr()
    assert main(["audit", "verify", "--day", "today"]) == 1
    out = capsys.readouterr().out
    assert "the day is not sealed" in out and "NOT VERIFIED" in out


def test_the_daily_verifier_turns_a_tampered_day_into_a_case_and_an_alarmed_metric(h, m, sealed_day):
    """The tamper alarm: the seal run of the next day verifies the sealed days again; a changed entry is one
    case per merchant-day (kind audit-mismatch, naming the record) and AuditMismatch, which an alarm watches."""
    from tally.service.audit import CHECK_DAYS_BACK

    assert CHECK_DAYS_BACK[0] == 1
    bootstrap.set_clock(lambda: time.time() + 86400)
    try:
        clean = h.invoke(
            "SealFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
        )
        assert clean["sealed"] == [] and clean["not_verified"][sealed_day] == []
        assert h.metric("AuditMismatch") == 0
        (entry, *_) = h.scan("LEDGER_TABLE")
        change_ledger_amount(h, entry, 99999)
        again = h.invoke(
            "SealFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
        )
        assert again["not_verified"][sealed_day] == [m["mchid"]]
        h.invoke("SealFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    finally:
        bootstrap.set_clock(time.time)
    assert h.metric("AuditMismatch") == 2  # each run that finds it counts: the alarm stays in ALARM
    (case,) = bootstrap.work_queue().list(
        "kind=audit-mismatch"
    )  # one case per merchant-day, however many runs
    assert case["merchant"] == m["mchid"] and "amount_cent is 99999" in case["reason"]
    done = bootstrap.work_queue().act(case["id"], "resolve", by="ops", reason="restored from PITR")
    assert done and bootstrap.work_queue().list("kind=audit-mismatch") == []


def test_a_simulated_week_is_sealed_day_by_day_and_every_day_verifies(h, m, tmp_path):
    """Done-when of issue #36: a week of payments, each day sealed by the next day's
    scheduled run, and `tally audit verify` passes for every day from its export."""
    from datetime import datetime

    from tally.domain.clock import CHINA
    from tally.service.audit import verify_export

    base = time.time() - 8 * 86400
    days = []
    try:
        for d in range(7):
            now = base + d * 86400
            started = time.time()
            bootstrap.set_clock(lambda now=now, started=started: now + (time.time() - started))
            days.append(shanghai_day(now))
            for amount in (100 + d, 200 + d):
                order = json.loads(h.create_order(m["mchid"], amount_cent=amount)["body"])
                success = datetime.fromtimestamp(now, CHINA).isoformat(timespec="seconds")
                headers, body, _ = h.notification(
                    m["mchid"], order["out_trade_no"], amount, timestamp=str(int(now)), success_time=success
                )
                assert h.notify(m["mchid"], headers, body)["statusCode"] in (200, 204)
            assert h.drain() == []
            if d:  # the scheduled run of day d seals day d-1 and verifies it again
                run = h.invoke(
                    "SealFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
                )
                assert [s["records"] for s in run["sealed"] if s["merchant"] == m["mchid"]] == [2]
                assert run["not_verified"][days[d - 1]] == []
        bootstrap.set_clock(lambda: base + 7 * 86400)
        h.invoke("SealFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    finally:
        bootstrap.set_clock(time.time)
    assert len(set(days)) == 7
    for day in days:
        verdict = verify_export(export(day, tmp_path / day))
        granted = day == days[0]  # the tests' backend is granted its merchants on the first call: a record
        assert verdict.ok and verdict.records == 2 + granted, (day, verdict)
    assert h.metric("AuditSealed") == 7 + 1 and h.metric("AuditMismatch") == 0  # + the grant's chain


def test_a_deleted_queue_history_line_fails_verify_naming_the_persons_action(h, m, tmp_path):
    """A person's action (who, why) is journaled in the same write that appends its history line; deleting
    that line from the row afterwards is named by verify."""
    order = json.loads(h.create_order(m["mchid"], amount_cent=500)["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 499)  # an amount mismatch: a person
    assert h.notify(m["mchid"], headers, body)["statusCode"] in (200, 204)
    assert h.drain() == []
    (item,) = bootstrap.work_queue().list("kind=unbooked-payment")
    bootstrap.work_queue().act(item["id"], "ack", by="ops-li", reason="looking at it")
    bootstrap.work_queue().act(
        item["id"], "resolve", by="ops-li", reason="refunded by hand", code="refunded-by-hand"
    )
    actions = {n: r for n, r in records(h).items() if r["kind"].startswith("queue.")}
    assert sorted((r["kind"], r["facts"]["by"]) for r in actions.values()) == [
        ("queue.ack", "ops-li"),
        ("queue.resolve", "ops-li"),
    ]
    day = seal_today(h)
    code, verdict, _ = offline_verify(export(day, tmp_path / "before"))
    assert code == 0, verdict
    (raw,) = [r for r in h.scan("NOTIFY_RAW_TABLE") if r.get("history")]
    assert [e["action"] for e in raw["history"]] == ["ack", "resolve"]
    h.ddb.update_item(
        TableName=h.env["NOTIFY_RAW_TABLE"],
        Key=to_item({"pk": raw["pk"]}),
        UpdateExpression="REMOVE history[0]",
    )
    code, verdict, _ = offline_verify(export(day, tmp_path / "after"))
    (finding,) = verdict["merchants"][m["mchid"]]
    (ack,) = [n for n, r in actions.items() if r["kind"] == "queue.ack"]
    assert code == 1 and finding.startswith(ack + ":") and "a history line is missing" in finding


@pytest.mark.usefixtures("days_of_2024")
def test_a_recon_verdict_and_the_differences_it_saw_are_pinned_and_verify_names_a_change_R36_R55(
    h, m, tmp_path
):
    """The run's verdict is journaled in the write that records it (the run row), pinning that row and every
    difference row the run saw: a verdict rewritten afterwards, or a difference row deleted, is named by verify."""

    from tests.integration.recon_helpers import D, book_ghost
    from tests.integration.recon_helpers import pay as pay_on

    pay_on(h, m["mchid"], 300, f"{D}T09:00:00+08:00")
    ghost = "wechatpay#4200000000000000000000000042"
    book_ghost(h, m["mchid"], ghost)  # booked in our books, not in the channel's bill: LOCAL_ONLY
    run = bootstrap.recon_service().run("wechatpay", m["mchid"], D)
    assert run["status"] == "DIFFS"
    (name,) = [n for n, r in records(h).items() if r["kind"] == "recon.diffs"]
    verdict_record = records(h)[name]
    refs = {r["table"]: r for r in verdict_record["refs"]}
    assert refs["recon_runs"]["key"] == f"{run['pk']}|{run['sk']}"
    assert (
        refs["recon_runs"]["fields"]["status"] == "DIFFS" and refs["recon_runs"]["fields"]["open_diffs"] == 1
    )
    assert refs["recon_diff"]["key"] == f"{run['pk']}|PAYMENT#{ghost}"
    assert (refs["recon_diff"]["fields"]["cls"], refs["recon_diff"]["fields"]["local_amount_cent"]) == (
        "LOCAL_ONLY",
        777,
    )
    assert verdict_record["facts"]["diffs_seen"] == 1 and verdict_record["facts"]["bill_date"] == D
    day = seal_today(h)
    code, verdict, _ = offline_verify(export(day, tmp_path / "clean"))
    assert code == 0, verdict

    h.ddb.update_item(  # someone makes the day look agreed
        TableName=h.env["RECON_RUNS_TABLE"],
        Key=to_item({"pk": run["pk"], "sk": run["sk"]}),
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "MATCHED"}},
    )
    code, verdict, _ = offline_verify(export(day, tmp_path / "verdict"))
    (finding,) = verdict["merchants"][m["mchid"]]
    assert (
        code == 1 and finding.startswith(name + ":") and "status is 'MATCHED', journaled 'DIFFS'" in finding
    )

    h.ddb.put_item(TableName=h.env["RECON_RUNS_TABLE"], Item=to_item(run))  # the verdict restored
    assert offline_verify(export(day, tmp_path / "restored"))[0] == 0
    h.ddb.delete_item(
        TableName=h.env["RECON_DIFF_TABLE"], Key=to_item({"pk": run["pk"], "sk": f"PAYMENT#{ghost}"})
    )
    code, verdict, _ = offline_verify(export(day, tmp_path / "diff"))
    assert code == 1 and any(
        f.startswith(name + ":") and f"recon_diff row {run['pk']}|PAYMENT#{ghost} is missing" in f
        for f in verdict["merchants"][m["mchid"]]
    )


def test_a_merchant_key_change_is_journaled_without_the_secret_R55(h, tmp_path, monkeypatch):
    """A merchant's configuration is journaled on its own chain with who changed it: the certificate serial and
    the SHA-256 of the public half of its private key, an APIv3 key only as changed; no secret byte, raw or
    base64, is anywhere in the exported folder."""
    import base64

    from tally_cli import principals

    monkeypatch.setattr(cli_audit, "connect", lambda args: {"env": h.env})
    first = h.add_merchant(mchid="1900000777")
    mchid = first["mchid"]
    directory = bootstrap.merchants()
    directory.actor = principals.caller_name("ops-wang")
    try:
        wechatpay_v3_desk(directory).add_wechatpay(
            mchid=mchid,
            apiv3_key="K" * 32,  # a new APIv3 key; the same private key and certificate serial
            merchant_key_pem=first["merchant_private_key_pem"],
            merchant_serial=first["merchant_serial"],
            appid="wx-rotated",
            notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
            platform_certs=[h.sim.platform_cert_pem],
            public_key=h.sim.public_key_pem,
            public_key_id=h.sim.public_key_id,
        )
    finally:
        directory.actor = "system"
    changes = [
        r for r in records(h).values() if r["kind"] == "merchant.configured" and r["subject"].endswith(mchid)
    ]
    assert len(changes) == 2 and all(r["chain"].endswith("#4") for r in changes)  # the merchant's own chain
    latest = max(changes, key=lambda r: r["seq"])
    assert latest["facts"]["by"] == "ops-wang" and latest["facts"]["row"]["appid"] == "wx-rotated"
    keys = latest["facts"]["keys"]
    assert keys["changed"] == ["apiv3_key"] and keys["fields"]["apiv3_key"] == "set"
    assert keys["fields"]["merchant_serial"] == first["merchant_serial"]
    assert len(keys["fields"]["merchant_private_key"]["public_sha256"]) == 64
    day = seal_today(h)
    folder = export(day, tmp_path / "export")
    code, verdict, _ = offline_verify(folder)
    assert code == 0, verdict
    exported = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    body = "".join(first["merchant_private_key_pem"].split("-----")[2].split())
    for needle in (
        first["apiv3_key"],
        "K" * 32,
        body[:64],
        base64.b64decode(body)[:48].hex(),
    ):
        assert needle.encode() not in exported, needle[:12]
