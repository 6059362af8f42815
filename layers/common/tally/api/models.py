"""The merchant API's requests and answers as pydantic models: what docs/openapi.json says, what the orders and
refunds functions parse and answer. Requests are strict (cents are JSON integers: never a decimal, a string or
a boolean, R14); answers keep only the public keys: a stored row's internal keys (pk, version, poll and hold
bookkeeping, tenant, raw rows) never reach a merchant, whatever the row carries."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from tally.channels import registry
from tally.domain.money import MAX_CENT

MCHID = r"^[0-9]{1,32}$"  # tally.domain.notifications.is_merchant_id
OUT_TRADE_NO = r"^[0-9A-Za-z_\-*]{6,32}$"  # tally.service.orders.OUT_TRADE_NO
REFUND_NO = r"^[0-9A-Za-z_\-|*@]{6,64}$"  # tally.service.refunds.REFUND_NO
CHANNELS = tuple(c.order_word for c in registry.all_channels())  # the request field `channel`
DEFAULT_CHANNEL = registry.default().order_word
ChannelWord = Literal[CHANNELS]  # type: ignore[valid-type]
ORDER_STATUSES = ("WAIT_PAY", "PAID", "CLOSED", "PAY_FAILED")
REFUND_STATUSES = ("PENDING", "ACCEPTED", "SUCCESS", "FAIL", "MANUAL", "CLOSED")

Mchid = Annotated[str, Field(pattern=MCHID, description="the merchant number: 1-32 digits")]
OutTradeNo = Annotated[
    str,
    Field(pattern=OUT_TRADE_NO, description="the merchant's order number: 6-32 characters of [0-9A-Za-z_-*]"),
]
Cents = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_CENT,
        description=f"an integer number of cents from 1 to {MAX_CENT} (no decimals, no strings)",
    ),
]
ExpireMinutes = Annotated[
    int, Field(ge=1, le=7 * 24 * 60, description="minutes until the order expires: 1-10080")
]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="a 3-letter ISO code such as CNY")]
Description = Annotated[str, Field(min_length=1, max_length=127, description="1-127 characters")]


class Request(BaseModel):
    """Every key is checked strictly, and a key the API does not know is refused (`unknown_field`): a misspelt
    optional field would otherwise fall back to its default unseen (an order expiring at 120 minutes, not 30)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class OrderRequest(Request):
    """POST /orders: register an order (and by default get its Native prepay QR code)."""

    mchid: Mchid
    out_trade_no: OutTradeNo
    amount_cent: Cents
    description: Description
    currency: Currency = "CNY"
    expire_minutes: ExpireMinutes = 120
    prepay: bool = Field(True, description="true: call the channel's Native prepay and answer its code_url")
    channel: ChannelWord = Field(DEFAULT_CHANNEL, description="the channel that collects the payment")


class SubOrderRequest(Request):
    mchid: Mchid | None = Field(None, description="the sub-order's merchant; default: the combine merchant")
    out_trade_no: OutTradeNo
    amount_cent: Cents
    currency: Currency = "CNY"
    description: Description | None = None


class CombineOrderRequest(Request):
    """POST /orders with `combine: true`: a WeChat Pay v3 combine order (合单), one prepay for 1-10 sub-orders."""

    combine: Literal[True]
    mchid: Mchid
    combine_out_trade_no: OutTradeNo
    description: Description | None = None
    expire_minutes: ExpireMinutes = 120
    prepay: bool = True
    channel: Literal[DEFAULT_CHANNEL] = DEFAULT_CHANNEL  # type: ignore[valid-type]
    sub_orders: list[SubOrderRequest] = Field(min_length=1, max_length=10)


class RefundRequest(Request):
    """POST /refunds: refund part or all of a paid order (R26-R30)."""

    mchid: Mchid
    out_trade_no: OutTradeNo
    amount_cent: Cents
    reason: str = Field("", max_length=80, description="at most 80 characters, shown to the payer")
    refund_no: str | None = Field(
        None,
        pattern=REFUND_NO,
        description="your refund number (6-64 characters of [0-9A-Za-z_-|*@]); absent: Tally makes one",
    )


# ------------------------------------------------------------------------------------------------ answers


class Answer(BaseModel):
    """An answer: only the declared keys leave (extra keys of a stored row are dropped)."""

    model_config = ConfigDict(extra="ignore")


class Order(Answer):
    mchid: str
    out_trade_no: str
    channel: str
    status: Literal["WAIT_PAY", "PAID", "CLOSED", "PAY_FAILED"]
    amount_cent: int = Field(description="the order amount, integer cents")
    currency: str
    description: str
    paid_cent: int = Field(0, description="what the payer paid (R13), integer cents")
    refundable_cent: int = Field(0, description="what is left to refund: paid − refunded − in flight (R27)")
    created_at: str
    expire_at: str
    expire_minutes: int | None = None
    prepay: bool | None = None
    updated_at: str | None = None
    sp_mchid: str | None = Field(None, description="the service provider, in service-provider mode")
    api: str | None = Field(
        None, description="the channel API the order was placed with, when not the default"
    )
    code_url: str | None = Field(None, description="WeChat Pay: the Native QR code's URL")
    qr_code: str | None = Field(None, description="Alipay: the precreate QR code")
    prepay_error: str | None = Field(None, description="why the last prepay failed")
    transaction_id: str | None = Field(None, description="the channel's payment id, once paid")
    paid_at: str | None = None
    closed_at: str | None = None
    refund_holds: dict[str, int] | None = Field(
        None, description="refunds reserved on this order and not yet stored: refund_no → cents"
    )
    combine_out_trade_no: str | None = None
    combine_mchid: str | None = None


class Transition(Answer):
    at: str
    event: str
    from_status: str | None = None
    to_status: str | None = None
    source: str | None = Field(None, description="what moved it: notify, poll, return page …")


class OrderDetail(Order):
    """GET /orders/{mchid}/{out_trade_no}: the order and its transitions, oldest first."""

    transitions: list[Transition] = []


class CombineOrder(Answer):
    combine: Literal[True] = True
    mchid: str
    combine_out_trade_no: str
    code_url: str | None = None
    amount_cent: int
    sub_orders: list[Order]


class Refund(Answer):
    refund_no: str
    mchid: str
    out_trade_no: str
    channel: str
    status: Literal["PENDING", "ACCEPTED", "SUCCESS", "FAIL", "MANUAL", "CLOSED"]
    in_flight: bool = Field(
        description="true while the refund's money may still go out (its amount is reserved)"
    )
    amount_cent: int = Field(description="this refund, integer cents")
    total_cent: int | None = Field(None, description="the order's amount, integer cents")
    currency: str | None = None
    reason: str | None = None
    created_at: str
    updated_at: str | None = None
    sp_mchid: str | None = None
    transaction_id: str | None = None
    refund_id: str | None = Field(None, description="the channel's refund id")
    success_time: str | None = None
    fail_reason: str | None = None


class FieldError(BaseModel):
    field: str = Field(description="the field at fault, dotted for nested ones (sub_orders.0.amount_cent)")
    code: str = Field(description="docs/errors.md: missing, wrong_type, bad_format, out_of_range, differs …")
    message: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="the stable machine code (docs/errors.md)")
    message: str = Field(description="for engineers, English")
    errors: list[FieldError] = Field(
        description="every field at fault; empty when the error is not a field's"
    )
    refundable_cent: int | None = Field(None, description="exceeds_refundable: what is left to refund")
    amount_cent: int | None = Field(None, description="exceeds_refundable: the amount asked")
    order: Order | CombineOrder | None = Field(None, description="prepay_failed: the stored order")


class Error(BaseModel):
    """Every error answer, whatever its status."""

    error: ErrorDetail
