"""Finding an order by any number a person holds (a transaction id, a refund number or id, an out_trade_no):
`tally find` and the console's search, before the order's story (service/story.py) is told."""

from __future__ import annotations

from typing import Any


class OrderFinder:
    def __init__(self, orders: Any, raw: Any, refunds: Any):
        self.orders = orders  # store.tables.OrderStore
        self.raw = raw  # store.tables.RawStore
        self.refunds = refunds  # store.refunds.RefundStore

    def find(self, text: str, merchants: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The orders a number names, across `merchants` (the (channel, mchid) pairs the person may see): a
        channel transaction id, a refund number, the channel's refund id or an out_trade_no. GetItem and
        Query only (R21, R42): per merchant its order and its raw payment row, then the refunds' two indexes.
        Each match: {found_as, channel, mchid, out_trade_no, refund_no?}, one per order."""
        text = text.strip()
        if not text or len(text) > 64 or any(c in text for c in "#/ "):
            return []
        visible = {m for _, m in merchants}
        found: dict[tuple[str, str], dict[str, Any]] = {}

        def add(found_as: str, channel: Any, mchid: Any, out_trade_no: Any, **more: Any) -> None:
            if mchid in visible and out_trade_no:
                key = (str(mchid), str(out_trade_no))
                found.setdefault(
                    key,
                    {
                        "found_as": found_as,
                        "channel": channel,
                        "mchid": key[0],
                        "out_trade_no": key[1],
                        **more,
                    },
                )

        for channel, mchid in merchants:
            order = self.orders.get(mchid, text)
            if order is not None:
                add("out_trade_no", order.get("channel") or channel, mchid, text)
            for name in dict.fromkeys((channel, channel.split("_")[0])):  # wechatpay_v2 payments: wechatpay#…
                row = self.raw.get(f"{name}#{mchid}#{text}")
                if row is not None:
                    add("transaction id", name, row.get("mchid"), row.get("out_trade_no"))
        for row in self.refunds.by_number(text):
            add(
                "refund number", row.get("channel"), row.get("mchid"), row.get("out_trade_no"), refund_no=text
            )
        for row in self.refunds.by_channel_id(text):
            add(
                "refund id",
                row.get("channel"),
                row.get("mchid"),
                row.get("out_trade_no"),
                refund_no=row.get("refund_no"),
            )
        return list(found.values())
