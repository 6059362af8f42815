"""The books part of an order's story: its ledger entries (payments, refunds, a person's reversals) and, for
each day its money is on, that day's recon verdict and the differences about this order."""

from __future__ import annotations

from typing import Any

from tally.domain.merchant_day import count_diffs, day_state
from tally.i18n import N_
from tally.service.story_entries import china_time, entry, history_entry, stored_fields


class BooksChapter:
    def __init__(self, ledger: Any, recon: Any):
        self.ledger = ledger  # store.recon.LedgerView
        self.recon = recon  # store.recon.ReconStore

    def ledger_rows(
        self, order: dict[str, Any], raw_rows: list[dict[str, Any]], refunds: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Payment entries share the raw row's key; refund entries are `channel#<refund pk>`; reversals are
        `<key>#REVERSAL#<day>` on the same bill_date: one GetItem per key, one Query per entry for reversals."""
        keys = [r["pk"] for r in raw_rows]
        keys += [
            f"{f.get('channel') or order.get('channel')}#{f['pk']}" for f in refunds
        ]  # refund_ledger_key
        found: dict[str, dict[str, Any]] = {}
        for key in dict.fromkeys(keys):
            entry = self.ledger.get(key)
            if entry is None:
                continue
            for row in (
                self.ledger.entry_and_reversals(key, entry.get("bill_date", ""))
                if entry.get("bill_date")
                else [entry]
            ):
                found[row["pk"]] = row
        return sorted(found.values(), key=lambda r: str(r.get("booked_at")))

    def ledger_entry(self, r: dict[str, Any]) -> dict[str, Any]:
        kind = r.get("kind", "PAYMENT")
        signed = _signed(r)
        return entry(
            r.get("booked_at"),
            "ledger",
            N_(
                "ledger %(ledger_kind)s %(amount_cent)s booked for bill date %(bill_date)s (%(source)s): %(reason)s"
            )
            if r.get("reason")
            else N_("ledger %(ledger_kind)s %(amount_cent)s booked for bill date %(bill_date)s (%(source)s)"),
            r.get("pk"),
            params={
                "ledger_kind": kind,
                "amount_cent": signed,
                "bill_date": r.get("bill_date"),
                "source": r.get("source"),
                "reason": r.get("reason"),
            },
            amount=signed,
            state=kind,
            detail=stored_fields(
                r,
                (
                    "kind",
                    "amount_cent",
                    "order_total_cent",
                    "bill_date",
                    "success_time",
                    "transaction_id",
                    "refund_no",
                    "refund_id",
                    "reverses",
                    "diff",
                    "source",
                ),
            ),
        )

    def recon_days(
        self,
        order: dict[str, Any],
        ledger_rows: list[dict[str, Any]],
        raw_rows: list[dict[str, Any]],
        refunds: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The days this order's money belongs to: each day's latest run verdict and this order's diffs
        (one Query for runs, one for diffs per day; a diff matches by ledger key, transaction or refund no)."""
        from tally.store.recon import recon_pk

        days = {
            (r.get("channel") or order.get("channel"), r.get("mchid") or order.get("mchid"), r["bill_date"])
            for r in ledger_rows
            if r.get("bill_date")
        }
        for r in raw_rows:  # a payment the channel has and we did not book yet: its success day
            if r.get("success_time") and (day := china_time(r["success_time"])):
                days.add((r.get("channel"), order.get("mchid"), day[:10]))
        # a payment we never heard of (recon's CHANNEL_ONLY, the classic lost callback) is on the day it was
        # paid: between the order's creation and its expiry (Asia/Shanghai), at most a few days
        for bound in (order.get("created_at"), order.get("expire_at")):
            if day := china_time(bound):
                days.add((order.get("channel"), order.get("mchid"), day[:10]))
        mine = {r["pk"] for r in ledger_rows} | {r["pk"] for r in raw_rows}
        tids = {r.get("transaction_id") for r in raw_rows if r.get("transaction_id")}
        tids.add(order.get("transaction_id"))
        refund_nos = {f.get("refund_no") or f.get("pk") for f in refunds}
        booked = {
            (r.get("channel") or order.get("channel"), r["bill_date"])
            for r in ledger_rows
            if r.get("bill_date")
        }
        out = []
        for channel, mchid, day in sorted(days):
            pk = recon_pk(str(channel), str(mchid), day)
            runs = self.recon.run_rows(pk)
            diffs = self.recon.diffs_of(pk)
            about = [d for d in diffs if _about(d, mine, tids, refund_nos, order)]
            if runs and ((channel, day) in booked or about):  # only a day this order's money is on (#30)
                latest = next((r for r in runs if r.get("leg") != "fundflow"), runs[0])
                counted = count_diffs(diffs)
                state, words = day_state(latest.get("status"), counted)
                out.append(
                    entry(
                        latest.get("finished_at") or latest.get("started_at"),
                        "recon",
                        N_(
                            "recon %(bill_date)s (%(channel)s, merchant %(mchid)s): %(day_state)s; differences: "
                            "%(open)s open, %(worked)s worked, %(expected)s in transit"
                        )
                        if words
                        else N_("recon %(bill_date)s (%(channel)s, merchant %(mchid)s): %(day_state)s"),
                        pk,
                        params={
                            "bill_date": day,
                            "channel": channel,
                            "mchid": mchid,
                            "day_state": state,
                            "open": counted.open,
                            "worked": counted.worked,
                            "expected": counted.expected,
                        },
                        state=state,
                        detail={
                            k: latest.get(k)
                            for k in ("sk", "pass", "status", "guard", "open_diffs", "reason")
                        },
                    )
                )
            for d in about:
                is_open = d.get("handle_status") == "OPEN"
                out.append(
                    entry(
                        d.get("opened_at"),
                        "recon",
                        N_(
                            "recon difference: %(diff_class)s, %(diff_item)s; channel %(channel_amount_cent)s, "
                            "ours %(local_amount_cent)s [%(diff_status)s]"
                        ),
                        f"{pk}/{d.get('sk')}",
                        params={
                            "diff_class": d.get("cls"),
                            "diff_item": d.get("item"),
                            "channel_amount_cent": d.get("channel_amount_cent"),
                            "local_amount_cent": d.get("local_amount_cent"),
                            "diff_status": d.get("handle_status"),
                        },
                        amount=d.get("channel_amount_cent"),
                        state=d.get("handle_status"),
                        needs_person=is_open,
                        detail=stored_fields(
                            d,
                            (
                                "cls",
                                "item",
                                "key",
                                "channel_amount_cent",
                                "local_amount_cent",
                                "recovery",
                                "detail",
                            ),
                        ),
                    )
                )
                out += [
                    history_entry(h, f"{pk}/{d.get('sk')}", "recon diff")
                    for h in d.get("history") or []
                    if h.get("action") != "OPENED"
                ]
        return out


def _signed(r: dict[str, Any]) -> int:
    """Money into the merchant's account: payments +, refunds -, reversals as signed."""
    amount = int(r.get("amount_cent", 0))
    return -amount if r.get("kind") == "REFUND" else amount


def _about(
    d: dict[str, Any], mine: set[str], tids: set[Any], refund_nos: set[Any], order: dict[str, Any]
) -> bool:
    """A recon difference about this order: its ledger key, its transaction (not a refund's), one of its
    refunds, or its out_trade_no."""
    return bool(
        d.get("key") in mine
        or (d.get("transaction_id") and d.get("transaction_id") in tids and d.get("item") != "REFUND")
        or (d.get("refund_no") and d.get("refund_no") in refund_nos)
        or d.get("out_trade_no") == order.get("out_trade_no")
    )
