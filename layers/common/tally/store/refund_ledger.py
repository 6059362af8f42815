"""A booked refund's ledger side: its REFUND entry on the bill day with the settlement figures (R43), the
work-queue item when those figures are unknown, and the PAYMENT entry the figures are rebuilt from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tally.store.codec import to_item
from tally.store.payments import SETTLEMENT_UNKNOWN_KIND
from tally.store.refund_keys import RefundTables, refund_ledger_key
from tally.store.shards import with_bill_shard

SETTLEMENT_UNKNOWN = (
    "UNKNOWN"  # a REFUND entry's settlement_state when its settlement refund is unknown (R43)
)


class RefundLedger:
    """RefundStore's ledger writes and reads (a mixin: `t` is the store's tables)."""

    t: RefundTables

    def ledger_entry(
        self,
        refund: Mapping[str, Any],
        refund_id: str | None,
        bill_date: str,
        success_time: str | None,
        source: str,
        now: str,
        settlement: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        row = {
            "pk": refund_ledger_key(refund),
            "kind": "REFUND",
            "channel": refund["channel"],
            "refund_no": refund["refund_no"],
            "refund_id": refund_id or refund.get("refund_id"),
            "transaction_id": refund.get("transaction_id"),
            "order_pk": refund["order_pk"],
            "mchid": refund["mchid"],
            "out_trade_no": refund["out_trade_no"],
            "amount_cent": refund["amount_cent"],
            "currency": refund.get("currency", "CNY"),
            "success_time": success_time,
            "bill_date": bill_date,
            "booked_at": now,
            "source": source,
            "hold": refund["hold"],
            # R43: the settlement figures next to amount_cent (which stays the refund's amount, R12 unchanged)
            **(settlement or {}),
            "settlement_state": "KNOWN" if settlement is not None else SETTLEMENT_UNKNOWN,
        }
        return {
            "Put": {
                "TableName": self.t.base.ledger,
                "Item": to_item(with_bill_shard(row)),  # the sharded bill-date index (store/recon.py)
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def settlement_unknown(self, refund: Mapping[str, Any], reason: str, now: str) -> dict[str, Any]:
        """R43, as store/payments.py does for a payment: the refund is booked (the money went back) but what
        the channel settles for it is unknown: one notify_event row of manual_kind `settlement_unknown` (the
        work queue lists it) in the booking transaction, so a booked UNKNOWN entry always has its item."""
        ledger_pk = refund_ledger_key(refund)
        row = {
            "pk": f"settlement#{ledger_pk}",
            "kind": SETTLEMENT_UNKNOWN_KIND,
            "manual_kind": SETTLEMENT_UNKNOWN_KIND,
            "created_at": now,
            "channel": refund["channel"],
            "mchid": refund["mchid"],
            "out_trade_no": refund["out_trade_no"],
            "transaction_id": refund.get("transaction_id"),
            "refund_no": refund["refund_no"],
            "ledger_pk": ledger_pk,
            "order": refund["order_pk"],  # not order_pk: that would put it in notify_event's by_order index
            "amount_cent": refund["amount_cent"],
            "reason": f"settlement refund unknown: {reason or 'no settlement figures'} "
            "(booked on the refund amount; query the refund)"[:500],
        }
        return {
            "Put": {
                "TableName": self.t.base.notify_event,
                "Item": to_item(row),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def payment_entry(self, refund: Mapping[str, Any]) -> dict[str, Any] | None:
        """The PAYMENT ledger entry the refund gives money back from (`channel#mchid#transaction_id`, the
        payment's raw key), for its settlement figures (R43); None when there is none (a refund task's payment
        was never booked) or the refund names no transaction."""
        if not refund.get("transaction_id"):
            return None
        pk = f"{refund['channel']}#{refund['mchid']}#{refund['transaction_id']}"
        return self.t.base.get(self.t.base.ledger, pk)
