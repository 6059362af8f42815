"""The combine resource → one PaymentNotice per sub-order (channels/wechatpay_v3/combine.py): shapes and bounds."""

from __future__ import annotations

import pytest
from tally.channels.wechatpay_v3 import combine
from tally.channels.wechatpay_v3.wire import DecryptError


def sub(**over):
    base = {
        "mchid": "1900000109",
        "trade_state": "SUCCESS",
        "transaction_id": "4200000000000000000000000001",
        "out_trade_no": "SUB-000001",
        "success_time": "2024-05-01T10:00:00+08:00",
        "amount": {"total_amount": 100, "payer_amount": 90, "currency": "CNY"},
    }
    return {**base, **over}


def resource(*subs):
    return {"combine_mchid": "1900000109", "combine_out_trade_no": "C-0001", "sub_orders": list(subs)}


def test_each_sub_order_is_an_ordinary_notice_booked_at_what_the_payer_paid():
    mchid, no, (notice,) = combine.sub_notices(resource(sub()))
    assert (mchid, no) == ("1900000109", "C-0001")
    assert (
        notice.raw_key == "wechatpay#1900000109#4200000000000000000000000001"
    )  # scoped by the merchant (R39)
    assert (notice.order_total_cent, notice.paid_cent, notice.mchid, notice.sp_mchid) == (
        100,
        90,
        "1900000109",
        None,
    )


def test_r11_partner_sub_order_belongs_to_its_sub_merchant_under_the_provider():
    _, _, (notice,) = combine.sub_notices(resource(sub(sub_mchid="1900000200")))
    assert (notice.mchid, notice.sp_mchid) == ("1900000200", "1900000109")


@pytest.mark.parametrize(
    "bad",
    [
        resource(),  # no sub-order
        resource(*[sub(out_trade_no=f"S-{i:06d}") for i in range(combine.MAX_SUB_ORDERS + 1)]),
        resource(sub(amount={"total_amount": 1.5})),  # money is integer cents
        resource(sub(amount={"total_amount": "100"})),
        resource(sub(transaction_id=123)),
        resource(sub(mchid="")),
        {"combine_out_trade_no": "C-0001", "sub_orders": [sub()]},  # no combine_mchid
        {**resource(sub()), "sub_orders": {"not": "a list"}},
    ],
)
def test_a_malformed_combine_resource_is_a_decrypt_error_never_a_crash(bad):
    with pytest.raises(DecryptError):
        combine.sub_notices(bad)
