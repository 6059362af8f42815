"""Refunds at the simulated channel, one desk per channel (`DESKS`): a channel's refunds join the
simulation by one entry here, once the product has a refund client for it (bootstrap.refund_channels).

A desk holds every refund ("hold": nothing settles on its own, so a day is deterministic), settles it
when the day's plan says so, builds its signed notification, lists the channel's refunds for the
invariants, and puts a settled refund on the trade bill. `on_create` runs inside the simulator's
request handler, after the channel took the refund and before the API answers: the runner uses it to
crash the caller there or to deliver the refund notification before the API returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.sim.channels import cst


@dataclass(frozen=True)
class ChannelRefund:
    refund_no: str
    transaction_id: str
    amount_cent: int
    status: str  # PROCESSING | SUCCESS | CLOSED | ABNORMAL


class WeChatV3Desk:
    channel = "wechatpay_v3"

    def __init__(self, sim: Any):
        self.sim = sim
        self.on_create: Callable[[str], None] | None = None
        original = sim.create_refund

        def create_refund(mchid: str, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            view, plan = original(mchid, body)
            if plan is not None and self.on_create is not None:  # a new refund, taken by the channel
                self.on_create(str(body.get("out_refund_no")))
            return view, plan

        sim.create_refund = create_refund  # the instance's own method: the simulator's server calls it

    def reset(self) -> None:
        self.sim.set_refund_behaviour(outcome="hold", drop=False, duplicates=1, after_accept=None)

    def settle(self, refund_no: str, outcome: str, now: float) -> str | None:
        """success | closed: the channel decides. None if the channel never took that refund."""
        sim = self.sim
        with sim._lock:
            refund = sim._refunds.get(refund_no)
            if refund is None:
                return None
            before = refund["status"]
        status = sim.settle_refund(refund_no, outcome, notify=False)
        if before in ("SUCCESS", "CLOSED"):
            return status  # decided already (its notification came before the API returned): nothing changes
        with sim._lock:
            if status == "SUCCESS":
                refund["success_time"] = cst(now).isoformat(timespec="seconds")
        if status == "SUCCESS":
            sim.bills.add_refund(
                refund["_mchid"],
                refund["out_trade_no"],
                refund_no,
                refund["amount"]["refund"],
                success_time=refund["success_time"],
            )
        return status

    def notification(self, refund_no: str, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        return self.sim.refund_notification(
            refund_no,
            timestamp=int(now),
            nonce=f"F{seq:031d}",
            resource_nonce=f"F{seq:011d}",
            notification_id=f"00000000-0000-4000-9000-{seq:012d}",
        )

    def mchid_of(self, refund_no: str) -> str:
        return self.sim._refunds[refund_no]["_mchid"]

    def refunds(self) -> list[ChannelRefund]:
        with self.sim._lock:
            return [
                ChannelRefund(no, r["transaction_id"], r["amount"]["refund"], r["status"])
                for no, r in self.sim._refunds.items()
            ]


DESKS: dict[str, type] = {WeChatV3Desk.channel: WeChatV3Desk}
