"""The channel simulator's trade bills list each refund once (R31: the bill is the channel's truth, one row
per 商户退款单号 / 退款请求号), however often the simulator is told about it. The simulation's refund desk
settles a refund twice when its notification came before the API returned (seed 15): the bill must not show a
second, channel-only refund row for it."""

from tally_local.simulator import ChannelSimulator
from tally_local.simulator.bills import BillBook

D = "2024-05-01"


def _paid_v3(sim: ChannelSimulator) -> str:
    m = sim.register_test_merchant()
    with sim._lock:  # the books of a paid order, as the simulation's WeChatV3 kind writes them
        sim._orders[(m["mchid"], "O1")] = {
            "appid": m["appid"],
            "mchid": m["mchid"],
            "out_trade_no": "O1",
            "amount": {"total": 2000},
            "trade_state": "SUCCESS",
            "transaction": sim.transaction_resource(
                m["mchid"],
                "O1",
                2000,
                transaction_id="4200000000000000000000000001",
                success_time=f"{D}T10:00:00+08:00",
            ),
        }
    return m["mchid"]


def test_R31_wechat_bill_lists_a_refund_told_twice_once():
    sim = ChannelSimulator(fixed_keys=True, seed=0)
    mchid = _paid_v3(sim)
    book: BillBook = sim.bills
    first = book.add_refund(mchid, "O1", "RF1", 500, success_time=f"{D}T11:00:00+08:00")
    again = book.add_refund(mchid, "O1", "RF1", 500, success_time=f"{D}T11:05:00+08:00")
    book.add_refund(mchid, "O1", "RF2", 300, success_time=f"{D}T12:00:00+08:00")
    refund_rows = [r for r in book.rows(mchid, D) if r[9] == "REFUND"]
    assert [(r[15], r[16]) for r in refund_rows] == [("RF1", "5.00"), ("RF2", "3.00")]
    assert again["refund_id"] == first["refund_id"]  # the channel's refund id does not change
    summary = book._summary(book.rows(mchid, D))
    assert summary[0] == "3" and summary[2] == "8.00"  # 总交易单数, 退款总金额: RF1 counted once


def test_R31_alipay_bill_lists_a_refund_told_twice_once():
    sim = ChannelSimulator(fixed_keys=True, seed=0)
    ali = sim.alipay
    app = ali.register_test_merchant("public_key", "2021000000000999")["app_id"]
    with ali._lock:
        ali.orders[(app, "A1")] = {
            "app_id": app,
            "owner": app,
            "out_trade_no": "A1",
            "total": 2000,
            "subject": "o",
            "status": "TRADE_SUCCESS",
            "trade_no": "2024050122001000000001",
            "receipt": 2000,
            "gmt_payment": f"{D} 10:00:00",
        }
    ali.bills.add_refund(app, "A1", 500, "RQ1", refunded_at=f"{D} 11:00:00")
    ali.bills.add_refund(app, "A1", 500, "RQ1", refunded_at=f"{D} 11:05:00")
    ali.bills.add_refund(app, "A1", 300, "RQ2", refunded_at=f"{D} 12:00:00")
    refunds = [r for r in ali.bills.rows(app, D) if r[2] == "退款"]
    assert [(r[21].strip(), r[12]) for r in refunds] == [("RQ1", "-5.00"), ("RQ2", "-3.00")]
