"""What a reconciliation is built from: its stores, bill sources and settings, and the bill layouts a run reads.
`ReconService` (service/recon.py) is composed of the use cases built on it."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from tally.service.journal import DecisionJournal
from tally.service.recon_layout import Layouts
from tally.service.recon_partition import SPLIT_BYTES
from tally.store.recon import BillArchive, LedgerView, ReconStore
from tally.store.tables import EventStore


class ReconSetup:
    """The parts every reconciliation use case reads: set once, by the constructor `ReconService` inherits."""

    def __init__(
        self,
        store: ReconStore,
        ledger: LedgerView,
        archive: BillArchive,
        sources: dict[str, Any],
        recover: Callable[[str, str, str], str] | None,
        merchants: Callable[[], list[tuple[str, str]]],
        *,
        clock: Callable[[], float] = time.time,
        min_ratio: float = 0.10,
        min_previous_rows: int = 10,
        last_retry_hour: int = 16,
        progress: Callable[[int], None] | None = None,
        fund_sources: dict[str, Any] | None = None,
        partition_bytes: int = 64 << 20,
        map_bytes: int = 1 << 30,
        split_bytes: int = SPLIT_BYTES,
        workers: int = 0,
        distributed: Any = None,
        map_stale_s: float = 4 * 3600,
        fund_config: Callable[[str, str], dict[str, Any]] | None = None,
        events: EventStore | None = None,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.ledger = ledger
        self.archive = archive
        self.sources = sources
        self.recover = recover
        self.merchants = merchants
        self.clock = clock
        self.min_ratio = min_ratio
        self.min_previous_rows = min_previous_rows
        self.last_retry_hour = last_retry_hour
        self.progress = progress
        self.fund_sources = fund_sources or {}
        self.partition_bytes = partition_bytes  # a bill at least this big is matched partition by partition
        self.map_bytes = (
            map_bytes  # … and at least this big on the Distributed Map (when `distributed` is set)
        )
        self.split_bytes = (
            split_bytes  # a bill on disk at least this big is parsed in pieces on several cores
        )
        self.workers = workers  # … by this many processes (0: one per CPU, recon_partition.cores)
        self.distributed = distributed  # service.recon_map.DistributedRecon or None
        self.map_stale_s = map_stale_s  # a Map run without a result after this is BLOCKED (MAP_STALE)
        # (stored channel, merchant) -> {"settlement_lag": …, "fund_accounts": …} from the merchant records (R45)
        self.fund_config = fund_config
        self.events = events  # notify_event: the work-queue item of an uploaded bill nobody can file (L5)
        self.journal = journal  # a finished run's verdict and the differences it saw (docs/audit.md)

    @functools.cached_property
    def layouts(self) -> Layouts:
        """The bill layouts a run reads (the parsers', the repo's mappings, the stored ones)."""
        return Layouts(self.store)
