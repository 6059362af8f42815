"""The difference rows runs keep on recon_diff: written once and seen again, EXPECTED while in transit to the
channel's next bill day and opened past it, healed when they no longer differ, closed when found on another day."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from tally.domain.fundflow import SETTLEMENT_DIFFERS
from tally.domain.merchant_day import EXPECTED, bill_lag, published
from tally.domain.recon import (
    CHANNEL_ONLY,
    LOCAL_ONLY,
    OPEN,
    PAYMENT,
    RESOLVED,
    Diff,
    LocalEntry,
    china_date,
    local_only,
    previous_day,
)
from tally.observability import M, count, logger
from tally.service.recon_endings import RunEndings
from tally.store.recon import recon_pk
from tally.store.tables import iso_now


class DiffRows(RunEndings):
    """Writing, opening and closing a day's difference rows (R36), for the trade and the fund-flow leg."""

    def _write_diffs(self, run: dict[str, Any], diffs: list[Diff]) -> tuple[set[str], int]:
        channel, mchid = run["channel"], run["mchid"]
        seen = set()
        new = 0
        today = china_date(self.clock()).isoformat()
        for diff in diffs:
            seen.add(diff.sk)
            recovery = self._recover(channel, mchid, diff)
            row = self._diff_row(run, diff, recovery)
            lag = self._in_bill_lag(row, diff.local_time, today)
            if self.store.put_new_diff(row):
                new += row["handle_status"] == OPEN
            else:
                self.store.seen_again(run["pk"], diff.sk, run["run_id"], recovery)
                if lag is not None and lag["handle_status"] == OPEN:
                    new += self._missing(row, "still not in the channel's bill past its lag")
        if new:
            count(M.RECON_DIFF_OPENED, new, channel=channel, merchant=mchid)
        return seen, new

    def _in_bill_lag(self, row: dict[str, Any], at: str, today: str) -> dict[str, Any] | None:
        """A LOCAL_ONLY found just before midnight: EXPECTED (in transit to the channel's next bill day, out of
        the open index) until that bill has been read or is overdue (domain/merchant_day.bill_lag)."""
        due = next_day(row["bill_date"])
        lag = bill_lag(row["cls"], row["item"], row["bill_date"], at, due_bill_read=today > published(due))
        if lag is None:
            return None
        row.update(lag)
        row["detail"] = f"{row['detail']}. Next: {lag['next_step']}"
        row["history"] = [{**row["history"][0], "note": row["detail"]}]
        if row["handle_status"] != OPEN:
            row.pop("open_pk", None)
        return lag

    def _missing(self, row: dict[str, Any], note: str) -> bool:
        """An EXPECTED difference past its lag opens for a person, by itself, once (#30); ReconDiffOpened."""
        return self.store.open_expected(
            row["pk"],
            row["sk"],
            iso_now(self.clock()),
            f"{note}: {row['next_step']}",
            {"detail": row["detail"], "next_step": row["next_step"]},
        )

    def _found_elsewhere(self, run: dict[str, Any], entries: list[LocalEntry]) -> None:
        """Money this bill lists that the ledger booked on a neighbouring day (the bill day boundary, R34): that
        day's LOCAL_ONLY difference for it is closed (it landed on the channel's other bill day); a day not
        reconciled yet gets it closed already, so its run finds nothing to open."""
        now = iso_now(self.clock())
        for entry in entries:
            if not entry.bill_date or entry.bill_date == run["bill_date"]:
                continue
            pk = recon_pk(run["channel"], run["mchid"], entry.bill_date)
            sk = f"{entry.kind}#{entry.key}"
            note = (
                f"in the channel's bill of {run['bill_date']} (booked for {entry.bill_date}: the bill day "
                f"boundary, R34) at {run['run_id']}"
            )
            row = self.store.diff(pk, sk)
            if row is None:
                closed = {
                    **self._diff_row(
                        {**run, "pk": pk, "bill_date": entry.bill_date}, local_only(entry), None
                    ),
                    "handle_status": RESOLVED,
                    "handler": "recon",
                    "handled_at": now,
                }
                closed.pop("open_pk", None)
                closed["history"] = [{"at": now, "by": "recon", "action": RESOLVED, "note": note}]
                self.store.put_new_diff(closed)
            elif row.get("cls") == LOCAL_ONLY and row.get("handle_status") in (OPEN, EXPECTED):
                if self.store.close_diff(pk, sk, RESOLVED, "recon", note, now, expect=(OPEN, EXPECTED)):
                    count(M.RECON_DIFF_RESOLVED, channel=run["channel"], merchant=run["mchid"])

    def _open_missing(self, run: dict[str, Any]) -> int:
        """The day before's EXPECTED differences due on this bill day that this bill did not list either (those
        it listed were closed by `_found_elsewhere`): missing now, open for a person."""
        opened = 0
        pk = recon_pk(run["channel"], run["mchid"], previous_day(run["bill_date"]))
        for row in self.store.diffs_of(pk):
            if row.get("handle_status") != EXPECTED or row.get("due") != run["bill_date"]:
                continue
            lag = bill_lag(
                str(row.get("cls")), str(row.get("item")), str(row.get("bill_date")), row.get("local_time"),
                due_bill_read=True,
            )  # fmt: skip
            if lag is None:
                continue
            words = {
                **row,
                **lag,
                "detail": f"{str(row.get('detail', '')).split('. Next: ')[0]}. Next: {lag['next_step']}",
            }
            opened += self._missing(words, f"not in the channel's bill of {run['bill_date']} either")
        if opened:
            count(M.RECON_DIFF_OPENED, opened, channel=run["channel"], merchant=run["mchid"])
        return opened

    def _recover(self, channel: str, mchid: str, diff: Diff) -> str | None:
        if diff.cls != CHANNEL_ONLY or diff.item != PAYMENT or self.recover is None:
            return None
        try:
            return self.recover(channel, mchid, diff.transaction_id)
        except Exception as exc:  # noqa: BLE001 - the diff stays OPEN and alarmed whatever happened here
            count(M.RECON_RECOVER_FAILED, channel=channel, merchant=mchid)
            logger.exception("recon: recovery failed", extra={"key": diff.key})
            return f"QUERY_FAILED: {type(exc).__name__}: {exc}"

    def _diff_row(self, run: dict[str, Any], diff: Diff, recovery: str | None) -> dict[str, Any]:
        now = iso_now(self.clock())
        return {
            "pk": run["pk"],
            "sk": diff.sk,
            "channel": run["channel"],
            "mchid": run["mchid"],
            "bill_date": run["bill_date"],
            "cls": diff.cls,
            "item": diff.item,
            "key": diff.key,
            "channel_amount_cent": diff.channel_amount_cent,
            "local_amount_cent": diff.local_amount_cent,
            "channel_status": diff.channel_status,
            "local_status": diff.local_status,
            "transaction_id": diff.transaction_id,
            "out_trade_no": diff.out_trade_no,
            "refund_no": diff.refund_no,
            "detail": diff.detail,
            "recovery": recovery,
            "handle_status": OPEN,
            "open_pk": OPEN,
            "opened_at": now,
            "handler": None,
            "history": [{"at": now, "by": "recon", "action": "OPENED", "note": diff.detail}],
            "run_id": run["run_id"],
            "last_seen_run": run["run_id"],
            "seen_count": 1,
        }

    def _close_healed(self, run: dict[str, Any], seen: set[str], *, fund: bool) -> int:
        """OPEN diffs of this day that the bill and ledger no longer show (e.g. booked by the pull path). A
        trade run heals only trade diffs, a fund-flow run only SETTLEMENT_DIFFERS (R45): neither sees the other's."""
        healed = 0
        for row in self.store.diffs_of(run["pk"]):
            if (row.get("cls") == SETTLEMENT_DIFFERS) != fund:
                continue
            if row.get("handle_status") == EXPECTED and row["sk"] not in seen:  # it landed: closed as healed
                if self.store.open_expected(row["pk"], row["sk"], iso_now(self.clock()), "no longer differs"):
                    row["handle_status"] = OPEN
            if row.get("handle_status") == OPEN and row["sk"] not in seen:
                if self.store.close_diff(
                    run["pk"],
                    row["sk"],
                    RESOLVED,
                    "recon",
                    f"no longer differs at {run['run_id']}",
                    iso_now(self.clock()),
                ):
                    healed += 1
                    count(M.RECON_DIFF_RESOLVED, channel=run.get("channel"), merchant=run.get("mchid"))
        return healed


def next_day(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()
