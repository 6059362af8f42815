"""R45 on every channel: Alipay's 账务明细 (`bill_type=signcustomer`) and WeChat Pay v2's `/pay/downloadfundflow`
through the simulator and the real recon (moto + real HTTP), with the v3 fund-flow desk's faults; the merchant
record's `settlement_lag` / `fund_accounts` read by the check."""

from __future__ import annotations

import datetime as dt

import pytest
from tally import bootstrap, errors
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk

from tests.integration.recon_helpers import alipay_pay, metric, new_v2, pay_v2, s3_keys

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"
D1 = "2024-05-02"
CST = dt.timezone(dt.timedelta(hours=8))


@pytest.fixture
def app(h):
    from tests.integration.channel_kit import Alipay

    return Alipay(h).setup()


@pytest.fixture(autouse=True)
def _clean(sim):
    yield
    sim.alipay.bills.fundflow.faults.clear()
    sim.wechatpay_v2.bills.fundflow.faults.clear()


def fund_diffs(svc, channel, mchid, day=D):
    return {d["sk"]: d for d in svc.show(channel, mchid, day)["diffs"] if d["cls"] == "SETTLEMENT_DIFFERS"}


def alipay_day(h, svc, app):
    otn, _ = alipay_pay(h, app, 2000, f"{D} 10:00:00")
    alipay_pay(h, app, 880, f"{D} 11:00:00", receipt=800)  # an 0.80 merchant discount: 商家实收 8.00
    alipay_pay(h, app, 1, f"{D} 23:59:59")
    assert svc.run("alipay", app, D)["status"] == "MATCHED"  # the trade bill kept, its fees booked


# ---------------------------------------------------------------------------------------------- Alipay


def test_r45_an_alipay_day_agrees_three_ways_and_its_signcustomer_bill_is_kept_once(h, svc, app):
    alipay_day(h, svc, app)
    run = svc.fund_flow("alipay", app, D)
    assert run["status"] == "MATCHED" and run["fund_verdict"] == "AGREED", run["reason"]
    figures = run["figures"]
    assert figures["fund"]["settlement_cent"] == 2801 == figures["ledger"]["settlement_cent"]  # 商家实收, T
    assert figures["fund"]["fee_cent"] == figures["trade"]["fee_cent"] == figures["ledger"]["fee_cent"] > 0
    assert run["accounts"] == ["ALIPAY"] and "Alipay" in run["lag"]
    keys = s3_keys(f"bills/fundflow/alipay/{app}/{D}/")
    assert len(keys) == 1 and keys[0].startswith(
        f"bills/fundflow/alipay/{app}/{D}/ALIPAY."
    )  # the 账务明细 member
    assert svc.fund_flow("alipay", app, D)["status"] == "MATCHED"
    assert s3_keys(f"bills/fundflow/alipay/{app}/{D}/") == keys  # If-None-Match: *, never a second copy


def test_r45_alipay_a_missing_credit_and_a_fee_off_by_one_fen_are_settlement_diffs(h, sim, svc, app):
    alipay_day(h, svc, app)
    sim.alipay.bills.fundflow.fault("drop_credit")
    run = svc.fund_flow("alipay", app, D)
    assert run["fund_verdict"] == "FUND_DIFFERS", run["reason"]
    settlement = fund_diffs(svc, "alipay", app)[f"SETTLEMENT#{app}#{D}"]
    assert settlement["local_amount_cent"] - settlement["channel_amount_cent"] == 2000  # the first credit
    assert settlement["handle_status"] == "OPEN" and metric(h, "ReconDiffOpened") >= 1
    sim.alipay.bills.fundflow.fault("fee_off_by_one")
    svc.fund_flow("alipay", app, D)
    fee = fund_diffs(svc, "alipay", app)[f"FEE#{app}#{D}"]
    assert fee["channel_amount_cent"] - fee["local_amount_cent"] == 1
    healed = svc.fund_flow("alipay", app, D)  # the clean bill: both healed by recon, with history
    assert healed["status"] == "MATCHED", healed["reason"]
    assert {d["handle_status"] for d in fund_diffs(svc, "alipay", app).values()} == {"RESOLVED"}


@pytest.mark.parametrize(
    "fault, code",
    [
        ("html_error", "PARSE_FAILED"),
        ("wrong_summary", "SUMMARY_MISMATCH"),
        ("empty_nonzero_summary", "EMPTY_BILL"),
    ],
)
def test_r45_a_broken_alipay_fund_flow_is_refused_by_the_guards_R31_R32(h, sim, svc, app, fault, code):
    alipay_day(h, svc, app)
    sim.alipay.bills.fundflow.fault(fault)
    run = svc.fund_flow("alipay", app, D)
    assert run["status"] == "BLOCKED" and run["block_code"] == code, run["reason"]


def test_r45_an_alipay_fund_flow_not_out_is_pending_then_fund_flow_late(h, sim, svc, app, monkeypatch):
    alipay_day(h, svc, app)
    sim.alipay.bills.fundflow.fault(
        "late_day"
    )  # isp.bill_not_exist although the ledger booked money that day
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 2, 8, 0, tzinfo=CST).timestamp())
    run = svc.fund_flow("alipay", app, D)
    assert run["status"] == "RETRY" and "not in yet" in run["reason"], run["reason"]
    assert {"day": D, "status": "NO_STATEMENT_BUT_LEDGER"} in run["fund_bills"]
    sim.alipay.bills.fundflow.fault("late_day")
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 3, 11, 0, tzinfo=CST).timestamp())
    run = svc.fund_flow("alipay", app, D)
    assert run["status"] == "BLOCKED" and run["block_code"] == "FUND_FLOW_LATE", run["reason"]
    assert metric(h, "ReconFundFlowLate") == 1


# ---------------------------------------------------------------------------------------------- WeChat v2


def v2_day(h, sim, svc, cents=(1000, 2550)):
    m = new_v2(h, sim)
    for i, c in enumerate(cents):
        pay_v2(h, sim, m, c, f"20240501{10 + i}0000")
    assert svc.run("wechatpay", m["mch_id"], D)["status"] == "MATCHED"
    return m


def test_r45_a_v2_only_merchant_is_checked_through_pay_downloadfundflow(h, sim, svc):
    m = v2_day(h, sim, svc)
    run = svc.fund_flow("wechatpay", m["mch_id"], D)
    assert run["status"] == "MATCHED" and run["fund_verdict"] == "AGREED", run["reason"]
    assert run["fund_source"] == "v2" and run["figures"]["fund"]["settlement_cent"] == 3550
    asked = sim.wechatpay_v2.bills.fundflow.requests
    assert {"mch_id": m["mch_id"], "bill_date": "20240502", "account_type": "Basic"} in asked  # T+1 credit
    assert len(s3_keys(f"bills/fundflow/wechatpay/{m['mch_id']}/{D1}/")) == 1


def test_r45_v2_fund_flow_faults_missing_credit_fee_late_and_guards(h, sim, svc, monkeypatch):
    m = v2_day(h, sim, svc)
    book = sim.wechatpay_v2.bills.fundflow
    book.fault("drop_credit", count=2)
    assert svc.fund_flow("wechatpay", m["mch_id"], D)["fund_verdict"] == "FUND_DIFFERS"
    missing = fund_diffs(svc, "wechatpay", m["mch_id"])[f"SETTLEMENT#{m['mch_id']}#{D}"]
    assert missing["local_amount_cent"] - missing["channel_amount_cent"] == 1000
    book.fault("fee_off_by_one", count=2)
    svc.fund_flow("wechatpay", m["mch_id"], D)
    assert f"FEE#{m['mch_id']}#{D}" in fund_diffs(svc, "wechatpay", m["mch_id"])
    for fault, code in [("wrong_summary", "SUMMARY_MISMATCH"), ("html_error", "PARSE_FAILED")]:
        book.faults.clear()
        book.fault(fault)  # the first day asked (D, refunds: none) is served the broken file and blocks
        assert svc.fund_flow("wechatpay", m["mch_id"], D)["block_code"] == code
    book.faults.clear()
    book.fault("late_day", count=2)
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 5, 11, 0, tzinfo=CST).timestamp())
    assert svc.fund_flow("wechatpay", m["mch_id"], D)["block_code"] == "FUND_FLOW_LATE"


# ---------------------------------------------------------------------------------------------- the record


def test_r45_settlement_lag_and_fund_accounts_come_from_the_merchant_record(h, sim, svc):
    from tally.service.settlement_config import MerchantSettlement
    from tally.store.tables import MerchantStore

    m = v2_day(h, sim, svc)
    config = MerchantSettlement(MerchantStore(bootstrap.tables()))
    shown = config.update(
        "wechatpay_v2", m["mch_id"], settlement_lag={"settlement_days": 2}, fund_accounts=["BASIC", "FEES"]
    )
    assert shown["fund_flow"]["settlement_days"] == 2 == shown["fund_flow"]["fee_days"]
    assert shown["fund_flow"]["accounts"] == ["BASIC", "FEES"]
    run = svc.fund_flow(
        "wechatpay", m["mch_id"], D
    )  # T+2: the credit is looked for on 05-03, not found there
    assert run["accounts"] == ["BASIC", "FEES"] and "settlement_days=2" in run["lag"]
    assert run["fund_verdict"] != "AGREED" and "2024-05-03" in {b["day"] for b in run["fund_bills"]}
    for bad, why in [
        ({"settlement_days": -1}, "0..30"),
        ({"settlement_days": "1"}, "whole number"),
        ({"settle_days": 1}, "unknown field"),
    ]:
        with pytest.raises(errors.InvalidRequest, match=why):
            config.update("wechatpay_v2", m["mch_id"], settlement_lag=bad)
    with pytest.raises(errors.InvalidRequest, match="not one of"):
        config.update("wechatpay_v2", m["mch_id"], fund_accounts=["SAVINGS"])
    with pytest.raises(errors.NotFound):
        config.update("alipay", "no-such-app", fund_accounts=["ALIPAY"])
    config.update("wechatpay_v2", m["mch_id"], clear=True)
    assert svc.fund_flow("wechatpay", m["mch_id"], D)["fund_verdict"] == "AGREED"  # back to the default T+1


def test_r45_a_record_written_by_hand_with_a_bad_lag_blocks_the_fund_flow_loudly(h, sim, svc):
    from tally.store.tables import MerchantStore

    m = v2_day(h, sim, svc)
    store = MerchantStore(bootstrap.tables())
    row = store.get("wechatpay_v2", m["mch_id"])
    store.put({**row, "settlement_lag": {"settlement_days": 99}})
    run = svc.fund_flow("wechatpay", m["mch_id"], D)
    assert (
        run["status"] == "BLOCKED" and run["block_code"] == "BAD_MERCHANT_CONFIG" and "0..30" in run["reason"]
    )


def test_r45_tally_merchant_add_update_show_carry_the_fund_flow_figures(
    h, sim, monkeypatch, capsys, tmp_path
):
    import json

    from tally_cli import merchant as cli_merchant
    from tally_cli import merchant_settlement as cli_settlement
    from tally_cli.main import main

    for module in (cli_merchant, cli_settlement):
        monkeypatch.setattr(module, "connect", lambda args: {"env": h.env, "api_url": "http://127.0.0.1:9"})
    m = sim.wechatpay_v2.register_test_merchant()
    key = tmp_path / "apikey.txt"
    key.write_text(m["api_key"])
    add = ["merchant", "add", "wechatpay-v2", "--mchid", m["mch_id"], "--api-key", f"@{key}", "--no-check"]
    assert main([*add, "--settlement-lag", '{"settlement_days": 7}', "--local"]) == 0
    assert "credit T+7" in capsys.readouterr().out
    assert (
        main(["merchant", "update", "wechatpay-v2", m["mch_id"], "--fund-accounts", "basic,fees", "--local"])
        == 0
    )
    capsys.readouterr()
    assert main(["merchant", "show", "wechatpay-v2", m["mch_id"], "--json", "--local"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fund_flow"]["accounts"] == ["BASIC", "FEES"] and shown["fund_flow"]["settlement_days"] == 7
    assert main([*add, "--local"]) == 0  # a re-add (new key, say) keeps the figures
    assert main(["merchant", "show", "wechatpay-v2", m["mch_id"], "--local"]) == 0
    assert "accounts BASIC, FEES; credit T+7" in capsys.readouterr().out
    bad = [
        "merchant",
        "update",
        "wechatpay-v2",
        m["mch_id"],
        "--settlement-lag",
        "{settlement_days: 1}",
        "--local",
    ]
    assert main(bad) != 0
    assert "--settlement-lag is JSON" in capsys.readouterr().err


def test_r45_v2_downloadfundflow_presents_the_api_client_certificate(h, sim, monkeypatch, tmp_path):
    """The endpoint needs the merchant's API certificate (mutual TLS, like /secapi/): without it the channel's
    refusal is a loud DownloadFailed naming the fix; with it the signed (HMAC-SHA256) request is answered."""
    from tally.channels.bill_source import NO_STATEMENT, DownloadFailed
    from tally.channels.wechatpay_v2.fundflow_source import WeChatV2FundFlowSource

    url = sim.start_tls()
    ca = tmp_path / "wechat-ca.pem"
    ca.write_text(sim.tls_ca.pem)
    monkeypatch.setenv("WECHATPAY_API_BASE", url)
    bootstrap.reset()
    m = new_v2(h, sim)
    cert, key = sim.wechatpay_v2.issue_client_cert(m["mch_id"])
    source = WeChatV2FundFlowSource(bootstrap.merchants(), ca_file=str(ca))
    with pytest.raises(DownloadFailed, match="--client-cert"):
        source.fetch(m["mch_id"], D1)  # no certificate in the secret: refused, and the message says the fix
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=m["mch_id"],
        api_key=m["api_key"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{m['mch_id']}",
        client_cert_pem=cert,
        client_key_pem=key,
    )
    bootstrap.reset()
    source = WeChatV2FundFlowSource(bootstrap.merchants(), ca_file=str(ca))
    assert source.fetch(m["mch_id"], D1).status == NO_STATEMENT  # verified, answered: no movement that day
    assert sim.wechatpay_v2.bills.fundflow.requests[-1]["account_type"] == "Basic"
