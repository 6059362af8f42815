"""The refunds part of an order's story: each refund (created, its outcome, a person's actions), the channel's
reports on it, and the refund task a payment the order cannot take opens (R17)."""

from __future__ import annotations

from typing import Any

from tally.domain.refunds import refund_raw_key
from tally.i18n import N_
from tally.service.story_entries import entry, history_entry, still_open, stored_fields, with_raw


class RefundChapter:
    def __init__(self, refunds: Any, refund_raw: Any):
        self.refunds = refunds  # store.refunds.RefundStore
        self.refund_raw = refund_raw  # store.refunds.RefundRawStore

    def entries(
        self, order: dict[str, Any], refunds: list[dict[str, Any]], raw: bool
    ) -> list[dict[str, Any]]:
        out = []
        for f in refunds:
            no = f.get("refund_no") or f.get("pk")
            status = f.get("status")
            out.append(
                entry(
                    f.get("created_at"),
                    "refund",
                    N_("refund %(refund_no)s created: %(amount_cent)s (%(reason)s)")
                    if f.get("reason")
                    else N_("refund %(refund_no)s created: %(amount_cent)s (no reason given)"),
                    no,
                    params={"refund_no": no, "amount_cent": f.get("amount_cent"), "reason": f.get("reason")},
                    amount=f.get("amount_cent"),
                    state="PENDING",
                    detail={k: f.get(k) for k in ("reason", "hold", "expire_at", "source") if f.get(k)},
                )
            )
            if status != "PENDING":
                why = f.get("fail_reason") or (f.get("manual_reason") if status == "MANUAL" else "") or ""
                out.append(
                    entry(
                        f.get("updated_at") or f.get("created_at"),
                        "refund",
                        N_("refund %(refund_no)s is %(refund_status)s: %(why)s")
                        if why
                        else N_("refund %(refund_no)s is %(refund_status)s"),
                        no,
                        params={"refund_no": no, "refund_status": status, "why": why},
                        amount=f.get("amount_cent"),
                        state=status,
                        needs_person=status == "MANUAL" and still_open(f),
                        detail={
                            k: f.get(k) for k in ("refund_id", "success_time", "fail_reason") if f.get(k)
                        },
                    )
                )
            out += [history_entry(h, no, "refund") for h in f.get("history") or []]
            channel = f.get("channel") or order.get("channel")
            raw_key = refund_raw_key(str(channel), str(f.get("mchid") or order.get("mchid")), str(no))
            for rep in self.refund_raw.for_refund(raw_key):  # scoped per merchant (R39)
                handled = int(rep.get("handled", 0))
                # an applied report's outcome restates its status ("SUCCESS (channel says SUCCESS)"): the title
                # names it only when it says more, a duplicate or a person's reason; the detail keeps it
                outcome = rep.get("outcome") if handled != 1 or rep.get("outcome") == "DUPLICATE" else None
                detail = with_raw(
                    stored_fields(
                        rep,
                        (
                            "source",
                            "refund_id",
                            "refund_cent",
                            "cumulative_cent",
                            "handled",
                            "outcome",
                        ),
                    ),
                    rep,
                    raw,
                )
                out.append(
                    entry(
                        rep.get("notified_at"),
                        "refund_report",
                        N_(
                            "the channel reports refund %(refund_no)s %(refund_status)s (%(source)s); "
                            "%(handled)s (%(outcome)s)"
                        )
                        if outcome
                        else N_(
                            "the channel reports refund %(refund_no)s %(refund_status)s (%(source)s); %(handled)s"
                        ),
                        f"{raw_key}#{rep.get('sk')}",
                        params={
                            "refund_no": no,
                            "refund_status": rep.get("sk"),
                            "source": rep.get("source", "notify"),
                            "handled": handled,
                            "outcome": outcome,
                        },
                        amount=rep.get("refund_cent"),
                        state=rep.get("sk"),
                        needs_person=handled == 2 and still_open(rep),
                        detail=detail,
                    )
                )
        return out

    def task(self, task_pk: str) -> list[dict[str, Any]]:
        task = self.refunds.task(task_pk)
        if task is None:
            return []
        status = task.get("status")
        out = [
            entry(
                task.get("created_at"),
                "refund",
                N_(
                    "refund task for %(transaction_id)s: %(amount_cent)s to give back (%(task_reason)s); "
                    "%(task_status)s"
                ),
                task_pk,
                params={
                    "transaction_id": task.get("transaction_id"),
                    "amount_cent": task.get("amount_cent"),
                    "task_reason": task.get("reason"),
                    "task_status": status,
                },
                amount=task.get("amount_cent"),
                state=f"TASK_{status}",
                # OPEN / REFUNDING: the refund service is on it; DONE: paid back
                needs_person=status == "MANUAL" and still_open(task),
                detail={
                    k: task.get(k) for k in ("reason", "status", "refund_no", "manual_reason") if task.get(k)
                },
            )
        ]
        return out + [history_entry(h, task_pk, "refund task") for h in task.get("history") or []]
