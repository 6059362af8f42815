"""Reconciliation test helpers shared by the recon test modules (test modules never import from each other): the
bill day, a payment booked through the real notify + worker path, the service's metrics, the kept bills in S3, a
WeChat Pay v2 merchant."""

from __future__ import annotations

import random

import boto3
from tally import bootstrap

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
    bootstrap.merchants().add_wechatpay_v2(
        mchid=m["mch_id"],
        api_key=m["api_key"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{m['mch_id']}",
        **record,
    )
    return m
