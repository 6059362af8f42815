"""The Alipay bill download: the zip is followed only to an alipay.com host or the gateway's own host (a
tampered or mistaken answer cannot send the function anywhere), and the fixture zip — as Alipay ships it —
opens by member-name suffix. The signed query itself runs against the simulator in
tests/integration/test_recon_alipay.py."""

import pathlib

import pytest
from tally.channels.alipay import bills as ali

ZIP = next(
    (pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills").glob("alipay_*.zip")
).read_bytes()
GATEWAY = "https://openapi.alipay.com/gateway.do"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "https://dwbillcenter.alipay.com.evil.io/x",
        "file:///etc/passwd",
        "ftp://dwbillcenter.alipay.com/x.zip",
    ],
)
def test_a_download_url_off_alipay_is_not_followed(url):
    with pytest.raises(ali.AlipayError, match="not followed"):
        ali.download(url, GATEWAY)


def test_the_zip_opens_by_suffix_and_parses():
    files = ali.open_zip(ZIP)
    assert sorted(n.rsplit("_", 1)[1] for n in files.names) == ["业务明细(汇总).csv", "业务明细.csv"]
    assert ali.AlipayBillParser(ali.lines_of(files.detail)).scan().rows == 3
