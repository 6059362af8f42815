"""A person's action on a work-queue item as one write with its journal record (who, why, what, on which row:
docs/audit.md), chained on the journal's head; the item's history line is pinned by the record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.domain.journal import Ref
from tally.service.journal import SYSTEM_CHAIN, DecisionJournal, JournalBusy
from tally.service.queue_terms import QueueError
from tally.store.journal import ref_key
from tally.store.queue import QueueStore


class ItemJournal:
    """The queue's writes that a person's action makes, each journaled in its own write (issue #36)."""

    def __init__(self, store: QueueStore, journal: DecisionJournal | None):
        self.store = store
        self.journal = journal

    def record(
        self, item: dict[str, Any], table: str, key: dict[str, Any], entry: dict[str, Any], **how: Any
    ) -> Any:
        return self.write(
            item,
            table,
            key,
            entry,
            lambda append: self.store.record(table, key, entry, journal=append, **how),
        )

    def append_history(
        self, item: dict[str, Any], table: str, key: dict[str, Any], entry: dict[str, Any], state: str
    ) -> None:
        self.write(
            item,
            table,
            key,
            entry,
            lambda append: self.store.append_history(table, key, entry, state, journal=append),
        )

    def write(
        self,
        item: dict[str, Any],
        table: str,
        key: dict[str, Any],
        entry: dict[str, Any],
        write: Callable[[Any], Any],
    ) -> Any:
        """The action's write with its journal record (who, why, what, on which row), chained on the head read
        just before; a head that moved meanwhile is read again. The record pins the history line it appends."""
        if self.journal is None:
            return write(None)
        merchant = str(item.get("merchant") or SYSTEM_CHAIN)
        subject = str(item.get("id") or ref_key(key))
        ref = Ref(self.journal.logical.get(table, table), ref_key(key), {"history[]": entry})
        facts = {**entry, "item_kind": str(item.get("kind") or ""), "merchant": merchant}
        try:
            return self.journal.retrying(
                merchant,
                subject,
                kind=f"queue.{entry.get('action')}",
                at=str(entry["at"]),
                facts=facts,
                refs=[ref],
                write=write,
            )
        except JournalBusy:
            raise QueueError("the journal is busy: try again") from None
