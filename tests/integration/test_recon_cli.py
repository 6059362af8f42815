"""`tally bill parse` (offline) and `tally recon …` / `tally diff …` against the stack (moto)."""

import json
import pathlib
import random

import pytest

from tally_cli import recon as cli_recon
from tally_cli.main import main

pytestmark = pytest.mark.usefixtures("days_of_2024")

BILLS = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills"
D = "2024-05-01"


def test_bill_parse_prints_rows_summary_totals_and_verdict(capsys):
    assert main(["bill", "parse", "wechatpay", str(BILLS / "wechat_all_bom_crlf.csv")]) == 0
    out = capsys.readouterr().out
    assert "4 rows (3 payments ¥112.35, 1 refunds ¥25.50, fees ¥0.52)" in out
    assert "ok  应结订单总金额: stated 11235, parsed 11235" in out and "verdict: PASSED" in out


@pytest.mark.parametrize(
    "name, verdict",
    [
        ("wechat_all_empty_nonzero_summary.csv", "EMPTY_BILL"),
        ("wechat_all_wrong_summary.csv", "SUMMARY_MISMATCH"),
        ("wechat_error.html", "PARSE_FAILED"),
    ],
)
def test_bill_parse_exits_1_on_a_bad_bill_R31_R32(capsys, name, verdict):
    assert main(["bill", "parse", "wechatpay", str(BILLS / name), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == verdict


def test_bill_parse_alipay_zip_and_volume_guard_R33(capsys):
    zipped = str(next(BILLS.glob("alipay_*.zip")))
    assert main(["bill", "parse", "alipay", zipped, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["refund_cent"] == 500
    assert main(["bill", "parse", "alipay", zipped, "--previous-rows", "100", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "VOLUME_DROP"


def test_recon_run_show_diffs_resolve_and_diff_list(h, capsys, monkeypatch):
    monkeypatch.setattr(cli_recon, "connect", lambda args: {"env": h.env})
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn = f"C{random.randrange(10**15, 10**16)}"
    assert h.create_order(m["mchid"], otn, amount_cent=321, prepay=True)["statusCode"] == 201
    tid = h.sim.pay(m["mchid"], otn, drop=True, success_time=f"{D}T10:00:00+08:00")
    day = ["--channel", "wechatpay", "--mchid", m["mchid"], "--date", D, "--local"]
    assert main(["recon", "run", *day]) == 1  # a channel-only payment: DIFFS
    assert "differences open" in capsys.readouterr().out
    assert main(["recon", "show", *day]) == 0
    out = capsys.readouterr().out
    assert (
        f"Only on the channel's bill   PAYMENT#wechatpay#{tid}" in out
        and "[QUEUED]" in out
        and "report (CSV" in out
    )
    assert main(["diff", "list", "--json", "--local"]) == 0
    assert f"PAYMENT#wechatpay#{tid}" in {d["sk"] for d in json.loads(capsys.readouterr().out)}
    assert (
        main(
            ["recon", "resolve", *day, f"PAYMENT#wechatpay#{tid}", "--by", "dan", "--note", "ok", "--reverse"]
        )
        == 1
    )  # nothing of ours to reverse for a channel-only payment
    assert "pull path" in capsys.readouterr().err
    assert (
        main(
            [
                "recon",
                "resolve",
                *day,
                f"PAYMENT#wechatpay#{tid}",
                "--by",
                "dan",
                "--note",
                "seen",
                "--ignore",
            ]
        )
        == 0
    )
    assert "ignored by dan" in capsys.readouterr().out
