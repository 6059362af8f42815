"""Every bill kind the product downloads, read offline from real published bills (`tally bill parse`), and the
layout firewall: a new layout's structural difference, and a reviewed mapping read through the same parser and
summary checks (docs/recon.md "Bill layouts").

Sources of tests/fixtures/bills/real/ (the bills verbatim, as the repositories keep them):
- wechat_v3_{success,all,refund}_gunsluo.csv: gunsluo/wechatpay-go, tradebill_test.go (recorded
  /v3/bill/tradebill answers, bill_type SUCCESS / ALL / REFUND). The SUCCESS one carries the seven-column summary.
- wechat_v2_success_merchant_20191103.csv: a merchant's reconciliation controller (Java, the WXPay SDK's
  downloadBill with bill_type=SUCCESS) that kept the answer of 2019-11-03 in a comment: BOM, CRLF, 19 rows, the
  seven-column summary.
- wechat_v2_success_wxjava.csv: binarywang/WxJava, WxPayBillResultTest (PAY_BILL_RESULT_SUCCESS_CONTENT): an
  excerpt whose summary counts 31 rows it does not hold, which R32 must block.
- alipay_detail_20190916_recorded.csv: a payment-channel module's Java test (`alipayBill()`, next to its
  QdsOrderDTO order fixture) that kept a sandbox account's (20880211096256330156) 业务明细 of 2019-09-16 verbatim:
  `#` lines, TAB after ids, negative refunds, both 合计 trailers; written here in GBK as the zip member ships.
- fundflow/*_sample.*: see tests/fixtures/bills/fundflow/make_fixtures.py (WeChat's own 资金账单 example, a Go
  client's recorded v3 answer, an open-source settlement parser's Alipay 账务明细).
"""

import json
import pathlib

import pytest
from tally.channels import bill_layouts
from tally.domain.bill_layout import LayoutDiff, LayoutError, Mapping
from tally.service.recon_layout import LAYOUT_QUARANTINED, read_offline

from tally_cli.main import main

BILLS = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills"
REAL = BILLS / "real"
FLOW = BILLS / "fundflow"


@pytest.mark.parametrize(
    "name, kind, verdict, rows",
    [
        ("wechat_v3_success_gunsluo.csv", "trade SUCCESS", "PASSED", 1),
        ("wechat_v2_success_merchant_20191103.csv", "trade SUCCESS", "PASSED", 19),
        ("wechat_v2_success_wxjava.csv", "trade SUCCESS", "SUMMARY_MISMATCH", 1),
        ("wechat_v3_all_gunsluo.csv", "trade ALL", "PASSED", 3),
        ("wechat_v3_refund_gunsluo.csv", "trade REFUND", "PASSED", 2),
    ],
)
def test_r32_real_wechat_trade_bills_parse_and_are_checked_against_their_summary(name, kind, verdict, rows):
    """R32: the real SUCCESS bill with the seven-column summary (总交易单数 … 申请退款总金额) parses and
    passes; an excerpt whose summary disagrees with its body is blocked."""
    r = read_offline("wechatpay", (REAL / name).read_bytes(), name)
    assert (r["kind"], r["verdict"], r["totals"]["rows"]) == (kind, verdict, rows)
    if name == "wechat_v2_success_merchant_20191103.csv":
        checks = {c["name"]: (c["stated"], c["parsed"]) for c in r["totals"]["checks"]}
        assert checks["总交易单数"] == (19, 19) and checks["应结订单总金额"] == (19, 19)


@pytest.mark.parametrize(
    "channel, path, kind, account, verdict",
    [
        ("wechatpay", FLOW / "wechat_basic_go_sample.csv", "fundflow", "BASIC", "SUMMARY_MISMATCH"),
        ("wechatpay", FLOW / "wechat_basic_doc_sample.csv", "fundflow", "BASIC", "SUMMARY_MISMATCH"),
        ("wechatpay", FLOW / "wechat_fees_20261201_day.csv", "fundflow", "FEES", "PASSED"),
        ("wechatpay", FLOW / "wechat_basic_20261201_day.csv", "fundflow", "BASIC", "PASSED"),
        (
            "alipay",
            FLOW / "alipay_signcustomer_sample.csv",
            "fundflow 账务明细",
            "ALIPAY",
            "SUMMARY_MISMATCH",
        ),
        ("alipay", FLOW / "alipay_signcustomer_20261130_day.csv", "fundflow 账务明细", "ALIPAY", "PASSED"),
    ],
)
def test_r32_fund_flow_bills_are_recognised_offline(channel, path, kind, account, verdict):
    """R32: a fund-flow file (v3 fundflowbill, v2 downloadfundflow, Alipay signcustomer) handed to
    `tally bill parse` is read as one, its summary checked (the published excerpts are blocked)."""
    r = read_offline(channel, path.read_bytes(), path.name)
    assert (r["kind"], r.get("account"), r["verdict"]) == (kind, account, verdict)


def test_r32_a_recorded_alipay_business_detail_bill_passes_its_trailers():
    """R32: the recorded 业务明细 (6 trades, 4 refunds): counts and 商家实收 equal both 合计 trailers."""
    path = REAL / "alipay_detail_20190916_recorded.csv"
    r = read_offline("alipay", path.read_bytes(), path.name)
    assert (r["kind"], r["verdict"]) == ("trade 业务明细", "PASSED")
    t = r["totals"]
    assert (t["payments"], t["refunds"], t["payment_cent"], t["refund_cent"]) == (6, 4, 6, 4)


def test_r32_alipay_trade_zip_and_the_cli_say_which_kind_they_read(capsys):
    zipped = next(BILLS.glob("alipay_*.zip"))
    assert read_offline("alipay", zipped.read_bytes(), zipped.name)["kind"] == "trade 业务明细"
    assert main(["bill", "parse", "wechatpay", str(FLOW / "wechat_basic_20261201_day.csv")]) == 0
    assert "kind fundflow, account BASIC" in capsys.readouterr().out
    assert main(["bill", "parse", "wechatpay-v2", str(REAL / "wechat_v2_success_merchant_20191103.csv")]) == 0
    assert "kind trade SUCCESS: 19 rows" in capsys.readouterr().out


# ---------------------------------------------------------------- the layout firewall


def drifted(text: str) -> str:
    """The gunsluo ALL bill as a channel might change it: 费率 renamed, a column added at the end, 商户订单号
    moved before 微信订单号, and a second summary line."""
    lines = text.splitlines()
    header = lines[0].split(",")
    header[header.index("费率")] = "费率(%)"
    header.append("优惠标签")
    i, j = header.index("微信订单号"), header.index("商户订单号")
    header[i], header[j] = header[j], header[i]
    out = [",".join(header)]
    for line in lines[1:-2]:
        v = line[1:].split(",`")
        v.append("none")
        v[i], v[j] = v[j], v[i]
        out.append("`" + ",`".join(v))
    out += lines[-2:] + ["营销总金额", "`0.00"]
    return "\n".join(out) + "\n"


def test_r38_a_new_layout_is_quarantined_with_its_structural_difference(capsys, tmp_path):
    """R38: a bill of a layout no parser knows is not read by guesswork and not a bare parse failure: the
    difference against the nearest known layout (renamed, added, moved columns; a summary line added) and a
    sample row, in `tally bill parse` as in the recon run."""
    bill = tmp_path / "drifted.csv"
    bill.write_text(drifted((REAL / "wechat_v3_all_gunsluo.csv").read_text()))
    r = read_offline("wechatpay", bill.read_bytes(), bill.name)
    assert r["verdict"] == LAYOUT_QUARANTINED and not r["ok"]
    d = r["diff"]
    assert d["nearest"] == {"channel": "wechatpay", "kind": "trade ALL"}
    assert d["renamed"] == [["费率", "费率(%)"]] and d["added"] == ["优惠标签"] and d["removed"] == []
    assert {m[0] for m in d["moved"]} == {"微信订单号", "商户订单号"}
    assert d["summary_added"] == [["营销总金额"]]
    assert r["sample"]["微信订单号"] == "4200000925202101284997714292"
    assert main(["bill", "parse", "wechatpay", str(bill)]) == 1
    out = capsys.readouterr().out
    assert "~ column renamed: 费率 -> 费率(%)" in out and "+ summary line added: 营销总金额" in out


def test_r32_a_reviewed_mapping_reads_the_new_layout_through_the_same_summary_checks(tmp_path):
    """R32: mapped, the drifted bill is the known layout again: same rows, the summary still checked (a wrong
    total in the drifted bill is still blocked)."""
    text = drifted((REAL / "wechat_v3_all_gunsluo.csv").read_text())
    draft = read_offline("wechatpay", text.encode(), "d.csv")["draft_mapping"]
    assert draft["columns"] == {"费率": "费率(%)"}
    r = read_offline("wechatpay", text.encode(), "d.csv", mapping=draft)
    assert (r["kind"], r["mapped_onto"], r["verdict"], r["totals"]["rows"]) == (
        "trade ALL",
        "trade ALL",
        "PASSED",
        3,
    )
    assert r["rows"][0]["key"] == "wechatpay#4200000925202101284997714292"  # the moved column read right
    wrong = text.replace("`3,`0.03,", "`3,`0.04,")
    assert read_offline("wechatpay", wrong.encode(), "d.csv", mapping=draft)["verdict"] == "SUMMARY_MISMATCH"


def test_a_mapping_that_cannot_read_the_bill_is_refused():
    known = bill_layouts.known("wechatpay")
    text = drifted((REAL / "wechat_v3_all_gunsluo.csv").read_text())
    draft = read_offline("wechatpay", text.encode(), "d.csv")["draft_mapping"]
    with pytest.raises(LayoutError, match="费率"):
        Mapping.from_dict({**draft, "columns": {}}, known)  # 费率 is not in the new header
    with pytest.raises(LayoutError, match="already known"):
        shape = known[0].shape
        Mapping.from_dict({**draft, "header": shape.header, "summary": shape.summary, "columns": {}}, known)


def test_r32_an_alipay_layout_change_is_mapped_and_read_with_its_trailers_checked():
    """R32: the recorded 业务明细 with 商家实收（元） renamed: quarantined, then read through the drafted mapping
    (GBK, TAB-suffixed ids kept) to the same totals, both 合计 trailers still checked."""
    path = REAL / "alipay_detail_20190916_recorded.csv"
    drifted_bill = path.read_bytes().decode("gbk").replace("商家实收（元）", "实收金额（元）").encode("gbk")
    r = read_offline("alipay", drifted_bill, path.name)
    assert r["verdict"] == LAYOUT_QUARANTINED and r["diff"]["renamed"] == [["商家实收(元)", "实收金额(元)"]]
    mapped = read_offline("alipay", drifted_bill, path.name, mapping=r["draft_mapping"])
    assert (mapped["kind"], mapped["verdict"]) == ("trade 业务明细", "PASSED")
    assert mapped["totals"] == read_offline("alipay", path.read_bytes(), path.name)["totals"]


def test_every_known_layout_is_its_own_nearest_and_has_a_distinct_fingerprint():
    for channel in ("wechatpay", "alipay"):
        known = bill_layouts.known(channel)
        assert len({k.shape.fingerprint for k in known}) == len(known)
        for k in known:
            diff = LayoutDiff.against(k.shape, known)
            assert diff is not None and not (diff.added or diff.removed or diff.renamed or diff.moved)


def test_the_repo_mapping_files_are_valid():
    """A reviewed mapping file that no longer reads its layout fails here, not in a recon run."""
    for channel in ("wechatpay", "alipay"):
        bill_layouts.repo_mappings.cache_clear()
        for fingerprint, mapping in bill_layouts.repo_mappings(channel).items():
            assert mapping.fingerprint == fingerprint
            json.dumps(mapping.as_dict())


def test_a_big_bill_s_shape_is_read_from_its_first_and_last_lines_only(tmp_path):
    """A bill of any size: its head and tail give the same shape (and fingerprint) as the whole file, on disk
    too, plain or gzip; a cut multi-byte character at the window's edge changes nothing."""
    import gzip

    from tally.domain.bill_layout import sniff, text_lines

    text = drifted((REAL / "wechat_v3_all_gunsluo.csv").read_text())
    lines = text.splitlines(keepends=True)
    big = "".join([lines[0], *(lines[1:4] * 200), *lines[4:]]).encode()  # ~150 KB, 商品名称 etc. multi-byte
    assert len(big) > bill_layouts.HEAD_BYTES + bill_layouts.TAIL_BYTES
    whole = sniff(text_lines(big), text_lines(big), whole=True)
    assert bill_layouts.shape_of(big) == whole
    plain, zipped = tmp_path / "b.csv", tmp_path / "b.csv.gz"
    plain.write_bytes(big)
    zipped.write_bytes(gzip.compress(big))
    assert bill_layouts.shape_of_file(plain) == whole == bill_layouts.shape_of_file(zipped)
    assert whole[0].summary == (tuple(bill_layouts.known("wechatpay")[0].shape.summary[0]), ("营销总金额",))
