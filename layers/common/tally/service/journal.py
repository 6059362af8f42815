"""Appending to the decision journal from a use case (issue #36, docs/audit.md).

A use case reads the row it decides on together with its chain's head (one BatchGetItem), decides, and hands
the store the `append` callable: given the decision's transaction items it returns the journal items that
ride in the same transaction. The record pins the rows the transaction puts (store/journal.py PINNED).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tally.domain.journal import Head, Ref, chain_id, lane_of, make_record, shanghai_day, split_chain
from tally.store.journal import JournalStore, refs_from_items

Items = list[dict[str, Any]]


class DecisionJournal:
    def __init__(
        self, store: JournalStore, logical: Mapping[str, str], *, clock: Callable[[], float] = time.time
    ):
        """`logical`: physical table name → the name records use (ledger, transitions, refunds…)."""
        self.store = store
        self.logical = dict(logical)
        self.clock = clock

    def chain(self, merchant: str, subject: str) -> str:
        """Today's (Asia/Shanghai) chain of `merchant` in the lane of `subject` (an order key)."""
        return chain_id(merchant, shanghai_day(self.clock()), lane_of(subject))

    def read(
        self, table: str, key: dict[str, Any], merchant: str, subject: str
    ) -> tuple[dict[str, Any] | None, Head]:
        return self.store.read_with_head(table, key, self.chain(merchant, subject))

    def append(
        self,
        head: Head,
        *,
        kind: str,
        subject: str,
        at: str,
        facts: Mapping[str, Any],
        refs: Sequence[Ref] = (),
    ) -> Callable[[Items], Items]:
        """The journal items for a transaction: the record pins the rows it puts, and `refs` besides."""

        def build(items: Items) -> Items:
            pinned = [*refs_from_items(items, self.logical), *refs]
            entry = make_record(head, kind=kind, at=at, subject=subject, refs=pinned, facts=facts)
            merchant, day, _ = split_chain(head.chain)
            return self.store.append_items(head, entry, merchant=merchant, day=day)

        return build
