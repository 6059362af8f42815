"""What each cost patch of tally_local/moto_fixes.py buys on this moto: `python -m bench.moto_patches`.

For each cost patch, a workload that reaches the moto path it replaces runs against a ThreadedMotoServer (real
HTTP, as the embedded stack's moto) in a child process twice: with every patch installed, and with every patch but
that one. The figure is the process CPU of the workload (client and server in one process: the same work on both
sides), best of three inside the child; the pairs alternate (with, without, with, ...) and the ratio
without / with is taken pair by pair, its median printed. A ratio near 1.0 says the patch no longer buys
anything on this moto; the patches' answers are pinned by tests/integration/test_moto_*.py, not here.

`--patch NAME` measures one patch; `--pairs N` (default 3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# cost patch -> the workload that reaches the moto path it replaces
WORKLOADS = {
    "item_level_rollback": "transact",
    "cached_module_list": "get_item",
    "cached_jsonpath": "put_events",
    "one_queue_attribute": "queue_attributes",
    "cached_update_parser": "update_item",
    "cached_alias_keys": "get_item",
    "cached_action_names": "get_item",
    "cached_processing_maps": "update_item",
    "structural_checks_once": "update_item",
    "item_size_checked_once": "put_item",
    "plain_ast_copy": "update_item",
    "query_by_hash_key": "query_index",
    "items_as_json": "query_page",
    "backlog_with_one_clock": "queue_backlog",
}

ITEM = {f"attr{n:02d}": {"S": f"value {n}"} for n in range(28)} | {"n": {"N": "0"}}


def _table(ddb: Any, name: str, ranged: bool = False, gsi: bool = False) -> None:
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
    if ranged:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attrs.append({"AttributeName": "sk", "AttributeType": "S"})
    extra: dict[str, Any] = {}
    if gsi:
        attrs.append({"AttributeName": "status", "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by_status",
                "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    ddb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=keys,
        AttributeDefinitions=attrs,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        **extra,
    )


def _fill(ddb: Any, name: str, count: int, item: Callable[[int], dict[str, Any]]) -> None:
    for start in range(0, count, 25):
        requests = [{"PutRequest": {"Item": item(n)}} for n in range(start, min(count, start + 25))]
        ddb.batch_write_item(RequestItems={name: requests})


def workload(name: str, session: Any) -> Callable[[], None]:
    """Set up `name`'s data; return the timed part."""
    ddb = session.client("dynamodb")
    if name == "get_item":
        _table(ddb, "t")
        ddb.put_item(TableName="t", Item={"pk": {"S": "o1"}, **ITEM})
        return lambda: [ddb.get_item(TableName="t", Key={"pk": {"S": "o1"}}) for _ in range(150)] and None
    if name == "put_item":
        _table(ddb, "t")
        return lambda: (
            [ddb.put_item(TableName="t", Item={"pk": {"S": f"o{n}"}, **ITEM}) for n in range(150)] and None
        )
    if name == "update_item":
        _table(ddb, "t")
        ddb.put_item(TableName="t", Item={"pk": {"S": "o1"}, **ITEM})

        def update() -> None:
            for n in range(150):
                ddb.update_item(
                    TableName="t",
                    Key={"pk": {"S": "o1"}},
                    UpdateExpression="SET #st = :to, paid_at = :p, amount = if_not_exists(amount, :a), "
                    "n = n + :one REMOVE poll_pk, poll_due",
                    ConditionExpression="attribute_not_exists(#st) OR #st IN (:a1, :a2, :to)",
                    ExpressionAttributeNames={"#st": "status"},
                    ExpressionAttributeValues={
                        ":to": {"S": "PAID"},
                        ":p": {"S": f"2026-12-06T10:00:{n % 60:02d}"},
                        ":a": {"N": "1999"},
                        ":one": {"N": "1"},
                        ":a1": {"S": "CREATED"},
                        ":a2": {"S": "PENDING"},
                    },
                )

        return update
    if name == "transact":
        _table(ddb, "orders")
        _table(ddb, "ledger", ranged=True)
        _fill(ddb, "orders", 400, lambda n: {"pk": {"S": f"o{n}"}, **ITEM})
        _fill(ddb, "ledger", 400, lambda n: {"pk": {"S": f"o{n}"}, "sk": {"S": "PAY"}, **ITEM})

        def transact() -> None:
            for n in range(30):
                ddb.transact_write_items(
                    TransactItems=[
                        {
                            "Update": {
                                "TableName": "orders",
                                "Key": {"pk": {"S": f"o{n}"}},
                                "UpdateExpression": "SET n = n + :one",
                                "ExpressionAttributeValues": {":one": {"N": "1"}},
                            }
                        },
                        {
                            "Put": {
                                "TableName": "ledger",
                                "Item": {"pk": {"S": f"o{n}"}, "sk": {"S": f"FEE#{time.monotonic_ns()}"}},
                            }
                        },
                    ]
                )

        return transact
    if name == "query_index":
        _table(ddb, "raw", gsi=True)
        _fill(ddb, "raw", 3000, lambda n: {"pk": {"S": f"r{n}"}, "status": {"S": f"s{n % 100}"}, **ITEM})

        def query_index() -> None:
            for n in range(40):
                ddb.query(
                    TableName="raw",
                    IndexName="by_status",
                    KeyConditionExpression="#s = :s",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":s": {"S": f"s{n}"}},
                )

        return query_index
    if name == "query_page":
        _table(ddb, "bills", ranged=True)
        _fill(ddb, "bills", 600, lambda n: {"pk": {"S": "day"}, "sk": {"S": f"{n:05d}"}, **ITEM})

        def query_page() -> None:
            for _ in range(4):
                ddb.query(
                    TableName="bills",
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": "day"}},
                )

        return query_page
    sqs = session.client("sqs")
    if name == "put_events":
        events = session.client("events")
        url = sqs.create_queue(QueueName="downstream")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="paid", EventPattern=json.dumps({"source": ["tally"]}))
        events.put_targets(Rule="paid", Targets=[{"Id": "q", "Arn": arn}])
        entry = {"Source": "tally", "DetailType": "OrderPaid", "Detail": json.dumps({"order": "o1"})}
        return lambda: [events.put_events(Entries=[entry]) for _ in range(60)] and None
    url = sqs.create_queue(QueueName="apply")["QueueUrl"]
    for start in range(0, 1000, 10):
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"m{start + n}"} for n in range(10)]
        )

    if name == "queue_attributes":

        def attributes() -> None:
            for _ in range(60):
                sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
                sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=0)

        return attributes

    def backlog() -> None:  # the SQS pump's round: send, receive a batch, delete it
        for n in range(15):
            sqs.send_message(QueueUrl=url, MessageBody=f"new{n}")
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if got:
                sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
                )

    return backlog


def child(without: str, name: str) -> float:
    """Install every patch but `without`, run workload `name` on a threaded moto server; its CPU seconds."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    from tally_local import moto_fixes

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto_fixes.check_moto_version()
    for patch in moto_fixes.PATCHES:
        if patch.__name__ != without:
            patch()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    endpoint = f"http://{host}:{port}"
    real_client = session.client
    session.client = lambda service, **kw: real_client(service, endpoint_url=endpoint, **kw)  # type: ignore[method-assign]
    try:
        run = workload(name, session)
        run()  # warm: parsers, shapes, caches, the first index build
        best = []
        for _ in range(3):
            start = time.process_time()
            run()
            best.append(time.process_time() - start)
        return min(best)
    finally:
        server.stop()


def measure(patch: str, pairs: int) -> dict[str, Any]:
    def once(without: str) -> float:
        done = subprocess.run(
            [sys.executable, "-m", "bench.moto_patches", "--child", without, WORKLOADS[patch]],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        return float(done.stdout.strip().splitlines()[-1])

    withs, withouts, ratios = [], [], []
    for _ in range(pairs):
        withs.append(once(""))
        withouts.append(once(patch))
        ratios.append(withouts[-1] / withs[-1])
    return {
        "patch": patch,
        "workload": WORKLOADS[patch],
        "with_ms": statistics.median(withs) * 1000,
        "without_ms": statistics.median(withouts) * 1000,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patch", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("WITHOUT", "WORKLOAD"))
    args = parser.parse_args()
    if args.child:
        print(child(*args.child))
        return 0
    print(f"{'patch':<24} {'workload':<17} {'with':>9} {'without':>10} {'ratio':>6}  ratios")
    for patch in args.patch or list(WORKLOADS):
        row = measure(patch, args.pairs)
        print(
            f"{row['patch']:<24} {row['workload']:<17} {row['with_ms']:>7.0f}ms {row['without_ms']:>8.0f}ms "
            f"{row['ratio']:>6.2f}  {' '.join(f'{r:.2f}' for r in row['ratios'])}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
