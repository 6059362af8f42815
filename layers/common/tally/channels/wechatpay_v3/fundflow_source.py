"""WeChat Pay's fund-flow bill download (R45, docs/settlement.md §6.6): `GET /v3/bill/fundflowbill` per
configured account (signed, the answer verified), then the download URL like the trade bill's, gunzipped, and
the SHA-1 the caller checks against `hash_value`. Parsed by channels/wechatpay_v3/fundflow.py."""

from __future__ import annotations

from typing import Any

from tally.channels.bill_source import NO_STATEMENT, NOT_READY, OK, DownloadFailed, Fetched, gunzip, sha1_hex
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.fundflow import ACCOUNTS
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk


class WeChatFundFlowSource:
    channel = wx.STORED
    accounts = ("BASIC",)

    def __init__(self, merchants: Any):
        self.merchants = merchants

    def fetch(self, mchid: str, bill_date: str, account: str = "BASIC") -> Fetched:
        if account not in ACCOUNTS:
            raise DownloadFailed(
                f"account_type {account[:16]!r} is not one of {ACCOUNTS}", code="BAD_ACCOUNT"
            )
        from tally import errors

        try:
            merchant = wechatpay_v3_desk(self.merchants).wechatpay(mchid)
        except errors.NotFound:
            raise DownloadFailed(
                f"merchant {mchid}: no WeChat Pay v3 credentials for /v3/bill/fundflowbill",
                code="NO_BILL_SOURCE",
            ) from None
        client = wechatpay_v3_desk(self.merchants).client(merchant)
        try:
            answer = client.fundflowbill(bill_date, account)
        except wx.WeChatCallError as exc:
            if exc.code == "NO_STATEMENT_EXIST":
                return Fetched(NO_STATEMENT, note=str(exc))
            if exc.code == "STATEMENT_CREATING":
                return Fetched(NOT_READY, note=str(exc))
            raise DownloadFailed(f"fundflowbill: {exc}", retryable=exc.retryable) from None
        try:
            raw = client.download_bill(answer["download_url"])
        except wx.WeChatCallError as exc:
            raise DownloadFailed(f"fund-flow download: {exc}", retryable=exc.retryable) from None
        data = gunzip(raw)
        return Fetched(OK, data, f"{account}.csv", sha1_hex(data), answer["hash_value"].lower())
