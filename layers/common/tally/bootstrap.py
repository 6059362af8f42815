"""Build clients, repositories and services once per container (cold start pays it once)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from tally import snapstart  # noqa: F401 - registers SnapStart's hooks (priming, re-seeding) in every function
from tally.channels import registry  # noqa: F401 - gives the metrics their channel words in every function
from tally.settings import Settings, channel_values, webhook_settings

if TYPE_CHECKING:  # the real return types; the imports themselves stay lazy (cold start, R10)
    from tally.service.alerts import Notifier
    from tally.service.apply import ApplyService
    from tally.service.audit import AuditService
    from tally.service.backfill import SettlementBackfill
    from tally.service.callers import CallerDirectory
    from tally.service.heartbeat import Heartbeat
    from tally.service.incidents import IncidentService
    from tally.service.ingest import IngestService
    from tally.service.journal import DecisionJournal
    from tally.service.keys import KeyRotationService
    from tally.service.ledger_day import LedgerDayService
    from tally.service.manual import ManualQueue
    from tally.service.merchants import MerchantDirectory
    from tally.service.orders import OrderService
    from tally.service.outbox import EventReplay, OutboxService, ParkedRecords, Republisher, RepublishRequests
    from tally.service.poll import PollService
    from tally.service.pull import PullChannels
    from tally.service.queue import WorkQueue
    from tally.service.recon import ReconService
    from tally.service.refund_inbox import RefundInbox
    from tally.service.refunds import RefundChannel, RefundService
    from tally.service.story import StoryService
    from tally.service.sweep import PendingReport, SweepService
    from tally.service.webhooks import Deliverer as WebhookDeliverer
    from tally.service.webhooks import DeliveryLog, EventFeed, Resender, WebhookFanout
    from tally.service.webhooks import Endpoints as WebhookEndpoints
    from tally.store.refunds import RefundTables
    from tally.store.tables import Tables
    from tally.store.users import ConsoleUsers

_clock: Callable[[], float] = time.time


def set_clock(clock: Callable[[], float]) -> None:
    """Inject a clock (tests replaying a recorded event); rebuilds the services."""
    global _clock
    _clock = clock
    reset()


def reset() -> None:
    for built in (
        settings,
        tables,
        merchants,
        ingest_service,
        apply_service,
        order_service,
        outbox_service,
        manual_queue,
        work_queue,
        aws_config,
        _client,
        refund_tables,
        refund_inbox,
        refund_service,
        pull_channels,
        poll_service,
        sweep_service,
        pending_report,
        recon_service,
        key_rotation_service,
        heartbeat,
        console_users,
        story_service,
        ledger_day_service,
        webhook_fanout,
        webhook_endpoints,
        webhook_deliverer,
        incidents,
        notifier,
        callers,
        audit_service,
    ):
        built.cache_clear()


def at_init(*builders: Callable[[], object]) -> None:
    """A function's init (its module's top level): build what its handler uses, clients and services, so a
    cold start pays for them before the first request, not in it (and a snapshot of the initialised function
    holds them). The handler still asks bootstrap for them: a cached call, rebuilt after reset().

    Outside a function's environment (a test or tool importing the module without the stack's variables)
    nothing is built here: the first request builds, and fails on the missing variable, as it would."""
    try:
        settings()
    except RuntimeError:  # a missing variable (Settings.from_env): not a function's environment
        return
    for build in builders:
        build()


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def aws_config() -> Any:
    """The one botocore Config of every AWS client in a function: short timeouts, standard retries
    (settings.py; notify's are tighter, template.yaml, so a slow AWS call fails inside WeChat's 5 s)."""
    from botocore.config import Config

    s = settings()
    return Config(
        connect_timeout=s.aws_connect_timeout_s,
        read_timeout=s.aws_read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": s.aws_max_attempts},  # the first call included
    )


@cache
def _client(service: str) -> Any:  # a boto3 client: boto3 ships no types (no stubs dependency)
    import boto3

    # AWS_ENDPOINT_URL (boto3's own variable) points it at moto locally
    return boto3.client(service, config=aws_config())


@cache
def tables() -> Tables:
    from tally.store.tables import Tables

    s = settings()
    return Tables(
        _client("dynamodb"),
        s.notify_raw_table,
        s.notify_event_table,
        s.orders_table,
        s.transitions_table,
        s.ledger_table,
        s.refund_tasks_table,
        s.merchants_table,
    )


@cache
def merchants() -> MerchantDirectory:
    from tally.service.merchants import MerchantDirectory
    from tally.store.keys import PlatformCertStore
    from tally.store.secrets import SecretStore
    from tally.store.tables import MerchantStore

    s = settings()
    return MerchantDirectory(
        MerchantStore(tables()),
        SecretStore(_client("secretsmanager")),
        s.merchant_secret_prefix,
        channel_values(),
        clock=_clock,
        http_timeout_s=s.http_timeout_s,
        certs=PlatformCertStore(tables()),
        journal=decision_journal,  # called on a merchant's first change only (not on the notify path)
    )


@cache
def key_rotation_service() -> KeyRotationService:
    """The keys function's hourly run (service/keys.py)."""
    from tally.service.keys import KeyRotationService
    from tally.store.tables import EventStore

    return KeyRotationService(
        merchants(),
        events=EventStore(tables()),
        clock=_clock,
        live=True,  # R47, every merchant but the heartbeat's synthetic one (no channel knows it)
        not_live=frozenset({settings().heartbeat_mchid}),
    )


@cache
def ingest_service() -> IngestService:
    from tally.service.ingest import IngestService
    from tally.store.tables import ApplyQueue, EventStore, RawStore

    s = settings()
    return IngestService(
        merchants(),
        RawStore(tables()),
        EventStore(tables()),
        ApplyQueue(_client("sqs"), s.apply_queue_url),
        clock=_clock,
        window_s=s.timestamp_window_s,
        refund_inbox=refund_inbox,  # built on the first refund notification (cold start, docs/cost.md)
    )


@cache
def apply_service() -> ApplyService:
    from tally.service.apply import ApplyService
    from tally.store.payments import PaymentStore
    from tally.store.tables import OrderStore, RawStore

    return ApplyService(
        PaymentStore(tables()),
        RawStore(tables()),
        OrderStore(tables()),
        clock=_clock,
        max_not_found_attempts=settings().order_not_found_max_attempts,
        synthetic_mchid=settings().heartbeat_mchid,
        journal=decision_journal(),
    )


@cache
def audit_service() -> AuditService:
    """Seals, exports (docs/audit.md)."""
    from tally.service.audit import RAW_TABLE, AuditService
    from tally.store.audit import AuditVault, BillFiles
    from tally.store.journal import JournalStore, RowReader
    from tally.store.tables import EventStore

    s = settings()
    t = tables()
    physical = {k: v for k, v in journal_tables().items() if v}
    assert physical[RAW_TABLE] == t.notify_raw
    return AuditService(
        JournalStore(t.ddb, s.journal_table),
        RowReader(t.ddb, physical),
        AuditVault(_client("s3"), _client("kms"), s.audit_bucket, s.audit_key_id, s.audit_retention_days),
        BillFiles(_client("s3"), s.bills_bucket),
        cases=EventStore(t),
        clock=_clock,
    )


def journal_tables() -> dict[str, str]:
    """The logical names journal records give tables → this stack's table names (docs/audit.md)."""
    s = settings()
    return {
        "ledger": s.ledger_table,
        "transitions": s.transitions_table,
        "refunds": s.refunds_table,
        "notify_raw": s.notify_raw_table,
        "notify_event": s.notify_event_table,
        "orders": s.orders_table,
        "refund_raw": s.refund_raw_table,
        "refund_tasks": s.refund_tasks_table,
        "recon_diff": s.recon_diff_table,
        "recon_runs": s.recon_runs_table,
    }


def decision_journal() -> DecisionJournal | None:
    """The decision journal (docs/audit.md), None where the stack has no journal table (JOURNAL_TABLE unset)."""
    from tally.service.journal import DecisionJournal
    from tally.store.journal import JournalStore

    s = settings()
    if not s.journal_table:
        return None
    t = tables()
    logical = {v: k for k, v in journal_tables().items() if v}
    return DecisionJournal(JournalStore(t.ddb, s.journal_table), logical, clock=_clock)


@cache
def callers() -> CallerDirectory:
    """R53: which signed callers may act for which merchants (service/callers.py)."""
    from tally.service.callers import CallerDirectory
    from tally.store.tables import MerchantStore

    return CallerDirectory(MerchantStore(tables()), clock=_clock, journal=decision_journal())


@cache
def order_service() -> OrderService:
    from tally.service.orders import OrderService
    from tally.store.tables import OrderStore, RawStore

    return OrderService(
        OrderStore(tables()), RawStore(tables()), merchants(), clock=_clock, confirm=poll_service().confirm
    )


# ---------------------------------------------------------------- pull (docs/pull.md)


@cache
def pull_channels() -> PullChannels:
    from tally.channels import registry as channel_registry
    from tally.service.pull import MerchantPace, PullChannels

    pace = MerchantPace(settings().poll_merchant_qps)  # one per container: shared by every poller thread
    pulls = PullChannels(pace=pace)
    for (
        channel
    ) in channel_registry.all_channels():  # each channel's query and close (channels/<name>/pull.py)
        pulls.add(channel, channel.pull(merchants(), attempts=3, sleep=pace.retry_sleep(time.sleep)))
    return pulls


@cache
def poll_service() -> PollService:
    from tally.service.poll import PollService
    from tally.store.polling import PollStore
    from tally.store.tables import ApplyQueue, RawStore

    return PollService(
        PollStore(tables()),
        RawStore(tables()),
        ApplyQueue(_client("sqs"), settings().apply_queue_url),
        apply_service(),
        pull_channels(),
        clock=_clock,
        concurrency=settings().poll_concurrency,
    )


@cache
def sweep_service() -> SweepService:
    from tally.service.sweep import SweepService
    from tally.store.polling import PendingStore
    from tally.store.refunds import RefundQueue, RefundRawStore
    from tally.store.tables import ApplyQueue, RawStore

    return SweepService(
        PendingStore(tables()),
        RawStore(tables()),
        ApplyQueue(_client("sqs"), settings().apply_queue_url),
        clock=_clock,
        work=work_queue,
        refund_raw=RefundRawStore(refund_tables()),
        refund_queue=RefundQueue(_client("sqs"), settings().apply_queue_url),
    )


@cache
def pending_report() -> PendingReport:
    from tally.service.sweep import PendingReport
    from tally.store.polling import PendingStore, PollStore

    return PendingReport(PendingStore(tables()), PollStore(tables()), clock=_clock, work=work_queue)


@cache
def outbox_service() -> OutboxService:
    from tally.service.outbox import OutboxService
    from tally.store.events import EventBus
    from tally.store.tables import EventStore

    return OutboxService(
        EventBus(_client("events"), settings().event_bus_name), webhook_fanout(), EventStore(tables())
    )


@cache
def heartbeat() -> Heartbeat:
    """The synthetic heartbeat (service/heartbeat.py): functions/heartbeat, `tally pending`."""
    from tally.service.heartbeat import Heartbeat
    from tally.store.heartbeat import HeartbeatKeys
    from tally.store.secrets import SecretStore
    from tally.store.tables import EventStore, OrderStore

    s = settings()
    return Heartbeat(
        merchants(),
        order_service(),
        OrderStore(tables()),
        HeartbeatKeys(SecretStore(_client("secretsmanager")), s.merchant_secret_prefix, s.heartbeat_mchid),
        api_url=s.heartbeat_api_url,
        mchid=s.heartbeat_mchid,
        clock=_clock,
        events=EventStore(tables()),
        echo=s.heartbeat_echo,
    )


def heartbeat_age_s() -> int:
    """Seconds since the newest synthetic payment was booked."""
    return heartbeat().age_s()


def republisher() -> Republisher:
    """`tally outbox republish` (docs/runbook.md OutboxDLQAlarm)."""
    from tally.service.outbox import Republisher
    from tally.store.changes import ChangedRows

    return Republisher(ChangedRows(tables(), settings().refunds_table), outbox_service())


def parked_records() -> ParkedRecords:
    """The OutboxDLQ's consumer (functions/outboxparked): parked stream records, and cases' republish requests."""
    from tally.service.outbox import ParkedRecords
    from tally.store.events import StreamRecords

    return ParkedRecords(StreamRecords(_client("dynamodbstreams")), outbox_service(), republisher())


def republish_requests() -> RepublishRequests:
    """An event-generation-failed case's closing action (service/queue.py): a request on the OutboxDLQ."""
    from tally.service.outbox import RepublishRequests
    from tally.store.events import RepairQueue

    url = settings().outbox_dlq_url
    if not url:
        raise LookupError("no outbox queue configured (stack output OutboxDLQUrl)")
    return RepublishRequests(RepairQueue(_client("sqs"), url))


def event_replay() -> EventReplay:
    """`tally events replay` (docs/events.md)."""
    from tally.service.outbox import EventReplay
    from tally.store.events import EventBus

    s = settings()
    return EventReplay(EventBus(_client("events"), s.event_bus_name), s.event_archive_arn)


@cache
def manual_queue() -> ManualQueue:
    from tally.service.manual import ManualQueue
    from tally.store.manual import ManualStore
    from tally.store.tables import ApplyQueue, RawStore

    return ManualQueue(
        ManualStore(tables()),
        RawStore(tables()),
        ApplyQueue(_client("sqs"), settings().apply_queue_url),
        ingest_service(),
        clock=_clock,
        journal=decision_journal(),
    )


@cache
def work_queue() -> WorkQueue:
    """The one queue of everything that needs a person (service/queue.py, R41)."""
    from tally.service.queue import WorkQueue
    from tally.store.queue import QueueStore, QueueTables

    s = settings()
    store = QueueStore(
        QueueTables(
            _client("dynamodb"),
            notify_raw=s.notify_raw_table,
            notify_event=s.notify_event_table,
            orders=s.orders_table,
            refunds=s.refunds_table,
            refund_raw=s.refund_raw_table,
            refund_tasks=s.refund_tasks_table,
            recon_runs=s.recon_runs_table,
            recon_diff=s.recon_diff_table,
        )
    )
    return WorkQueue(  # services built on first use: the poller only reads
        store,
        manual=manual_queue,
        refunds=refund_service,
        recon=recon_service if s.recon_runs_table else None,
        republish=republish_requests,
        clock=_clock,
        journal=decision_journal(),
    )


def bulk_replay() -> Any:
    """Safe bulk replay runs over the work queue (service/replay.py); runs are stored in notify_event."""
    from tally.service.replay import BulkReplay
    from tally.store.replay import ReplayStore

    return BulkReplay(
        work_queue(), ReplayStore(_client("dynamodb"), settings().notify_event_table), clock=_clock
    )


# ---------------------------------------------------------------- refunds


@cache
def refund_tables() -> RefundTables:
    from tally.store.refunds import RefundTables

    s = settings()
    return RefundTables(tables(), s.refunds_table, s.refund_raw_table)


@cache
def refund_inbox() -> RefundInbox:
    from tally.service.refund_inbox import RefundInbox
    from tally.store.refunds import RefundQueue, RefundRawStore
    from tally.store.tables import EventStore

    return RefundInbox(
        RefundRawStore(refund_tables()),
        RefundQueue(_client("sqs"), settings().apply_queue_url),
        clock=_clock,
        events=EventStore(tables()),
    )


def refund_channels() -> dict[str, Callable[[str], RefundChannel]]:
    """One refund client entry per stored channel: `channel -> (mchid -> RefundChannel)` (docs/refunds.md),
    each client given by its channel (channels/<name>/channel.py `refund_client`)."""
    from tally.channels import registry as channel_registry

    return channel_registry.refund_clients(merchants(), settings(), _clock)


@cache
def refund_service() -> RefundService:
    from tally.service.refunds import RefundService
    from tally.store.refunds import RefundRawStore, RefundStore
    from tally.store.tables import OrderStore

    s = settings()
    return RefundService(
        RefundStore(refund_tables()),
        RefundRawStore(refund_tables()),
        OrderStore(tables()),
        refund_inbox(),
        refund_channels(),
        clock=_clock,
        task_policy=s.refund_task_policy,
        expiry_s=s.refund_expiry_s,
        journal=decision_journal(),
    )


# ---------------------------------------------------------------- reconciliation (docs/recon.md)


@cache
def recon_service() -> ReconService:
    from tally.service.recon import ReconService
    from tally.service.recon_pull import QueryAndApply
    from tally.service.recon_sources import bill_sources
    from tally.service.settlement_config import MerchantSettlement
    from tally.store.recon import BillArchive, LedgerView, ReconStore
    from tally.store.tables import ApplyQueue, EventStore, MerchantStore, RawStore

    s = settings()
    ddb = _client("dynamodb")
    sources = bill_sources(merchants())  # stored channel -> its download (channels/<name>/bills.py)
    recover = QueryAndApply(
        merchants(), RawStore(tables()), ApplyQueue(_client("sqs"), s.apply_queue_url), clock=_clock
    ).recover

    return ReconService(
        ReconStore(ddb, s.recon_runs_table, s.recon_diff_table),
        LedgerView(ddb, s.ledger_table),
        BillArchive(_client("s3"), s.bills_bucket),
        sources,
        recover,
        lambda: [
            m for m in MerchantStore(tables()).configured() if m[1] != s.heartbeat_mchid
        ],  # not synthetic
        clock=_clock,
        min_ratio=s.recon_min_ratio,
        min_previous_rows=s.recon_min_previous_rows,
        partition_bytes=s.recon_partition_bytes,
        map_bytes=s.recon_map_bytes,
        split_bytes=s.recon_split_bytes,
        workers=s.recon_workers,
        distributed=_distributed_recon(s),
        fund_sources=_fund_sources(),
        fund_config=MerchantSettlement(MerchantStore(tables())).config,  # settlement_lag, fund_accounts (R45)
        events=EventStore(tables()),
        journal=decision_journal(),
    )


def _distributed_recon(s: Settings) -> Any:
    """The Distributed Map path (service/recon_map.py), or None when no state machine is configured."""
    if not s.recon_state_machine_arn:
        return None
    from tally.service.recon_map import DistributedRecon
    from tally.store.recon import BillArchive, ReconMachine

    return DistributedRecon(
        BillArchive(_client("s3"), s.bills_bucket),
        ReconMachine(_client("stepfunctions"), s.recon_state_machine_arn),
    )


def _fund_sources() -> dict[str, Any]:
    """stored channel -> its fund-flow download (R45, Channel.fund_flow_source: WeChat v3 or v2 as the records
    say, Alipay signcustomer)."""
    from tally.channels import registry as channel_registry

    sources: dict[str, Any] = {}
    for channel in channel_registry.all_channels():
        source = channel.fund_flow_source(merchants())
        if source is not None:
            sources.setdefault(channel.stored, source)
    return sources


# ---------------------------------------------------------------- reading (docs/story.md): no side effects (R42)


@cache
def story_service() -> StoryService:
    """The order story: Query / GetItem only, never the channel."""
    from tally.service.story import StoryService
    from tally.store.recon import LedgerView, ReconStore
    from tally.store.refunds import RefundRawStore, RefundStore
    from tally.store.tables import EventStore, OrderStore, RawStore

    s = settings()
    story = StoryService(
        OrderStore(tables()),
        RawStore(tables()),
        EventStore(tables()),
        RefundStore(refund_tables()),
        RefundRawStore(refund_tables()),
        LedgerView(_client("dynamodb"), s.ledger_table),
        ReconStore(_client("dynamodb"), s.recon_runs_table, s.recon_diff_table),
    )
    story.webhooks = webhook_log() if webhook_settings().table else None
    return story


@cache
def ledger_day_service() -> LedgerDayService:
    """The finance view of one bill_date (service/ledger_day.py)."""
    from tally.domain.recon import china_date
    from tally.service.ledger_day import LedgerDayService
    from tally.service.settlement_config import MerchantSettlement
    from tally.store.recon import LedgerView, ReconStore
    from tally.store.tables import MerchantStore

    s = settings()
    return LedgerDayService(
        LedgerView(_client("dynamodb"), s.ledger_table),
        ReconStore(_client("dynamodb"), s.recon_runs_table, s.recon_diff_table),
        MerchantStore(tables()).configured,
        lag_config=MerchantSettlement(MerchantStore(tables())).config,  # settlement_lag (R45)
        today=lambda: china_date(_clock()).isoformat(),
        hidden=(s.heartbeat_mchid,),  # synthetic traffic out of the books (R54)
    )


def settlement_backfill() -> SettlementBackfill:
    """`tally ledger backfill-settlement` (service/backfill.py, R43): kept raw rows → settlement figures."""
    from tally.service.backfill import SettlementBackfill
    from tally.store.backfill import SettlementBackfillStore

    s = settings()
    return SettlementBackfill(
        SettlementBackfillStore(tables(), s.refund_raw_table),
        merchants(),
        clock=_clock,
        window_s=s.timestamp_window_s,
    )


# ---------------------------------------------------------------- the operations console (docs/console.md)


@cache
def console_users() -> ConsoleUsers:
    from tally.store.users import ConsoleUsers

    s = settings()
    return ConsoleUsers(_client("cognito-idp"), s.console_user_pool_id, s.console_client_id)


# ---------------------------------------------------------------- webhooks (docs/webhooks.md)


@cache
def webhook_endpoints() -> WebhookEndpoints:
    from tally.service.webhooks import Endpoints
    from tally.store.secrets import SecretStore
    from tally.store.tables import MerchantStore
    from tally.store.webhooks import WebhookStore

    prefix = settings().merchant_secret_prefix + "webhooks/"  # tally/<stack>/merchants/webhooks/<endpoint>
    store = WebhookStore(_client("dynamodb"), webhook_settings().table)

    def merchant_ids() -> list[str]:
        return sorted({mchid for _, mchid in MerchantStore(tables()).configured()})

    return Endpoints(
        store,
        SecretStore(_client("secretsmanager")),
        prefix,
        _clock,
        merchant_ids,
        private_addresses=webhook_settings().private_addresses,
    )


@cache
def webhook_fanout() -> WebhookFanout | None:
    """None where the stack has no webhooks table (the outbox then only publishes to the bus)."""
    from tally.service.webhooks import WebhookFanout
    from tally.store.changes import ChangedRows
    from tally.store.webhooks import WebhookQueue

    w = webhook_settings()
    if not (w.table and w.queue_url):
        return None
    return WebhookFanout(
        webhook_endpoints().store,
        WebhookQueue(_client("sqs"), w.queue_url),
        ChangedRows(tables(), settings().refunds_table),
        _clock,
        w.api_url,
    )


@cache
def webhook_deliverer() -> WebhookDeliverer:
    from tally.domain.webhooks import RETRY_SCHEDULE_S, RETRY_WINDOW_S
    from tally.service.webhooks import Deliverer
    from tally.store.tables import EventStore
    from tally.store.webhooks import WebhookQueue

    w = webhook_settings()
    endpoints = webhook_endpoints()
    return Deliverer(
        endpoints.store,
        WebhookQueue(_client("sqs"), w.queue_url),
        endpoints,
        EventStore(tables()),
        _clock,
        timeout_s=w.timeout_s,
        schedule=w.retry_s or RETRY_SCHEDULE_S,
        window_s=w.window_s or RETRY_WINDOW_S,
        concurrency=w.concurrency,
    )


def webhook_log() -> DeliveryLog:
    from tally.service.webhooks import DeliveryLog

    return DeliveryLog(webhook_endpoints().store)


def webhook_resender() -> Resender:
    from tally.service.webhooks import Resender, WebhookFanout
    from tally.store.changes import ChangedRows
    from tally.store.webhooks import WebhookQueue

    fanout = webhook_fanout() or WebhookFanout(
        webhook_endpoints().store,
        WebhookQueue(_client("sqs"), webhook_settings().queue_url),
        ChangedRows(tables(), settings().refunds_table),
        _clock,
    )
    return Resender(webhook_endpoints().store, fanout, _clock)


def event_feed() -> EventFeed:
    from tally.service.webhooks import EventFeed

    return EventFeed(webhook_endpoints().store, _clock, webhook_settings().settle_s)


# ---------------------------------------------------------------- incidents and chat cards (docs/alerts.md)


@cache
def incidents() -> IncidentService:
    from tally.service.incidents import IncidentService
    from tally.store.alerts import IncidentStore

    s = settings()
    return IncidentService(
        IncidentStore(_client("dynamodb"), s.alerts_table),
        work_queue,
        clock=_clock,
        escalate_per_h=s.incident_escalate_per_h,
        quiet_s=s.incident_quiet_s,
    )


def alert_log() -> Any:
    from tally.store.alerts import AlertLog

    return AlertLog(_client("dynamodb"), settings().alerts_table)


def alert_destinations() -> Any:
    from tally.store.alerts import Destinations, secret_name
    from tally.store.secrets import SecretStore

    return Destinations(
        SecretStore(_client("secretsmanager")), secret_name(settings().merchant_secret_prefix)
    )


@cache
def notifier() -> Notifier:
    from tally.service.alerts import Notifier
    from tally.store.tables import EventStore

    s = settings()
    return Notifier(
        alert_destinations(),
        alert_log(),
        EventStore(tables()),
        console_url=s.console_url,
        clock=_clock,
        hour_cap=s.alert_hour_cap,
    )


def destination_book() -> Any:
    """`tally alerts add/list/remove/snooze` (service/alerts.py DestinationBook)."""
    from tally.service.alerts import DestinationBook

    return DestinationBook(alert_destinations(), clock=_clock)
