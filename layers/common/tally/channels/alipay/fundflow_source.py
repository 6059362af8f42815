"""Alipay's fund-flow bill download (R45, docs/settlement.md §6.6): `alipay.data.dataservice.bill.downloadurl.query`
with `bill_type=signcustomer` (channel-spec.md §7) with the merchant's own app, then the 30-second download URL
like the trade bill's (followed only to an alipay.com host or the gateway's own), then the zip's
`…_账务明细.csv` member picked by suffix (entry order is not guaranteed). What is kept and parsed is that member
(GBK, as served); its SHA-1 names the kept copy (Alipay states no hash). Parsed by channels/alipay/fundflow.py.

Alipay's balance has one account: the only account word is ALIPAY. `isp.bill_not_exist` is NO_STATEMENT (no
movement, or not generated yet: Alipay writes both the same way; the recon service treats a day without a bill
while the ledger says money moved on it as not in yet, then FUND_FLOW_LATE)."""

from __future__ import annotations

from typing import Any

from tally import errors
from tally.channels.alipay.bills import METHOD, NO_STATEMENT_SUB_CODES, AlipayError, download, open_zip
from tally.channels.alipay.channel import GATEWAY
from tally.channels.alipay.fundflow import ACCOUNT, DETAIL_SUFFIX, SUMMARY_SUFFIX
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.bill_source import NO_STATEMENT, OK, DownloadFailed, Fetched, sha1_hex
from tally.domain.recon import BillParseError

ACCOUNTS = (ACCOUNT,)


class AlipayFundFlowSource:
    channel = "alipay"
    accounts = ACCOUNTS  # what a merchant without `fund_accounts` is checked on

    def __init__(self, merchants: Any, *, download_timeout_s: float = 30.0):
        self.merchants = merchants
        self.download_timeout_s = download_timeout_s

    def fetch(self, app_id: str, bill_date: str, account: str = ACCOUNT) -> Fetched:
        from tally.channels.alipay import wire as api

        if account != ACCOUNT:
            raise DownloadFailed(
                f"Alipay has one balance account ({ACCOUNT}), not {account[:16]!r}", code="BAD_ACCOUNT"
            )
        try:
            client = alipay_desk(self.merchants).alipay_client(alipay_desk(self.merchants).alipay(app_id))
            answer = client.call(METHOD, {"bill_type": "signcustomer", "bill_date": bill_date})
        except errors.NotFound as exc:  # the directory's UnknownMerchant
            raise DownloadFailed(f"no Alipay merchant {app_id}: {exc}", code="NO_BILL_SOURCE") from None
        except api.AlipayCallError as exc:
            if exc.sub_code in NO_STATEMENT_SUB_CODES:
                return Fetched(NO_STATEMENT, note=str(exc))
            raise DownloadFailed(
                f"bill.downloadurl.query signcustomer: {exc}", retryable=exc.retryable
            ) from None
        url = str(answer.get("bill_download_url") or "")
        if not url:
            raise DownloadFailed(
                "bill.downloadurl.query (signcustomer) answered 10000 without bill_download_url"
            )
        try:
            data = download(url, self.merchants.setting(GATEWAY), timeout_s=self.download_timeout_s)
        except AlipayError as exc:
            raise DownloadFailed(f"alipay fund-flow bill: {exc}", retryable=exc.retryable) from None
        if data[:2] == b"PK":
            try:
                data = open_zip(data, DETAIL_SUFFIX, SUMMARY_SUFFIX).detail
            except BillParseError:
                pass  # kept as served: the parser refuses it loudly (PARSE_FAILED), with the file as evidence
        return Fetched(OK, data, f"{ACCOUNT}.csv", sha1_hex(data))
