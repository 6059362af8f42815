"""WeChat Pay v2's trade bill (`/pay/downloadbill`) and which WeChat bill a merchant is reconciled with (R44).

v2 and v3 report the same WeChat transactions (stored channel "wechatpay") and the bill file is the same
CSV layout (channels/wechatpay_v3/bills.py parses both, the legacy column sets included). What differs is the
download: v2 posts a request signed with the API key and gets the file itself back (gzip with
`tar_type=GZIP`, no hash: v2 signs no file) or an error XML (`No Bill Exist`, `Bill Creating`).

`WeChatBillChoice` is the "wechatpay" bill source: the merchant records decide, explicitly, and the run shows
which (`Fetched.extra["bill_source"]`):

    a v2 record with bill_source "v3"           -> the v3 bill (needs the v3 record: else NO_BILL_SOURCE)
    a v2 record with bill_source "v2", or a v2
    record and no v3 record                      -> /pay/downloadbill
    a v3 record (and no v2 record saying "v2")  -> the v3 bill (/v3/bill/tradebill)
    nothing usable                               -> DownloadFailed code NO_BILL_SOURCE: a BLOCKED run, never a skip
"""

from __future__ import annotations

from typing import Any

from tally.channels.bill_source import NO_STATEMENT, NOT_READY, OK, DownloadFailed, Fetched, gunzip, sha1_hex
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3 import wire as wx

NO_BILL_SOURCE = "NO_BILL_SOURCE"
BILL_SOURCES = ("v3", "v2")


class WeChatV2BillSource:
    channel = wx.STORED

    def __init__(self, merchants: Any):
        self.merchants = merchants

    def fetch(self, mchid: str, bill_date: str) -> Fetched:
        client = wechatpay_v2_desk(self.merchants).wechatpay_v2_client(
            wechatpay_v2_desk(self.merchants).wechatpay_v2(mchid)
        )
        try:
            raw = client.download_bill(bill_date, "ALL")
        except wx2.WeChatV2CallError as exc:
            if exc.word == "NO_BILL_EXIST":
                return Fetched(NO_STATEMENT, note=str(exc))
            if exc.word == "BILL_CREATING":
                return Fetched(NOT_READY, note=str(exc))
            raise DownloadFailed(f"downloadbill: {exc}", retryable=exc.retryable) from None
        data = gunzip(raw)
        return Fetched(OK, data, "ALL.csv", sha1_hex(data), "", extra={"bill_source": "v2"})


class WeChatBillChoice:
    """The stored channel "wechatpay"'s bill source: v3's or v2's download, as the merchant records say."""

    channel = wx.STORED

    def __init__(self, merchants: Any, v3: Any, v2: Any):
        self.merchants = merchants
        self.v3 = v3
        self.v2 = v2

    def choose(self, mchid: str) -> tuple[str, str]:
        """("v3"|"v2", why); DownloadFailed NO_BILL_SOURCE when the records give no way to fetch a bill."""
        store = self.merchants.store
        v3_row = store.get(wx.STORED, mchid)
        v2_row = store.get(wx2.API, mchid)
        wanted = (v2_row or {}).get("bill_source")
        if wanted not in (None, "", *BILL_SOURCES):
            raise DownloadFailed(
                f"merchant {mchid}: bill_source {str(wanted)[:16]!r} is not one of {BILL_SOURCES}",
                code=NO_BILL_SOURCE,
            )
        if wanted == "v3":
            if v3_row is None:
                raise DownloadFailed(
                    f"merchant {mchid}: its v2 record says bill_source v3 but there are no v3 credentials "
                    "(tally merchant add wechatpay …, or set bill_source v2)",
                    code=NO_BILL_SOURCE,
                )
            return "v3", "bill_source v3 in the v2 merchant record"
        if v2_row is not None and (wanted == "v2" or v3_row is None):
            return "v2", "bill_source v2 in the merchant record" if wanted else "v2 credentials only"
        if v3_row is not None:
            return "v3", "v3 credentials"
        raise DownloadFailed(
            f"merchant {mchid}: no WeChat Pay v3 or v2 credentials to fetch a bill with", code=NO_BILL_SOURCE
        )

    def fetch(self, mchid: str, bill_date: str) -> Fetched:
        kind, why = self.choose(mchid)
        fetched = (self.v3 if kind == "v3" else self.v2).fetch(mchid, bill_date)
        fetched.extra = {**fetched.extra, "bill_source": kind, "bill_source_why": why}
        return fetched
