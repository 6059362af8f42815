"""WeChat Pay v3 refunds: the create / query calls (channel-spec §2.3, §2.4), the refund
notification resource (§1.8), and the explicit tables mapping the channel's words to outcomes (R22, R29).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import quote

from tally import errors
from tally.channels.settlement import refund_fields
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.settlement import v3_refund_basis
from tally.domain.money import MoneyError, cents, received_cents
from tally.domain.refunds import AnswerKind, ChannelAnswer, RefundEvent, RefundNotice

CREATE_PATH = "/v3/refund/domestic/refunds"

# Refund status (response `status`, notification `refund_status`) → event. PROCESSING = no outcome yet.
REFUND_STATUS: dict[str, RefundEvent | None] = {
    "SUCCESS": RefundEvent.SUCCEED,
    "CLOSED": RefundEvent.FAIL,
    "ABNORMAL": RefundEvent.ABNORMAL,
    "PROCESSING": None,
}

# Error codes of the create call (§2.3). RETRY: same out_refund_no later. REJECTED: the channel refused
# the request for good, so the refund never existed there: release and spend the refund_no. Anything
# else (an unmapped code) goes to a person.
CREATE_ERRORS: dict[str, AnswerKind] = {
    "SYSTEM_ERROR": AnswerKind.RETRY,
    "FREQUENCY_LIMITED": AnswerKind.RETRY,
    "BANK_ERROR": AnswerKind.RETRY,
    "NOT_ENOUGH": AnswerKind.RETRY,  # merchant balance too low for now: retried until expiry, then a person
    "PARAM_ERROR": AnswerKind.REJECTED,
    "INVALID_REQUEST": AnswerKind.REJECTED,
    "RESOURCE_NOT_EXISTS": AnswerKind.REJECTED,  # order unknown or unpaid at the channel
    "USER_ACCOUNT_ABNORMAL": AnswerKind.REJECTED,
    "NO_AUTH": AnswerKind.REJECTED,
    "MCH_NOT_EXISTS": AnswerKind.REJECTED,
}

# apply-abnormal-refund (POST {CREATE_PATH}/{refund_id}/apply-abnormal-refund): where an ABNORMAL refund goes
# instead (the operator's word → the channel's `type`); the user's card needs its three fields, the last two
# encrypted with the platform key.
ABNORMAL_ROUTES = {"merchant-bank-card": "MERCHANT_BANK_CARD", "user-bank-card": "USER_BANK_CARD"}
USER_CARD_FIELDS = ("bank_type", "bank_account", "real_name")
ABNORMAL_ERRORS: dict[str, AnswerKind] = {
    "SYSTEM_ERROR": AnswerKind.RETRY,
    "FREQUENCY_LIMITED": AnswerKind.RETRY,
    "PARAM_ERROR": AnswerKind.REJECTED,
    "INVALID_REQUEST": AnswerKind.REJECTED,  # e.g. the refund is not (or no longer) ABNORMAL
    "RESOURCE_NOT_EXISTS": AnswerKind.REJECTED,
    "NO_AUTH": AnswerKind.REJECTED,
}


class ProviderMismatch(errors.Conflict, ValueError):
    """409: a reroute signed by credentials other than those the refund was made with (R39): nothing is sent."""


EVENT_TYPES = ("REFUND.SUCCESS", "REFUND.ABNORMAL", "REFUND.CLOSED")


def is_refund_event(envelope: dict[str, Any]) -> bool:
    return (
        str(envelope.get("event_type") or "").startswith("REFUND.")
        or (envelope.get("resource") or {}).get("original_type") == "refund"
    )


def to_refund_notice(resource: dict[str, Any], source: str = "notify") -> RefundNotice:
    """A refund resource (§1.8 notification, or §2.3 `Refund` object from a query: `status` there)."""
    try:
        partner = "sp_mchid" in resource
        amount = resource.get("amount") or {}
        status = _text(resource.get("refund_status") or resource.get("status"))
        # R43: the notification states total/refund/payer_total/payer_refund only, the query answer also
        # settlement_refund, discount_refund …; what the report alone cannot settle the apply step retries
        # with the payment (its basis is kept)
        basis = v3_refund_basis(amount) if isinstance(amount, dict) else None
        return RefundNotice(
            channel=wx.STORED,
            refund_no=_text(resource["out_refund_no"]),
            refund_id=_text(resource["refund_id"]),
            status=status,
            event=REFUND_STATUS.get(status),
            mchid=_text(resource["sub_mchid"] if partner else resource["mchid"]),
            sp_mchid=_text(resource["sp_mchid"]) if partner else None,
            out_trade_no=_text(resource["out_trade_no"]),
            transaction_id=str(resource.get("transaction_id") or ""),
            refund_cent=received_cents(amount["refund"]),
            total_cent=received_cents(amount["total"]),
            success_time=resource.get("success_time") or None,
            source=source,
            **refund_fields(basis),
            settlement_basis=basis,
        )
    except (KeyError, TypeError, MoneyError) as exc:
        raise wx.DecryptError(f"refund resource lacks or mistypes {exc}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


class WeChatRefunds:
    """The per-channel refund client the RefundService calls (create / query), WeChat Pay v3."""

    channel = wx.STORED

    def __init__(self, client: wx.WeChatPayClient, notify_url: str):
        self.client = client
        self.notify_url = notify_url

    def create(self, refund: dict[str, Any]) -> ChannelAnswer:
        body: dict[str, Any] = {
            "out_refund_no": refund["refund_no"],
            "reason": refund.get("reason") or None,
            "notify_url": self.notify_url or None,
            "amount": {
                "refund": cents(refund["amount_cent"]),
                "total": cents(refund["total_cent"]),
                "currency": refund.get("currency") or "CNY",
            },
        }
        if refund.get("transaction_id"):
            body["transaction_id"] = refund["transaction_id"]
        else:
            body["out_trade_no"] = refund["out_trade_no"]
        if refund.get("sp_mchid"):
            body["sub_mchid"] = refund["mchid"]  # partner (§2.3): the provider signs, the refund is the sub's
        body = {k: v for k, v in body.items() if v is not None}
        try:
            answer = self.client.request("POST", CREATE_PATH, body)
        except wx.WeChatCallError as exc:
            return _error_answer(exc, CREATE_ERRORS)
        return _refund_answer(answer, AnswerKind.ACCEPTED)

    def apply_abnormal(
        self, refund: dict[str, Any], route: str, card: dict[str, str] | None = None
    ) -> ChannelAnswer:
        """Send an ABNORMAL refund to the merchant's bank account or the user's bank card. ACCEPTED means the
        channel took the new route (PROCESSING again): the outcome still comes only by notification or query."""
        kind = ABNORMAL_ROUTES.get(route)
        if kind is None:
            raise ValueError(f"route must be one of {', '.join(ABNORMAL_ROUTES)}, not {route!r}")
        if not refund.get("refund_id"):
            raise ValueError(f"refund {refund['refund_no']} has no channel refund_id yet")
        provider = refund.get("sp_mchid") or None
        signer = self.client.creds.mchid
        if signer != (provider or refund["mchid"]):
            # The credentials that would sign are not those the refund was made with: the sub-merchant now
            # belongs to another provider (or changed mode). That provider cannot reroute it (R39, R11).
            raise ProviderMismatch(
                f"refund {refund['refund_no']} of merchant {refund['mchid']} was made through "
                f"{'provider ' + provider if provider else 'its own credentials'}; merchant {signer}'s "
                "credentials cannot send it to another account"
            )
        body: dict[str, Any] = {"out_refund_no": refund["refund_no"], "type": kind}
        if provider:
            body["sub_mchid"] = refund["mchid"]  # partner: the provider signs, the refund is the sub's (R11)
        serial = None
        if kind == "USER_BANK_CARD":
            missing = [f for f in USER_CARD_FIELDS if not (card or {}).get(f)]
            if missing:
                raise ValueError(f"the user's bank card needs {', '.join(missing)}")
            assert card is not None
            serial, key = self.client.encryption_key()
            body["bank_type"] = card["bank_type"]
            body["bank_account"] = wx.encrypt_sensitive(key, card["bank_account"])
            body["real_name"] = wx.encrypt_sensitive(key, card["real_name"])
        path = f"{CREATE_PATH}/{quote(str(refund['refund_id']), safe='')}/apply-abnormal-refund"
        try:
            answer = self.client.request("POST", path, body, serial=serial)
        except wx.WeChatCallError as exc:
            return _error_answer(exc, ABNORMAL_ERRORS)
        return _refund_answer(answer, AnswerKind.ACCEPTED)

    def query(self, refund: dict[str, Any]) -> ChannelAnswer:
        path = f"{CREATE_PATH}/{quote(refund['refund_no'], safe='')}"
        if refund.get("sp_mchid"):
            path += f"?sub_mchid={quote(str(refund['mchid']), safe='')}"  # partner (§2.4)
        try:
            answer = self.client.request("GET", path, None)
        except wx.WeChatCallError as exc:
            if exc.status == 404 and exc.code == "RESOURCE_NOT_EXISTS":
                return ChannelAnswer(AnswerKind.NOT_FOUND, code=exc.code, message=str(exc))
            return ChannelAnswer(AnswerKind.RETRY, code=exc.code, message=str(exc))
        found = _refund_answer(answer, AnswerKind.OUTCOME)
        if found.kind is not AnswerKind.OUTCOME or found.event is None:
            return found
        try:
            # the query's Refund object carries no mchid: it is the merchant whose credentials asked (partner:
            # the provider asked about its sub-merchant's refund)
            asked: dict[str, Any] = (
                {"sp_mchid": self.client.creds.mchid, "sub_mchid": refund["mchid"]}
                if refund.get("sp_mchid")
                else {"mchid": self.client.creds.mchid}
            )
            notice = to_refund_notice({**asked, **answer}, source="query")
        except wx.DecryptError as exc:
            return ChannelAnswer(AnswerKind.UNKNOWN, refund_id=found.refund_id, message=str(exc))
        return replace(found, notice=notice)


def _refund_answer(answer: Any, kind: AnswerKind) -> ChannelAnswer:
    if not isinstance(answer, dict) or not answer.get("refund_id") or not answer.get("status"):
        return ChannelAnswer(
            AnswerKind.UNKNOWN, message=f"refund answer without refund_id/status: {str(answer)[:200]}"
        )
    status = str(answer["status"])
    if status not in REFUND_STATUS:
        return ChannelAnswer(
            AnswerKind.UNKNOWN,
            refund_id=str(answer["refund_id"]),
            code=status,
            message=f"unmapped refund status {status!r}",
        )
    amount = answer.get("amount") or {}
    refund = amount.get("refund")
    return ChannelAnswer(
        kind,
        event=REFUND_STATUS[status],
        refund_id=str(answer["refund_id"]),
        refund_cent=refund if isinstance(refund, int) and not isinstance(refund, bool) else None,
        success_time=answer.get("success_time") or None,
        code=status,
    )


def _error_answer(exc: wx.WeChatCallError, table: dict[str, AnswerKind]) -> ChannelAnswer:
    if exc.retryable or exc.status == 0:
        return ChannelAnswer(AnswerKind.RETRY, code=exc.code, message=str(exc))  # "sent, outcome unknown"
    kind = table.get(exc.code, AnswerKind.UNKNOWN)
    return ChannelAnswer(kind, code=exc.code, message=str(exc))
