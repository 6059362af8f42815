"""The WeChat parser's fast index pinned to a straightforward reference parse (brief bill20c, issue #20).

The hot loop (bills.py `_rows`) is tuned for a million rows; this test builds a bill with every row shape
(NOCASH and CASH coupons, fees, refunds with and without a status, a value holding a comma, BOM, CRLF and LF
lines mixed) and checks the index, row by row, against a parse written the plain way: split each line, read
each amount with Decimal, compute each fee from its rate. Any change to the fast path that alters a key, an
amount, a flag, a fee or an offset fails here.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from tally.channels.wechatpay_v3.bills import HEADERS, SUMMARY_HEADERS
from tally.domain.money import format_cents as _yuan
from tally.domain.recon import BillIndex
from tally.service.recon_sources import OpenedBill


def _fee_e5(cents: int, rate: str) -> int:
    fen = (Decimal(abs(cents)) * Decimal(rate.rstrip("%")) / 100).quantize(Decimal(1), ROUND_HALF_UP)
    return int(fen) * 1000 * (1 if cents >= 0 else -1)


def _bill(n: int) -> bytes:
    settle = refunded = fees = ordered = 0
    lines = [b"\xef\xbb\xbf" + HEADERS["ALL"].encode() + b"\r\n"]
    for i in range(n):
        cents = 100 + (i * 7919) % 99_900
        kind = {3: "NOCASH", 7: "CASH"}.get(i % 10, "")
        coupon = 50 + i % 500 if kind else 0
        order = cents + (coupon if kind == "NOCASH" else 0)
        rate = ("0.60%", "0.38%", "1.00%")[i % 3]
        refund = i % 11 == 5
        status = ("SUCCESS", "", "PROCESSING")[i % 3] if refund else ""
        r_cents = cents // 2 if refund else 0
        fee = _fee_e5(-r_cents, rate) if refund else _fee_e5(cents, rate)
        if i % 17 == 0 and not refund:
            fee += 1000  # a fee the rate does not explain: FEE_OK is off
        state = "REFUND" if refund else ("SUCCESS" if i % 13 else "REVOKED")
        goods = "商品,大" if i % 5 == 0 else "商品"
        values = [
            f"2024-05-01 {i % 24:02d}:00:00", "wx2421b1c4370ec43b", "1900000109", "0", "",
            f"42000000012024050{i:011d}", f"T{i:020d}", "oUpF8uMuAJO", "NATIVE", state, "OTHERS", "CNY",
            _yuan(cents), _yuan(coupon), f"5030{i:010d}" if refund else "0", f"R{i:08d}" if refund else "0",
            _yuan(r_cents), "0.00", "ORIGINAL" if refund else "", status, goods, "",
            f"{fee // 100_000 if fee >= 0 else '-' + str(-fee // 100_000)}.{abs(fee) % 100_000:05d}", rate,
            _yuan(order), _yuan(r_cents), "",
        ]  # fmt: skip
        settle, refunded, fees, ordered = settle + cents, refunded + r_cents, fees + fee, ordered + order
        lines.append(("`" + ",`".join(values) + ("\r\n" if i % 2 else "\n")).encode())
    lines.append(SUMMARY_HEADERS["ALL"].encode() + b"\r\n")
    fee_text = f"{'-' if fees < 0 else ''}{abs(fees) // 100_000}.{abs(fees) % 100_000:05d}"
    summary = [str(n), _yuan(settle), _yuan(refunded), "0.00", fee_text, _yuan(ordered), _yuan(refunded)]
    lines.append(("`" + ",`".join(summary) + "\r\n").encode())
    return b"".join(lines)


def _reference(data: bytes) -> list[tuple[str, int, int, int, int]]:
    rows, pos = [], 0
    for raw in data.splitlines(keepends=True):
        start, pos = pos, pos + len(raw)
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("`") or line.count(",`") != 26:
            continue  # the header, the summary header and the summary line (7 values)
        v = line[1:].split(",`")
        fee = int(Decimal(v[22]) * 100_000)
        if v[9] == "REFUND":
            amount = int(Decimal(v[16]) * 100)
            ok = (v[19] or "SUCCESS") == "SUCCESS"
            flag = BillIndex.REFUND | (BillIndex.SUCCESS if ok else 0)
            flag |= BillIndex.FEE_OK if _fee_e5(-amount, v[23]) == fee else 0
            rows.append((f"wechatpay#{v[15]}", amount, flag, start, fee))
        else:
            amount = int(Decimal(v[12]) * 100)
            flag = (BillIndex.SUCCESS if v[9] == "SUCCESS" else 0) | (
                BillIndex.FEE_OK if _fee_e5(amount, v[23]) == fee else 0
            )
            rows.append((f"wechatpay#{v[5]}", amount, flag, start, fee))
    return rows


def test_the_fast_index_equals_a_plain_parse_row_by_row():
    data = _bill(3_000)
    opened = OpenedBill("wechatpay", data)
    totals, index = opened.index()
    expected = _reference(data)
    got = list(zip(index.keys, index.amounts, index.flags, index.where, index.fees, strict=True))
    assert len(got) == 3_000
    assert got == expected
    # every shape is present, so the comparison covers them all
    assert {flag for *_, flag, _, _ in expected} >= {
        BillIndex.CLEAN,
        BillIndex.FEE_OK,
        BillIndex.REFUND | BillIndex.CLEAN,
        BillIndex.REFUND | BillIndex.FEE_OK,
        BillIndex.SUCCESS,
    }
    assert all(check.stated == check.parsed for check in totals.checks), totals.checks
    assert totals.rows == totals.stated_rows == 3_000
    assert totals.payments + totals.refunds == 3_000 and totals.refunds == len(
        [r for r in expected if r[2] & BillIndex.REFUND]
    )
    # and the full re-read of a row agrees with its index entry (what the matcher reads for a diff)
    for key, amount, _flag, where, fee in expected[:200]:
        item = opened.item_at(where)
        assert (item.key, item.amount_cent, item.fee_e5) == (key, amount, fee)
