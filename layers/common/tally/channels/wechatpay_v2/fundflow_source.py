"""WeChat Pay v2's fund-flow bill (资金账单, `POST /pay/downloadfundflow`, R45) and which WeChat fund flow a merchant
is checked with.

The request is v2's signed XML, HMAC-SHA256 only (`appid, mch_id, nonce_str, sign_type=HMAC-SHA256, bill_date
YYYYMMDD, account_type Basic|Operation|Fees, tar_type GZIP`), sent with the merchant's API client certificate
(mutual TLS: the secret's `client_cert`, `tally merchant add wechatpay-v2 --client-cert …`; without one the call
is still made and the channel's refusal is a loud DownloadFailed). The answer is the file itself (gzip; the same
资金账单 layout as v3's, parsed by channels/wechatpay_v3/fundflow.py), not signed and with no hash (the SHA-1 we
compute names the kept copy), or an error XML (`return_code`/`result_code` FAIL with `return_msg` /
`err_code_des`): `No Bill Exist` = NO_STATEMENT and `Bill Creating` = NOT_READY, as /pay/downloadbill writes them
(UNCONFIRMED for this endpoint: not found in a primary source; anything else is DownloadFailed, never quiet).

`WeChatFundFlowChoice` is the stored "wechatpay" fund-flow source: the same records that pick the trade bill
(channels/wechatpay_v2/bills.py `WeChatBillChoice`) pick v3's `/v3/bill/fundflowbill` or v2's
`/pay/downloadfundflow`, shown in the run (`fund_source`, `fund_source_why`)."""

from __future__ import annotations

import secrets
from typing import Any

from tally import httpclient
from tally.channels.bill_source import NO_STATEMENT, NOT_READY, OK, DownloadFailed, Fetched, gunzip, sha1_hex
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.bills import WeChatBillChoice
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.channel import API_BASE, CA_FILE
from tally.channels.wechatpay_v3.fundflow import ACCOUNTS

V2_ACCOUNT = {"BASIC": "Basic", "OPERATION": "Operation", "FEES": "Fees"}  # v3's words -> v2's account_type
PATH = "/pay/downloadfundflow"


def download_fund_flow(
    base_url: str,
    *,
    mchid: str,
    appid: str,
    api_key: str,
    bill_date: str,
    account: str,
    tls: httpclient.TLS | None = None,
    timeout_s: float = 30.0,
    max_bytes: int = 1 << 30,
) -> bytes:
    """One account's day (raw answer: gzip, the CSV or a page for the parser to refuse); an error XML raises
    wx2.WeChatV2CallError with word NO_BILL_EXIST / BILL_CREATING / the err_code."""
    request = {
        "appid": appid,
        "mch_id": mchid,
        "nonce_str": secrets.token_hex(16),
        "sign_type": "HMAC-SHA256",  # the only sign type this endpoint takes
        "bill_date": bill_date.replace("-", ""),
        "account_type": V2_ACCOUNT[account],
        "tar_type": "GZIP",
    }
    request["sign"] = wx2.sign(request, api_key, "HMAC-SHA256")
    try:
        raw = httpclient.request(
            "POST",
            base_url.rstrip("/") + PATH,
            body=wx2.to_xml(request).encode("utf-8"),
            headers={"Content-Type": "text/xml; charset=utf-8"},
            timeout_s=timeout_s,
            tls=tls,
            limit=max_bytes + 1,
        ).body
    except httpclient.StatusError as err:
        word = "HTTP_5XX" if err.status >= 500 else f"HTTP_{err.status}"
        raise wx2.WeChatV2CallError(
            f"POST {PATH}: HTTP {err.status}", word=word, retryable=err.status >= 500
        ) from None
    except OSError as err:
        raise wx2.WeChatV2CallError(f"POST {PATH}: {err}", word="NETWORK", retryable=True) from None
    if len(raw) > max_bytes:
        raise wx2.WeChatV2CallError(f"POST {PATH}: answer over {max_bytes} bytes", word="TOO_LARGE")
    if raw.lstrip()[:5] == b"<xml>":
        try:
            answer = wx2.parse_xml(raw[: 1 << 16])
        except wx2.XmlError as exc:
            raise wx2.WeChatV2CallError(f"POST {PATH}: {exc}", word="NOT_XML") from None
        message = (answer.get("return_msg") or answer.get("err_code_des") or "")[:64]
        word = {"no bill exist": "NO_BILL_EXIST", "bill creating": "BILL_CREATING"}.get(
            message.strip().lower(), answer.get("err_code") or "RETURN_FAIL"
        )
        raise wx2.WeChatV2CallError(
            f"POST {PATH}: return_code {answer.get('return_code', '')[:20]!r} {message}",
            word=word,
            retryable=word in ("BILL_CREATING", "SYSTEMERROR"),
        )
    return raw


class WeChatV2FundFlowSource:
    channel = "wechatpay"
    accounts = ("BASIC",)

    def __init__(self, merchants: Any, *, ca_file: str | None = None):
        self.merchants = merchants
        self.ca_file = ca_file

    def fetch(self, mchid: str, bill_date: str, account: str = "BASIC") -> Fetched:
        if account not in ACCOUNTS:
            raise DownloadFailed(
                f"account_type {account[:16]!r} is not one of {ACCOUNTS}", code="BAD_ACCOUNT"
            )
        v2 = wechatpay_v2_desk(self.merchants).wechatpay_v2(mchid)
        tls = None
        if v2.client_cert:
            from tally.channels.wechatpay_v2.refunds import client_tls

            tls = client_tls(
                v2.client_cert, v2.client_key or "", self.ca_file or self.merchants.setting(CA_FILE) or None
            )
        try:
            raw = download_fund_flow(
                self.merchants.setting(API_BASE),
                mchid=mchid,
                appid=v2.appid,
                api_key=v2.api_key,
                bill_date=bill_date,
                account=account,
                tls=tls,
            )
        except wx2.WeChatV2CallError as exc:
            if exc.word == "NO_BILL_EXIST":
                return Fetched(NO_STATEMENT, note=str(exc))
            if exc.word == "BILL_CREATING":
                return Fetched(NOT_READY, note=str(exc))
            hint = (
                ""
                if v2.client_cert
                else " (no API client certificate stored: tally merchant add wechatpay-v2 … --client-cert)"
            )
            raise DownloadFailed(f"downloadfundflow: {exc}{hint}", retryable=exc.retryable) from None
        data = gunzip(raw)
        return Fetched(OK, data, f"{account}.csv", sha1_hex(data), "", extra={"fund_source": "v2"})


class WeChatFundFlowChoice(WeChatBillChoice):
    """The stored channel "wechatpay"'s fund-flow source: v3's or v2's download, chosen by the same records (and
    the same rule) as the trade bill (R44/R45)."""

    accounts = ("BASIC",)

    def fetch(self, mchid: str, bill_date: str, account: str = "BASIC") -> Fetched:  # type: ignore[override]
        kind, why = self.choose(mchid)
        fetched = (self.v3 if kind == "v3" else self.v2).fetch(mchid, bill_date, account)
        fetched.extra = {**fetched.extra, "fund_source": kind, "fund_source_why": why}
        return fetched
