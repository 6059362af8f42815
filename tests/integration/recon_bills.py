"""A WeChat Pay ALL trade bill (channel-spec §3.2) with every kind of difference, and the ledger that goes with
it: what the partitioned and the Distributed Map tests reconcile both ways."""

from __future__ import annotations

import random
from typing import Any

from tally.store.codec import to_item
from tally.store.recon import with_bill_shard

HEADER = (
    "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,"
    "应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,"
    "手续费,费率,订单金额,申请退款金额,费率备注"
)
SUMMARY = "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"
DAY = "2024-05-01"


def _money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def _fee(cents: int) -> int:
    return (cents * 6 + 500) // 1000  # 0.60 %, half up (fen)


def tx(i: int) -> str:
    return f"42000000012024050{i:011d}"


def day_of_differences(mchid: str, rows: int = 600, seed: int = 7) -> tuple[bytes, list[dict[str, Any]]]:
    """(the bill, the ledger rows) for one merchant's day: `rows` payments that match, plus one of each
    difference: channel-only, amount, status (REVOKED but booked), fee, a duplicate row, a matched refund, a
    refund the bill has and the ledger lacks, a local-only entry, and an entry corrected by a REVERSAL."""
    rnd = random.Random(seed)
    lines: list[list[str]] = []
    ledger: list[dict[str, Any]] = []
    sums = [0] * 6  # 应结订单金额, 退款金额, 充值券退款金额, 手续费 (fen), 订单金额, 申请退款金额

    def row(i: int, cents: int, *, state: str = "SUCCESS", fee: int | None = None, refund: int = 0) -> None:
        fee = _fee(refund or cents) * (-1 if refund else 1) if fee is None else fee
        settle = 0 if refund else cents
        values = [
            f"{DAY} {i % 24:02d}:{i % 60:02d}:00",
            "wx2421b1c4370ec43b",
            mchid,
            "0",
            "",
            tx(i),
            f"T{i:012d}",
            "oUpF8uMuAJO",
            "NATIVE",
            "REFUND" if refund else state,
            "OTHERS",
            "CNY",
            _money(settle),
            "0.00",
            f"5030{i:010d}" if refund else "0",
            f"RF{i:08d}" if refund else "0",
            _money(refund),
            "0.00",
            "ORIGINAL" if refund else "",
            "SUCCESS" if refund else "",
            "商品",
            "",
            _money(fee) + "000",
            "0.60%",
            _money(settle),
            _money(refund),
            "",
        ]
        for k, v in enumerate((settle, refund, 0, fee, settle, refund)):
            sums[k] += v
        lines.append(values)

    def booked(pk: str, cents: int, kind: str = "PAYMENT", **extra: Any) -> None:
        ledger.append(
            {"pk": pk, "kind": kind, "amount_cent": cents, "channel": "wechatpay", "mchid": mchid}
            | {"bill_date": DAY, **extra}
        )

    for i in range(rows):
        cents = rnd.randrange(100, 100_000)
        if i == 3:
            row(i, cents)  # CHANNEL_ONLY: never booked
        elif i == 5:
            row(i, cents)
            booked(f"wechatpay#{tx(i)}", cents + 1)  # AMOUNT_DIFFERS
        elif i == 9:
            row(i, cents, state="REVOKED")
            booked(f"wechatpay#{tx(i)}", cents)  # STATUS_DIFFERS
        elif i == 12:
            row(i, cents, fee=_fee(cents) + 7)  # a FEE difference (the payment itself matches)
            booked(f"wechatpay#{tx(i)}", cents)
        elif i == 15:
            row(i, cents)
            row(i, cents)  # the same payment twice in the bill
            booked(f"wechatpay#{tx(i)}", cents)
        elif i == 21:
            row(i, cents)
            booked(f"wechatpay#{tx(i)}", cents + 50)
            booked(
                f"wechatpay#{tx(i)}#REVERSAL#{DAY}", -50, "REVERSAL", reverses=f"wechatpay#{tx(i)}"
            )  # folded: agrees
        else:
            row(i, cents)
            booked(f"wechatpay#{tx(i)}", cents)
    row(rows + 1, 0, refund=700)
    booked(f"wechatpay#RF{rows + 1:08d}", 700, "REFUND", refund_no=f"RF{rows + 1:08d}")
    row(rows + 2, 0, refund=300)  # CHANNEL_ONLY refund
    booked(f"wechatpay#{tx(rows + 3)}", 4200)  # LOCAL_ONLY
    text = ["\ufeff" + HEADER] + ["`" + ",`".join(v) for v in lines]
    stated = [str(len(lines))] + [_money(s) for s in sums]
    text += [SUMMARY, "`" + ",`".join(stated)]
    return ("\r\n".join(text) + "\r\n").encode(), ledger


def put_ledger(ddb: Any, table: str, rows: list[dict[str, Any]]) -> None:
    """The ledger as booking writes it (with its shard), 25 rows a request."""
    for start in range(0, len(rows), 25):
        chunk = rows[start : start + 25]
        ddb.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": to_item(with_bill_shard(r))}} for r in chunk]}
        )


def diffs_of_run(store: Any, pk: str, run_id: str) -> dict[str, tuple[Any, ...]]:
    """The differences a run reported (new or seen again), by what they say."""
    return {
        d["sk"]: (
            d["cls"],
            d["item"],
            d.get("channel_amount_cent"),
            d.get("local_amount_cent"),
            d.get("detail"),
        )
        for d in store.diffs_of(pk)
        if d.get("last_seen_run") == run_id
    }


def comparable(stats: dict[str, Any]) -> dict[str, Any]:
    # fees_booked / fee_diffs are compared: every path books FEE entries (R43); the tests drop the first
    # path's entries before the second path runs (fee_entries / drop_fee_entries)
    skipped = ("new_diffs", "auto_resolved")
    return {k: v for k, v in stats.items() if k not in skipped}


FEE_FIELDS = ("kind", "channel", "mchid", "bill_date", "amount_cent", "of", "transaction_id", "refund_no")


def fee_entries(ddb: Any, table: str, mchid: str) -> dict[str, dict[str, Any]]:
    """The merchant's FEE ledger entries, {pk: what they book} (not which run booked them, nor when)."""
    from tally.store.codec import from_item

    found: dict[str, dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"TableName": table}
    while True:
        answer = ddb.scan(**kwargs)
        for item in answer.get("Items", []):
            row = from_item(item)
            if row.get("kind") == "FEE" and row.get("mchid") == mchid:
                found[row["pk"]] = {k: row.get(k) for k in (*FEE_FIELDS, "fee_e5", "bill_shard")}
        if "LastEvaluatedKey" not in answer:
            return found
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def drop_fee_entries(ddb: Any, table: str, pks: Any) -> None:
    for pk in pks:
        ddb.delete_item(TableName=table, Key=to_item({"pk": pk}))


def expected_fees(mchid: str, rows: int = 600) -> dict[str, int]:
    """The FEE entries `day_of_differences(mchid, rows)` books, {pk: cents}: every row's fee once (the duplicate
    row's key once), the planted fee error at the bill's figure, the refund rows' fees given back (negative)."""
    fees = {}
    rnd = random.Random(7)
    for i in range(rows):
        cents = rnd.randrange(100, 100_000)
        fee = _fee(cents) + (7 if i == 12 else 0)
        if fee:
            fees[f"fee#wechatpay#{mchid}#{tx(i)}"] = fee
    for n, refund in ((rows + 1, 700), (rows + 2, 300)):
        fees[f"fee#wechatpay#{mchid}#RF{n:08d}"] = -_fee(refund)
    return fees
