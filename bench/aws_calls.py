"""AWS calls per payment, counted with botocore event hooks on moto (warm containers)."""

from __future__ import annotations

import os
import pathlib
from collections import Counter
from contextlib import contextmanager

from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

ROOT = pathlib.Path(__file__).resolve().parents[1]


@contextmanager
def counting(clients):
    """Count AWS API calls with botocore's own event hooks (before-call) on the given clients."""
    calls: Counter[str] = Counter()

    def hook(model, **_):
        calls[f"{model.service_model.service_name}:{model.name}"] += 1

    for client in clients:
        client.meta.events.register("before-call", hook, unique_id="tally-bench-count")
    try:
        yield calls
    finally:
        for client in clients:
            client.meta.events.unregister("before-call", unique_id="tally-bench-count")


def run() -> list[tuple[str, ...]]:
    import json

    import boto3
    from moto import mock_aws
    from tally import bootstrap
    from tally.apigw import HttpRequest
    from tally.channels import registry

    from tally_local.resources import create_from_template
    from tally_local.simulator import ChannelSimulator

    os.environ.update(
        AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    rows = []
    with ChannelSimulator(fixed_keys=True).start() as sim, mock_aws():
        env = create_from_template(
            ROOT / "template.yaml",
            boto3.Session(region_name="us-east-1"),
            parameter_overrides={"WechatPayApiBase": sim.url},
        )
        os.environ.update(env)
        bootstrap.reset()
        m = sim.register_test_merchant()
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
            mchid=m["mchid"],
            apiv3_key=m["apiv3_key"],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url="http://127.0.0.1:9/n",
            public_key=sim.public_key_pem,
            public_key_id=sim.public_key_id,
        )
        orders, ingest, apply = (
            bootstrap.order_service(),
            bootstrap.ingest_service(),
            bootstrap.apply_service(),
        )
        sqs = boto3.client("sqs")
        clients = [bootstrap._client(name) for name in ("dynamodb", "sqs", "secretsmanager")]

        def pay(no):
            # prepaid at the simulator and paid there, so a later refund of it is ACCEPTED like a real one
            orders.create(
                {
                    "mchid": m["mchid"],
                    "out_trade_no": no,
                    "amount_cent": 100,
                    "description": "b",
                    "prepay": True,
                }
            )
            sim.pay(m["mchid"], no, drop=True)
            res = sim.get_order(m["mchid"], no)["transaction"]
            headers, body = sim.build_notification(m["mchid"], res)
            return HttpRequest(
                "POST", "/n", {k.lower(): v for k, v in headers.items()}, body, {"mchid": m["mchid"]}
            )

        def work():
            msgs = sqs.receive_message(QueueUrl=env["APPLY_QUEUE_URL"], MaxNumberOfMessages=10)["Messages"]
            for msg in msgs:
                sqs.delete_message(QueueUrl=env["APPLY_QUEUE_URL"], ReceiptHandle=msg["ReceiptHandle"])
            return [json.loads(msg["Body"]) for msg in msgs]

        ingest.notify(
            registry.get("wechatpay_v3"), pay("BENCH-WARMUP-1")
        )  # warm: merchant credentials cached per container
        for body in work():
            apply.apply(body["raw_key"], body.get("notice"))
        request = pay("BENCH-ORDER-02")
        with counting(clients) as first:
            ingest.notify(registry.get("wechatpay_v3"), request)
        (message,) = work()
        with counting(clients) as worker:
            apply.apply(message["raw_key"], message.get("notice"))
        with counting(clients) as duplicate:
            ingest.notify(registry.get("wechatpay_v3"), request)
        # the poller's confirmation of a payment whose callbacks were all lost (query + book in one go)
        lost = "BENCH-ORDER-03"
        orders.create(
            {
                "mchid": m["mchid"],
                "out_trade_no": lost,
                "amount_cent": 100,
                "description": "b",
                "prepay": True,
            }
        )
        sim.pay(m["mchid"], lost, drop=True)
        order = orders.orders.get(m["mchid"], lost)
        order["created_at"] = "2000-01-01T00:00:00.000Z"  # old enough to be confirmed now
        with counting(clients) as confirm:
            bootstrap.poll_service().confirm(order)
        # refunds of the booked payment: with the number Tally generates (reserve-and-read in one call, the
        # channel, the answer stored), and with the caller's own number (checked unused before the channel)
        with counting(clients) as refund:
            bootstrap.refund_service().create(
                {"mchid": m["mchid"], "out_trade_no": "BENCH-ORDER-02", "amount_cent": 10, "reason": "bench"}
            )
        with counting(clients) as named_refund:
            bootstrap.refund_service().create(
                {
                    "mchid": m["mchid"],
                    "out_trade_no": "BENCH-ORDER-02",
                    "amount_cent": 10,
                    "reason": "bench",
                    "refund_no": "BENCH-REFUND-01",
                }
            )
        rows += [
            ("AWS calls: notify, first delivery", str(sum(first.values())), "target ≤ 2", _detail(first)),
            ("AWS calls: notify, duplicate", str(sum(duplicate.values())), "target ≤ 1", _detail(duplicate)),
            ("AWS calls: worker apply", str(sum(worker.values())), "target ≤ 2", _detail(worker)),
            (
                "AWS calls: poller confirmation (lost callbacks)",
                str(sum(confirm.values())),
                "+ 1 channel query",
                _detail(confirm),
            ),
            (
                "AWS calls: refund create",
                str(sum(refund.values())),
                "target ≤ 2 + channel call",
                _detail(refund),
            ),
            (
                "AWS calls: refund create, caller's refund_no",
                str(sum(named_refund.values())),
                "+ 1: the number is checked unused first (docs/cost.md)",
                _detail(named_refund),
            ),
        ]
    bootstrap.reset()
    return rows


def _detail(calls) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in sorted(calls.items()))


if __name__ == "__main__":
    from bench.common import print_section

    print_section(run)
