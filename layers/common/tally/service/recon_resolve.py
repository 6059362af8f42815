"""A person closes an OPEN difference (R36): resolved or ignored, with a reversing ledger entry where our books
moved money the channel did not."""

from __future__ import annotations

from typing import Any

from tally import errors
from tally.domain.recon import AMOUNT_DIFFERS, FEE, IGNORED, LOCAL_ONLY, OPEN, RESOLVED, REVERSAL
from tally.observability import M, count, logger
from tally.service.recon_setup import ReconSetup
from tally.store.recon import recon_pk
from tally.store.tables import iso_now


class ReconError(errors.Conflict, ValueError):
    """A person asked for something that cannot be done (unknown diff, not OPEN, no bill to re-run)."""


class DiffResolution(ReconSetup):
    """`resolve`: a person's hand on one difference; nothing is deleted."""

    def resolve(
        self,
        channel: str,
        mchid: str,
        bill_date: str,
        sk: str,
        *,
        by: str,
        note: str,
        ignore: bool = False,
        reverse: bool = False,
    ) -> dict[str, Any]:
        """Close an OPEN diff. `reverse` writes a reversing ledger entry (kind REVERSAL, signed) in the same
        transaction, for the classes where our books moved money the channel did not (R36). Nothing deleted."""
        if not by or not note:
            raise ReconError("say who resolves (--by) and why (--note)")
        pk = recon_pk(channel, mchid, bill_date)
        diff = self.store.diff(pk, sk)
        if diff is None:
            raise ReconError(f"no diff {sk} for {pk}")
        if diff.get("handle_status") != OPEN:
            raise ReconError(f"diff {sk} is {diff.get('handle_status')}, not OPEN")
        status = IGNORED if ignore else RESOLVED
        now = iso_now(self.clock())
        if not reverse:
            if not self.store.close_diff(pk, sk, status, by, note, now):
                raise ReconError(f"diff {sk} changed under us; look again")
            count(M.RECON_DIFF_RESOLVED, channel=channel, merchant=mchid)
            return self.store.diff(pk, sk) or {}
        entry, amount = self._reversal(diff, by, note, now)
        update = self.store.close_diff_update(
            pk, sk, status, by, note, now, {"reversal": entry["pk"], "amount_cent": amount}
        )
        if not self.ledger.close_with_reversal(update, entry):
            raise ReconError(f"diff {sk} changed under us, or its reversal exists; look again")
        count(M.RECON_DIFF_RESOLVED, channel=channel, merchant=mchid)
        logger.info(
            "recon: diff resolved with a reversing entry",
            extra={"diff": sk, "reversal": entry["pk"], "amount_cent": amount, "by": by},
        )
        return self.store.diff(pk, sk) or {}

    def _reversal(self, diff: dict[str, Any], by: str, note: str, now: str) -> tuple[dict[str, Any], int]:
        if diff["item"] == FEE or diff["cls"] not in (LOCAL_ONLY, AMOUNT_DIFFERS):
            raise ReconError(
                f"{diff['cls']} {diff['item']}: no money moved in our books to reverse; "
                "resolve without --reverse (channel-only payments are booked by the pull path)"
            )
        target = self.ledger.booked(diff["key"], diff["mchid"])
        if target is None:
            raise ReconError(f"ledger entry {diff['key']} not found")
        local = int(diff["local_amount_cent"])
        amount = -local if diff["cls"] == LOCAL_ONLY else int(diff["channel_amount_cent"]) - local
        entry = {
            "pk": f"{target['pk']}#{REVERSAL}#{diff['bill_date']}",
            "kind": REVERSAL,
            "reverses": target["pk"],
            "amount_cent": amount,
            "channel": diff["channel"],
            "mchid": diff["mchid"],
            "order_pk": target.get("order_pk"),
            "transaction_id": target.get("transaction_id"),
            "refund_no": target.get("refund_no"),
            "bill_date": target.get("bill_date", diff["bill_date"]),
            "booked_at": now,
            "source": "recon",
            "reason": f"{diff['cls']} resolved by {by}: {note}",
            "diff": f"{diff['pk']}/{diff['sk']}",
        }
        return entry, amount
