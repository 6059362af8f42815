"""Reconciliation test helpers shared by the recon test modules (test modules never import from each other): the
bill day, a payment booked through the real notify + worker path, the service's metrics, the kept bills in S3, a
WeChat Pay v2 merchant."""

from __future__ import annotations

import json
import random

import boto3
from tally import bootstrap
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk

from tests.integration.channel_kit import Alipay

D = "2024-05-01"
D_BEFORE = "2024-04-30"


def pay(h, mchid, cents, success_time, *, deliver=True, otn=None):
    otn = otn or f"R{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=cents, prepay=True)["statusCode"] == 201
    tid = h.sim.pay(mchid, otn, drop=True, success_time=success_time)
    if deliver:
        resource = h.sim.get_order(mchid, otn)["transaction"]
        headers, body = h.sim.build_notification(mchid, resource)
        assert h.notify(mchid, headers, body)["statusCode"] == 204
        assert h.drain() == []
    return otn, tid


def book_ghost(h, mchid, ghost, cents=777, day=D):
    """A PAYMENT entry in our books that no channel's bill lists (a LOCAL_ONLY difference for `day`)."""
    from tally.store.codec import to_item
    from tally.store.recon import with_bill_shard

    row = {
        "pk": ghost,
        "kind": "PAYMENT",
        "channel": "wechatpay",
        "mchid": mchid,
        "transaction_id": ghost[10:],
        "order_pk": f"{mchid}#GHOST",
        "amount_cent": cents,
        "bill_date": day,
        "booked_at": "x",
        "source": "notify",
    }
    h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(with_bill_shard(row)))


def metric(h, name):
    """Metrics the service counted (direct calls are not wrapped by the handler's log_metrics)."""
    from tally.observability import metrics

    metrics.flush_metrics()
    h._collect_metrics()
    return h.metric(name)


def s3_keys(prefix):
    s3 = boto3.client("s3")
    bucket = bootstrap.settings().bills_bucket
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def new_v2(h, sim, mchid=None, **record):
    m = sim.wechatpay_v2.register_test_merchant(mchid or str(random.randrange(10**9, 10**10)))
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=m["mch_id"],
        api_key=m["api_key"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{m['mch_id']}",
        **record,
    )
    return m


def pay_v2(h, sim, m, cents, time_end):
    """A v2 order created through our API, paid in the simulator on `time_end`, its notification booked."""
    response = h.create_order(m["mch_id"], amount_cent=cents, prepay=True, channel="wechatpay_v2")
    assert response["statusCode"] == 201, response
    otn = json.loads(response["body"])["out_trade_no"]
    tid = sim.wechatpay_v2.pay(m["mch_id"], otn, drop=True, time_end=time_end)
    order = sim.wechatpay_v2.orders[(m["mch_id"], otn)]
    fields = sim.wechatpay_v2.payment_params(
        m["mch_id"], otn, order["total_fee"], transaction_id=tid, time_end=time_end
    )
    body = sim.wechatpay_v2.build_notification(fields)
    answer = h.call(
        "NotifyFunction",
        "POST",
        f"/notify/wechatpay-v2/{m['mch_id']}",
        body,
        {"content-type": "text/xml"},
        {"mchid": m["mch_id"]},
    )
    assert answer["statusCode"] == 200, answer
    assert h.drain() == []
    return otn, tid


def alipay_pay(h, app_id, cents, paid_at, *, deliver=True, created_at=None, receipt=None):
    """An Alipay order paid at `paid_at` (Beijing); `deliver` sends the signed notification through our handler."""
    response = h.create_order(app_id, amount_cent=cents, prepay=True, channel="alipay")
    assert response["statusCode"] == 201, response
    otn = json.loads(response["body"])["out_trade_no"]
    trade_no = h.sim.alipay.pay(
        app_id, otn, drop=True, paid_at=paid_at, created_at=created_at, receipt_amount=receipt
    )
    if deliver:
        order = h.sim.alipay.orders[(app_id, otn)]
        params = h.sim.alipay.notification_params(
            app_id,
            otn,
            cents,
            trade_no=trade_no,
            receipt_amount=order["receipt"],
            gmt_payment=paid_at,
            gmt_create=created_at or paid_at,
        )
        assert Alipay(h).notify(app_id, h.sim.alipay.build_notification(params), {})["statusCode"] == 200
        assert h.drain() == []
    return otn, trade_no
