"""Appending to the decision journal from a use case (issue #36, docs/audit.md).

A use case reads the row it decides on together with its chain's head (one BatchGetItem), decides, and hands
the store the `append` callable: given the decision's transaction items it returns the journal items that
ride in the same transaction. The record pins the rows the transaction puts (store/journal.py PINNED).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tally import errors
from tally.domain.journal import Head, Ref, chain_id, lane_of, make_record, shanghai_day, split_chain
from tally.store.journal import JournalStore, refs_from_items
from tally.store.tables import TransactionFailed

Items = list[dict[str, Any]]
T = TypeVar("T")
SYSTEM_CHAIN = "tally"  # the chain of a decision that names no merchant (a queue item, a caller's grant)
COMMIT_ROUNDS = 12  # a chain head taken by another writer meanwhile: read it again (a jittered pause first)
COMMIT_JITTER_S = 0.02


class _Own(Exception):
    """A failed condition of the decision's own items inside `commit` (not the journal's): raised through."""

    def __init__(self, failure: TransactionFailed):
        super().__init__(str(failure))
        self.failure = failure


class JournalBusy(errors.RetryLater):
    """The chain head kept moving under a write that reads it on its own (`DecisionJournal.commit`)."""


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

    def commit(
        self,
        merchant: str,
        subject: str,
        *,
        kind: str,
        at: str,
        facts: Mapping[str, Any],
        items: Items,
        transact: Callable[[Items], None],
        refs: Sequence[Ref] = (),
        lane: int | None = None,
    ) -> None:
        """A decision whose write reads no row of its own first (a merchant row, a recon run, a principal): the
        chain head is read on its own (one GetItem), then `items` and the record commit in ONE transaction.
        A head that moved meanwhile is read again; a failed condition of the decision's own items raises
        TransactionFailed with their positions, as without a journal. `items` may be empty (a record alone)."""

        def write(append: Callable[[Items], Items]) -> None:
            try:
                transact([*items, *append(items)])
            except TransactionFailed as exc:
                own = [i for i in exc.failed if i < len(items)]
                if own or not (exc.conflict or exc.failed):
                    exc.failed = own
                    raise _Own(exc) from None
                raise  # the chain head moved (or a conflict on it): `retrying` reads it again

        try:
            self.retrying(merchant, subject, kind=kind, at=at, facts=facts, refs=refs, write=write, lane=lane)
        except _Own as own:
            raise own.failure from None

    def retrying(
        self,
        merchant: str,
        subject: str,
        *,
        kind: str,
        at: str,
        facts: Mapping[str, Any],
        refs: Sequence[Ref],
        write: Callable[[Callable[[Items], Items]], T],
        lane: int | None = None,
    ) -> T:
        """`write(append)` puts its items and `append(items)` in one transaction, turning a failed condition of
        its own into its own error; a TransactionFailed that escapes it means the chain head moved: the head is
        read again (a jittered pause first) and `write` called again. `lane`: a chain of its own rather than the
        subject's lane (OWN_LANE: a merchant's configuration)."""
        day = shanghai_day(self.clock())
        chain = self.chain(merchant, subject) if lane is None else chain_id(merchant, day, lane)
        for round_no in range(COMMIT_ROUNDS):
            head = self.store.head(chain)
            try:
                return write(self.append(head, kind=kind, subject=subject, at=at, facts=facts, refs=refs))
            except TransactionFailed:
                time.sleep(random.uniform(0, COMMIT_JITTER_S * (round_no + 1)))
        raise JournalBusy(f"the journal chain {chain} kept moving: try again")
