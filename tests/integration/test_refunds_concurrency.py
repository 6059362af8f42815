"""Refund races on moto's SERVER mode (ThreadedMotoServer: real threads, real HTTP), R26–R28.

In-process mock_aws is not thread-safe; here every client talks to a moto server through
AWS_ENDPOINT_URL, and the channel is the simulator over HTTP.

The server is tests/integration/conftest.py's AtomicMotoServer (`moto_server`, `server_aws`): moto's threaded
server applying one request at a time, as DynamoDB applies each request atomically (measured there).
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from tally import bootstrap
from tally.apigw import HttpRequest
from tally.channels import registry
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.domain.refunds import ExceedsRefundable
from tally.service.refunds import RefundConflict


@pytest.fixture(autouse=True)
def _refunds_held(server_aws, sim):
    """The simulator accepts refunds and holds them (no notification): the races are about the reservation."""
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    yield
    sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})


def paid(sim, amount):
    m = sim.register_test_merchant()
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay/{m['mchid']}",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    otn = f"C{uuid.uuid4().hex[:20]}"
    bootstrap.order_service().create(
        {
            "mchid": m["mchid"],
            "out_trade_no": otn,
            "amount_cent": amount,
            "description": "race",
            "prepay": True,
        }
    )
    tid = sim.pay(m["mchid"], otn, drop=True)
    headers, body = sim.build_notification(m["mchid"], sim.transaction_view(m["mchid"], otn))
    request = HttpRequest(
        "POST",
        f"/notify/wechatpay/{m['mchid']}",
        {k.lower(): v for k, v in headers.items()},
        body,
        {"mchid": m["mchid"]},
    )
    assert bootstrap.ingest_service().notify(registry.get("wechatpay_v3"), request).status == 204
    assert bootstrap.apply_service().apply(f"wechatpay#{m['mchid']}#{tid}").value == "BOOKED"
    return m["mchid"], otn


def race(calls):
    """Run the callables on real threads released together; returns their results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each caller got
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def order_of(mchid, otn):
    return bootstrap.order_service().show(mchid, otn)


def test_R27_twenty_concurrent_partial_refunds_never_exceed_the_payment(server_aws, sim):
    mchid, otn = paid(sim, 1000)
    service = bootstrap.refund_service()
    amounts = [random.Random(7).randint(60, 140) for _ in range(20)]  # ~2000 asked of 1000 paid
    results = race(
        [
            lambda a=a: service.create(
                {"mchid": mchid, "out_trade_no": otn, "amount_cent": a, "reason": "race"}
            )
            for a in amounts
        ]
    )
    accepted = [(a, r[0]) for a, r in zip(amounts, results, strict=True) if isinstance(r, tuple)]
    refused = [r for r in results if not isinstance(r, tuple)]
    assert all(isinstance(r, ExceedsRefundable) and "exceeds refundable" in str(r) for r in refused), refused
    assert accepted and refused and len(accepted) + len(refused) == 20
    total = sum(a for a, _ in accepted)
    assert total <= 1000
    assert all(view["status"] == "ACCEPTED" for _, view in accepted)
    assert order_of(mchid, otn)["refundable_cent"] == 1000 - total
    assert total > 1000 - max(amounts)  # the guard refused only what did not fit
    at_channel = [r for r in sim.refunds() if r["out_trade_no"] == otn]
    assert sorted(r["amount"]["refund"] for r in at_channel) == sorted(a for a, _ in accepted)


def test_R26_the_same_refund_sent_ten_times_concurrently_reserves_once_and_calls_once(server_aws, sim):
    mchid, otn = paid(sim, 500)
    service = bootstrap.refund_service()
    no = f"SAME{uuid.uuid4().hex[:20]}"
    calls_before = len([r for r in sim.requests if r["path"] == "/v3/refund/domestic/refunds"])
    results = race(
        [
            lambda: service.create(
                {"mchid": mchid, "out_trade_no": otn, "amount_cent": 300, "reason": "dup", "refund_no": no}
            )
        ]
        * 10
    )
    assert all(isinstance(r, tuple) and r[0]["refund_no"] == no for r in results), results
    assert sum(1 for r in results if r[1]) == 1  # one created, nine answered the existing refund
    assert order_of(mchid, otn)["refundable_cent"] == 200  # one reservation
    calls = [r for r in sim.requests if r["path"] == "/v3/refund/domestic/refunds"][calls_before:]
    assert len(calls) == 1  # one channel call
    assert len([r for r in sim.refunds() if r["out_refund_no"] == no]) == 1
    with pytest.raises(RefundConflict):
        service.create(
            {"mchid": mchid, "out_trade_no": otn, "amount_cent": 301, "reason": "x", "refund_no": no}
        )


def test_R29_three_concurrent_fail_reports_release_once(server_aws, sim):
    mchid, otn = paid(sim, 100)
    service = bootstrap.refund_service()
    view, _ = service.create({"mchid": mchid, "out_trade_no": otn, "amount_cent": 100, "reason": "x"})
    no = view["refund_no"]
    sim.settle_refund(no, "closed", notify=False)
    headers, body = sim.refund_notification(no)
    request = HttpRequest(
        "POST",
        f"/notify/wechatpay/{mchid}",
        {k.lower(): v for k, v in headers.items()},
        body,
        {"mchid": mchid},
    )
    assert bootstrap.ingest_service().notify(registry.get("wechatpay_v3"), request).status == 204
    results = race([lambda: service.apply_notification(f"wechatpay#{mchid}#{no}", "CLOSED").value] * 3)
    assert sorted(results).count("APPLIED") == 1, results
    assert order_of(mchid, otn)["refundable_cent"] == 100
    assert service.show(no)["status"] == "FAIL"
