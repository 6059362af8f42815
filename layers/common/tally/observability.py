"""Logger and metrics singletons, and every metric name the product emits (one place).

Alarms in template.yaml may only watch names listed here; a test checks both directions.
`count()` is the one way the product emits a metric. With `channel=`/`merchant=` the count also lands in
per-channel (and, for allow-listed merchants, per-merchant) series, from a bounded set of values fixed by
configuration, never by traffic (docs/metrics.md).
"""

from __future__ import annotations

import functools
import json
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.lambda_context import build_lambda_context_model
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from tally.settings import metric_merchants

# Powertools' Logger: one JSON line per call on stdout (docs/observability.md has the fields); the level from
# POWERTOOLS_LOG_LEVEL (template.yaml) or Lambda's AWS_LAMBDA_LOG_LEVEL. What is printed is only what the code
# passes: no event, body or secret is ever logged (tests/security/test_security.py::test_no_secret_in_logs).
logger = Logger(service="tally")


def lean_lambda_context(handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`logger.inject_lambda_context(clear_state=True)` for notify, whose CPU per callback is a target
    (docs/cost.md): the same keys on every line, at a quarter of the cost. The context's keys are structured
    on the first invocation, and again whenever the one before appended keys of its own (a quarantined
    callback's raw_key and order), as clear_state would; any other invocation appends only its request id
    and cold_start=False."""
    structured = -1  # how many keys the formatter held right after the last structure_logs
    formatter: Any = None  # the Logger's formatter as of that structure_logs (Logger.append_keys goes to it)

    @functools.wraps(handler)
    def decorate(event: Any, context: Any) -> Any:
        nonlocal structured, formatter
        if formatter is None or len(formatter.log_format) != structured:
            fields = build_lambda_context_model(context).__dict__
            logger.structure_logs(cold_start=structured == -1, **fields)
            formatter = logger.registered_formatter
            structured = len(formatter.log_format)
        else:
            formatter.append_keys(function_request_id=context.aws_request_id, cold_start=False)
        return handler(event, context)

    return decorate


NAMESPACE = "Tally"
SERVICE = "tally"
OTHER = "other"
METRICS_DISABLED = is_metrics_disabled()  # Powertools' own rule, read once per container
MAX_CELL_METRICS = 100  # EMF's limit per blob: at it, Powertools' add_metric prints the blob and starts anew
MAX_CELL_SHAPES = (
    64  # remembered line shapes per cell (the names counted together); past it, no more are kept
)
# Powertools' compact EMF JSON (its flush: json.dumps with these separators), the encoder built once; the blob is
# a tree this module builds, so the cycle check has nothing to find
_emf_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
_TIMESTAMP_MARK, _VALUE_MARK = "\x00timestamp", "\x00value"
MAX_LISTED_MERCHANTS = 20  # a typo'd or pasted-in huge allow-list must not multiply the metric bill


class _Cell(AmazonCloudWatchEMFProvider):
    """One (channel, merchant) cell's provider: its dimension sets are fixed when it is made and kept across
    flushes (Powertools' clear_metrics would drop them, and adding them again costs ~3 µs a flush).

    Notify flushes a cell on every callback (docs/cost.md), so a flush does only what changes between two of
    them. A name's first value goes through Powertools' add_metric (its name, unit and resolution checks) and
    later values reuse the unit and resolution it settled. A line's shape (namespace, dimension sets, names,
    units) is fixed by the names counted, in order: Powertools serialises each shape once, and later flushes of
    that shape put only the timestamp and the values into its encoding, byte for byte the line Powertools
    prints (tests/unit/test_powertools_compat.py). Whether metrics are disabled is read once per container
    (POWERTOOLS_METRICS_DISABLED / POWERTOOLS_DEV do not change under a running function)."""

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.settled: dict[str, tuple[str, int]] = {}  # name -> (unit, resolution) add_metric accepted
        self.shapes: dict[
            tuple[str, ...], str
        ] = {}  # names in order -> the line with %d / %s for the numbers

    def add_count(self, name: str, value: float) -> None:
        settled = self.settled.get(name)
        if settled is None or name in self.metric_set or len(self.metric_set) + 1 >= MAX_CELL_METRICS:
            self.add_metric(name=name, unit=MetricUnit.Count, value=value)
            entry = self.metric_set[name] if name in self.metric_set else None
            if entry is not None:
                self.settled[name] = (entry["Unit"], entry["StorageResolution"])
            return
        unit, resolution = settled
        self.metric_set[name] = {"Unit": unit, "StorageResolution": resolution, "Value": [float(value)]}

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        if self.metric_set and not METRICS_DISABLED:
            print(self.emf_line())
        self.clear_metrics()

    def emf_line(self) -> str:
        names = tuple(self.metric_set)
        values = _json_values(self.metric_set)
        shape = self.shapes.get(names)
        if shape is None or values is None:
            blob = self.serialize_metric_set()
            if values is None or self.metadata_set or len(self.shapes) >= MAX_CELL_SHAPES:
                return _emf_json(blob)
            shape = self.shapes[names] = _shape_of(blob, names)
        timestamp = self.timestamp or int(time.time() * 1000)  # epoch ms, as Powertools' datetime.now() reads
        return shape % (timestamp, *values)

    def clear_metrics(self) -> None:
        self.metric_set.clear()
        self.metadata_set.clear()


def _shape_of(blob: Mapping[str, Any], names: tuple[str, ...]) -> str:
    """Powertools' serialised blob encoded with a `%d` for its timestamp and a `%s` for each name's values."""
    marked = {**blob, "_aws": {**blob["_aws"], "Timestamp": _TIMESTAMP_MARK}}
    marked.update({name: f"{_VALUE_MARK}{i}" for i, name in enumerate(names)})
    text = _emf_json(marked).replace("%", "%%").replace(_emf_json(_TIMESTAMP_MARK), "%d")
    for i in range(len(names)):
        text = text.replace(_emf_json(f"{_VALUE_MARK}{i}"), "%s", 1)
    return text


def _json_values(metric_set: dict[str, Any]) -> list[str] | None:
    """Each metric's value list as json encodes it (a finite float is its repr), or None if one holds
    anything else (then Powertools' own serialisation prints the line)."""
    encoded = []
    for metric in metric_set.values():
        values = metric["Value"]
        if len(values) == 1 and type(value := values[0]) is float and math.isfinite(value):
            encoded.append(f"[{value!r}]")
        elif all(type(value) is float and math.isfinite(value) for value in values):
            encoded.append("[" + ",".join(map(float.__repr__, values)) + "]")
        else:
            return None
    return encoded


class _DimensionedProvider(AmazonCloudWatchEMFProvider):
    """Powertools' EMF provider plus one cell per (channel, merchant): a cell is a Powertools provider whose
    blob carries the dimension sets [service], [service, channel] (and [service, channel, merchant]).

    In EMF a dimension has one value per blob, so differing channels cannot share a blob; counts without
    dimensions stay in the ordinary service-only blob. The [service] set in every cell's blob keeps the
    service-only series (the one the alarms watch) whole. One flush (`@metrics.log_metrics`) prints each cell's
    blob, then the service-only blob; a blob holds at most 100 metrics (Powertools flushes at the EMF limit)."""

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        # built once per (channel, merchant) and kept: a provider's construction is most of a flush's CPU, and
        # the cells are a bounded set (the registry's channels and OTHER × the allow-list and OTHER)
        self.cells: dict[tuple[str, str | None], _Cell] = {}

    def add_cell_metric(self, name: str, value: float, channel: str, merchant: str | None) -> None:
        cell = self.cells.get((channel, merchant))
        if cell is None:
            cell = self.cells[(channel, merchant)] = _Cell(namespace=self.namespace, service=self.service)
            cell.add_dimensions(service=self.service, channel=channel)
            if merchant is not None:
                cell.add_dimensions(service=self.service, channel=channel, merchant=merchant)
        cell.add_count(name, value)

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        _drain()
        counted = [cell for cell in self.cells.values() if cell.metric_set]
        for cell in counted:
            cell.flush_metrics()
        if self.metric_set:
            super().flush_metrics(raise_on_empty_metrics=raise_on_empty_metrics)
        elif (
            not counted
        ):  # an invocation that counted nothing (a quiet tick) prints nothing and warns nothing
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "No application metrics to publish")
                super().flush_metrics(raise_on_empty_metrics=raise_on_empty_metrics)

    def clear_metrics(self) -> None:
        with _pending_lock:
            _pending.clear()
        for cell in self.cells.values():
            cell.clear_metrics()
        super().clear_metrics()


_provider = _DimensionedProvider(namespace=NAMESPACE, service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE, provider=_provider)


class M:
    # ingest
    NOTIFY_ACCEPTED = "NotifyAccepted"
    NOTIFY_DUPLICATE = "NotifyDuplicate"
    NOTIFY_REJECTED = "NotifyRejected"  # signature / timestamp / unknown merchant / bad request (R4)
    NOTIFY_PROBE = "NotifyProbeRejected"  # WECHATPAY/SIGNTEST/ probes: expected, not alarmed
    NOTIFY_ECHO = "NotifyEcho"  # a verified WeChat v3 SECURITY_ECHO callback: acknowledged, nothing stored
    NOTIFY_QUARANTINED = "NotifyQuarantined"  # valid signature, undecryptable or unparseable (R5)
    NOTIFY_IN_BETWEEN = "NotifyInBetween"  # NOTPAY / USERPAYING kept as events (R8)
    NOTIFY_NO_TRANSACTION_ID = "NotifyNoTransactionId"  # a paid state without a transaction id: a person
    REPORT_FORGED = "ReportForged"  # a signed report naming another tenant's money: parked (R39, alarmed)
    NOTIFY_FAILED = "NotifyFailed"  # an unexpected exception at the notify edge: failure ACK (R40, alarmed)
    API_FAILED = "ApiFailed"  # an unexpected exception at the /orders or /refunds edge: 500 (R40, alarmed)
    API_FORBIDDEN = (
        "ApiForbidden"  # a signed caller acting for a merchant it is not registered with: 403 (R53)
    )
    ENQUEUE_FAILED = "EnqueueFailed"
    CERT_REFRESHED = "PlatformCertRefreshed"
    CERT_EXPIRING = "PlatformCertExpiring"  # a channel/app certificate expires within 7 days (alarmed)
    CERT_REFRESH_FAILED = "PlatformCertRefreshFailed"  # the scheduled certificate download failed (alarmed)
    MERCHANT_NOT_READY = (
        "MerchantNotReady"  # a merchant's credentials turned failing the live check (R47, alarmed)
    )
    # apply
    APPLY_BOOKED = "ApplyBooked"
    APPLY_DUPLICATE = "ApplyDuplicate"
    APPLY_MANUAL = "ApplyManual"  # every row sent to handled=2: the manual queue (R12, R15, R16, R17)
    APPLY_MISMATCH = "ApplyMismatch"
    APPLY_UNKNOWN_STATE = "ApplyUnknownState"
    APPLY_ORDER_NOT_FOUND = "ApplyOrderNotFound"
    APPLY_ILLEGAL = "ApplyIllegal"
    APPLY_RETRY = "ApplyRetry"
    APPLY_OUT_OF_WINDOW = (
        "ApplyDayOutOfWindow"  # a payment's day is finished, future or before its order (R50)
    )
    SETTLEMENT_UNKNOWN = "SettlementUnknown"  # booked, but the settlement amount is unknown: a person (R43)
    APPLY_FAILED = "ApplyFailed"  # unexpected exception in the worker: the message is retried
    REFUND_TASK_CREATED = "RefundTaskCreated"
    # orders
    PREPAY_FAILED = "PrepayFailed"
    # the manual queue
    MANUAL_RESOLVED = "ManualResolved"
    MANUAL_REPLAYED = "ManualReplayed"
    # downstream events (R20)
    OUTBOX_PUBLISHED = "OutboxPublished"
    OUTBOX_FAILED = "OutboxFailed"
    # refunds (R26–R30)
    REFUND_CREATED = "RefundCreated"  # reserved + stored PENDING
    REFUND_ACCEPTED = "RefundAccepted"
    REFUND_SUCCEEDED = "RefundSucceeded"  # booked in the ledger
    REFUND_FAILED = "RefundFailed"  # CLOSED / rejected: reservation released (R38: repeats need a person)
    REFUND_MANUAL = "RefundManual"  # ABNORMAL, expired, mismatch, unknown answer, contradiction: a person
    REFUND_EXPIRED = "RefundExpired"
    REFUND_DAY_OUT_OF_WINDOW = "RefundDayOutOfWindow"  # a success on a finished or future day: a person (R50)
    REFUND_HOLD_RECOVERED = "RefundHoldRecovered"  # a create call died after reserving: re-sent by the poll
    REFUND_EXCEEDS = "RefundExceedsRefundable"  # refused by the guard (R27): a caller error, not alarmed
    REFUND_CHANNEL_RETRY = "RefundChannelRetry"  # sent, outcome unknown: retried with the same refund_no
    REFUND_QUERY_FAILED = "RefundQueryFailed"
    REFUND_DUPLICATE = "RefundDuplicate"
    REFUND_NOTIFY_ACCEPTED = "RefundNotifyAccepted"
    REFUND_NOTIFY_DUPLICATE = "RefundNotifyDuplicate"
    REFUND_TASK_MANUAL = "RefundTaskManual"  # a refund task (ILLEGAL payment) handed to a person
    REFUND_REPORT_MANUAL = "RefundReportManual"  # a refund report parked at refund_raw handled=2 (R41)
    REFUND_POLL_FAILED = "RefundPollFailed"  # polling one refund raised: rescheduled, 5 in a row → a person
    REFUND_NO_CHANNEL = "RefundNoChannel"  # a due refund's merchant has no credentials: 5 in a row → a person
    # pull: poller, return page, sweeper (docs/pull.md)
    POLL_ORDERS_READ = "PollOrdersRead"  # items the poller read from the poll index this run
    POLL_QUERIED = "PollQueried"
    POLL_PAID = "PollPaid"
    POLL_WAITING = "PollWaiting"
    POLL_NOT_CREATED = "PollNotCreated"
    POLL_CLOSED = "PollClosed"
    POLL_QUERY_FAILED = "PollQueryFailed"  # transient query failure: asked again later, bounded
    POLL_CLOSE_FAILED = "PollCloseFailed"
    POLL_UNMAPPED = "PollUnmapped"  # a channel answer in no table (R22): also PollManual
    POLL_MANUAL = "PollManual"  # an order handed to a person (manual#<shard> in the poll index)
    POLL_STALE_IGNORED = "PollStaleIgnored"  # an older unpaid answer met a paid order (R24)
    POLL_FAILED = "PollFailed"  # unexpected exception while polling one order
    CONFIRM_QUERIED = "ReturnPageQueried"
    SWEEP_REQUEUED = "SweepRequeued"
    SWEEP_GAVE_UP = "SweepGaveUp"  # a raw row re-queued too often: handled=2
    PENDING_STALE = "PendingOver10m"  # gauge, every poller run: handled=0 older than 10 min (R25, R37)
    MANUAL_AGED = "ManualOver24h"  # gauge, every poller run: handled=2 older than 24 h (R25, R37)
    # reconciliation (R31–R36)
    RECON_MATCHED = "ReconMatched"  # a day whose bill and ledger agree
    RECON_QUIET_DAY = "ReconQuietDay"  # no bill and no ledger entries, or a zero bill (R31)
    RECON_BLOCKED = "ReconBlocked"  # a guard refused the bill (R31–R33) or no bill while we booked money
    RECON_PARSE_FAILED = "ReconParseFailed"  # HTML page, unknown header, undecodable, hash mismatch
    RECON_DOWNLOAD_FAILED = "ReconDownloadFailed"
    RECON_NOT_READY = "ReconStatementNotReady"  # STATEMENT_CREATING: retried on the next tick
    RECON_DIFF_OPENED = "ReconDiffOpened"  # a new difference for a person (R36)
    RECON_DIFF_RESOLVED = "ReconDiffResolved"
    RECON_RECOVER_QUEUED = "ReconRecoverQueued"  # a channel-only payment sent down the pull path
    RECON_RECOVER_FAILED = "ReconRecoverFailed"
    RECON_FAILED = "ReconFailed"  # unexpected exception in the recon function
    RECON_RUN_COMPLETED = "ReconRunCompleted"  # heartbeat: every finished run, quiet and blocked included
    RECON_NO_BILL_SOURCE = "ReconNoBillSource"  # a merchant recon has no way to fetch a bill for (R44)
    RECON_MERCHANTS_DUE = "ReconMerchantsDue"  # gauge per tick: configured merchants due for T+1 (R44)
    RECON_MERCHANTS_RECONCILED = (
        "ReconMerchantsReconciled"  # gauge per tick: T+1 finished MATCHED/DIFFS/QUIET
    )
    RECON_MERCHANTS_BLOCKED = "ReconMerchantsBlocked"  # gauge per tick: T+1 BLOCKED (alarmed, R44)
    RECON_FUND_FLOW_LATE = "ReconFundFlowLate"  # a fund-flow bill missing past its due day + 1 (R45)
    # the synthetic heartbeat (service/heartbeat.py)
    HEARTBEAT_AGE = (
        "HeartbeatAge"  # gauge, every minute: seconds since the newest synthetic payment was booked
    )
    HEARTBEAT_DISCARDED = "HeartbeatDiscarded"  # a heartbeat payment that would have gone to a person (R54)
    HEARTBEAT_ECHO_AGE = (
        "HeartbeatEchoAge"  # gauge, every minute: seconds the oldest unanswered echo has waited
    )
    # the operations console (docs/console.md)
    CONSOLE_ACTION = "ConsoleAction"  # an operator acted on an item: expected traffic
    CONSOLE_ACTION_REFUSED = (
        "ConsoleActionRefused"  # a viewer's POST, a bad CSRF token, another origin (alarmed)
    )
    CONSOLE_LOGIN_FAILED = "ConsoleLoginFailed"  # a mistyped password: expected traffic (Cognito locks out)
    # webhooks to the merchant's systems (docs/webhooks.md)
    WEBHOOK_DELIVERED = "WebhookDelivered"
    WEBHOOK_ATTEMPT_FAILED = (
        "WebhookAttemptFailed"  # one failed attempt: retried with backoff, expected traffic
    )
    WEBHOOK_GAVE_UP = "WebhookGaveUp"  # past the retry window: FAILED, endpoint paused, a case (alarmed)
    WEBHOOK_HELD = "WebhookHeld"  # an event for a paused endpoint, kept for `tally webhooks resend` (alarmed)
    WEBHOOK_FAILED = "WebhookFailed"  # the delivery code raised: kept for a retry (alarmed)
    EVENT_GENERATION_FAILED = "EventGenerationFailed"  # a change whose event could not be built (alarmed)
    # incidents and chat cards (docs/alerts.md)
    INCIDENT_OPENED = "IncidentOpened"
    INCIDENT_ESCALATED = "IncidentEscalated"
    INCIDENT_RESOLVED = "IncidentResolved"
    ALERT_SENT = "AlertSent"
    ALERT_SUPPRESSED = "AlertSuppressed"  # snoozed or over the hourly cap: recorded in the alert log
    ALERT_FAILED = "AlertDeliveryFailed"  # a card not delivered after its retries: a case (alarmed)
    # provable books (docs/audit.md)
    AUDIT_SEALED = "AuditSealed"  # one merchant's day sealed (signed, locked)
    AUDIT_MISMATCH = "AuditMismatch"  # the daily verifier found a record that does not fit: a case (alarmed)


# Metrics an alarm must watch: a failure nobody watches is a silent path.
ALARMED = frozenset(
    {
        M.NOTIFY_REJECTED,
        M.NOTIFY_QUARANTINED,
        M.ENQUEUE_FAILED,
        M.APPLY_MANUAL,
        M.APPLY_FAILED,
        M.OUTBOX_FAILED,
        M.CERT_EXPIRING,
        M.CERT_REFRESH_FAILED,
    }
) | frozenset({M.REFUND_FAILED, M.REFUND_MANUAL, M.REFUND_TASK_MANUAL})
ALARMED = ALARMED | {
    M.POLL_MANUAL,
    M.POLL_FAILED,
    M.POLL_QUERY_FAILED,
    M.PENDING_STALE,
    M.MANUAL_AGED,
}  # pull
ALARMED = ALARMED | {
    M.RECON_BLOCKED,
    M.RECON_PARSE_FAILED,
    M.RECON_DOWNLOAD_FAILED,
    M.RECON_DIFF_OPENED,
    M.RECON_RECOVER_FAILED,
    M.RECON_FAILED,
}  # reconciliation
ALARMED = ALARMED | {
    M.REPORT_FORGED,
    M.NOTIFY_FAILED,
    M.API_FAILED,
    M.API_FORBIDDEN,
}  # hostile tenants, the open route (R39, R40)
ALARMED = ALARMED | {M.RECON_RUN_COMPLETED}  # its absence is the alarm: recon did not run
ALARMED = ALARMED | {M.CONSOLE_ACTION_REFUSED}  # the console
ALARMED = ALARMED | {M.NOTIFY_NO_TRANSACTION_ID, M.REFUND_REPORT_MANUAL}  # the work queue (R41)
ALARMED = ALARMED | {M.HEARTBEAT_AGE}  # the money path end to end, every minute
ALARMED = ALARMED | {M.HEARTBEAT_ECHO_AGE}  # the channel's echo back through the notify route, every minute
ALARMED = ALARMED | {M.MERCHANT_NOT_READY}  # the live credential doctor (R47)
ALARMED = ALARMED | {M.RECON_NO_BILL_SOURCE, M.RECON_MERCHANTS_BLOCKED}  # every merchant reconciled (R44)
ALARMED = ALARMED | {M.RECON_FUND_FLOW_LATE}  # the fund-flow leg (R45)
ALARMED = ALARMED | {M.REFUND_POLL_FAILED, M.REFUND_NO_CHANNEL}  # the except-clause audit (docs/silence.md)
ALARMED = ALARMED | {M.AUDIT_MISMATCH}  # provable books: the daily verifier (docs/audit.md)
ALARMED = ALARMED | {
    M.WEBHOOK_GAVE_UP,
    M.WEBHOOK_HELD,
    M.WEBHOOK_FAILED,
    M.EVENT_GENERATION_FAILED,
}  # webhooks
ALARMED = ALARMED | {M.ALERT_FAILED}  # a silent pager (docs/alerts.md)


class Emission(NamedTuple):  # not a frozen dataclass: one less class compiled at every cold start
    """How an alarmed metric reaches CloudWatch, for R46's arithmetic (tests/unit/test_alarm_wiring.py): an
    alarm's period, threshold and datapoints must be reachable by the smallest source of its failure.

    `every_s`: 0 = counted once per occurrence, whenever it happens; otherwise the longest time between two
    counts from that source (a schedule's interval; for a heartbeat, its longest normal gap).
    `per`: what one emission counts. `source`: the smallest thing that produces it, in words."""

    every_s: int
    source: str
    per: int = 1


PER_OCCURRENCE = 0

# Every metric an alarm watches, with its emission (a new alarmed metric adds a line here).
EMISSION: dict[str, Emission] = {
    M.NOTIFY_REJECTED: Emission(PER_OCCURRENCE, "one refused callback"),
    M.NOTIFY_QUARANTINED: Emission(PER_OCCURRENCE, "one quarantined callback"),
    M.ENQUEUE_FAILED: Emission(PER_OCCURRENCE, "one callback not enqueued"),
    M.APPLY_MANUAL: Emission(PER_OCCURRENCE, "one raw row sent to a person"),
    M.APPLY_FAILED: Emission(PER_OCCURRENCE, "one apply that raised"),
    M.SETTLEMENT_UNKNOWN: Emission(PER_OCCURRENCE, "one payment or refund booked, its settlement unknown"),
    M.OUTBOX_FAILED: Emission(PER_OCCURRENCE, "one stream record not published"),
    M.REFUND_FAILED: Emission(PER_OCCURRENCE, "one failed refund"),
    M.REFUND_MANUAL: Emission(PER_OCCURRENCE, "one refund handed to a person"),
    M.REFUND_TASK_MANUAL: Emission(PER_OCCURRENCE, "one refund task handed to a person"),
    M.POLL_MANUAL: Emission(PER_OCCURRENCE, "one order handed to a person"),
    M.POLL_FAILED: Emission(PER_OCCURRENCE, "one poll that raised"),
    # one failing order is retried with backoff and escalates through PollManual; this one is for outages
    M.POLL_QUERY_FAILED: Emission(
        60, "a channel outage while 2 orders are due a minute (poller every 60 s)", 2
    ),
    M.PENDING_STALE: Emission(60, "gauge: every poller run, zero included"),
    M.MANUAL_AGED: Emission(60, "gauge: every poller run, zero included"),
    M.CERT_EXPIRING: Emission(3600, "one expiring certificate, counted by every hourly keys run"),
    M.CERT_REFRESH_FAILED: Emission(
        3600, "one merchant whose download fails, counted by every hourly keys run"
    ),
    M.RECON_BLOCKED: Emission(PER_OCCURRENCE, "one blocked run"),
    M.RECON_PARSE_FAILED: Emission(PER_OCCURRENCE, "one unreadable bill"),
    M.RECON_DOWNLOAD_FAILED: Emission(PER_OCCURRENCE, "one failed download"),
    M.RECON_DIFF_OPENED: Emission(PER_OCCURRENCE, "one new difference"),
    M.RECON_RECOVER_FAILED: Emission(PER_OCCURRENCE, "one payment not recovered"),
    M.RECON_FAILED: Emission(PER_OCCURRENCE, "one recon invocation that raised"),
    M.REPORT_FORGED: Emission(PER_OCCURRENCE, "one report naming another tenant's money"),
    M.NOTIFY_FAILED: Emission(PER_OCCURRENCE, "one notify request that raised"),
    M.API_FAILED: Emission(PER_OCCURRENCE, "one /orders or /refunds request that raised"),
    M.API_FORBIDDEN: Emission(
        PER_OCCURRENCE, "one signed request for a merchant its caller is not registered with"
    ),
    M.REFUND_REPORT_MANUAL: Emission(PER_OCCURRENCE, "one refund report parked for a person"),
    M.NOTIFY_NO_TRANSACTION_ID: Emission(PER_OCCURRENCE, "one paid notification without a transaction id"),
    M.MERCHANT_NOT_READY: Emission(
        PER_OCCURRENCE, "one merchant turning not ready (counted on the transition)"
    ),
    # heartbeat: ticks 02:30-08:30 UTC hourly, so the longest normal gap is 08:30 -> 02:30 (18 h)
    M.RECON_RUN_COMPLETED: Emission(18 * 3600, "every finished recon tick (02:30-08:30 UTC)"),
    # a gauge of seconds: a stalled money path reports >= 180 from its third minute on (service/heartbeat.py)
    M.HEARTBEAT_AGE: Emission(60, "gauge: every heartbeat run, the seconds since the last booked beat", 180),
    M.HEARTBEAT_ECHO_AGE: Emission(
        60, "gauge: every heartbeat run, the seconds an echo has been waited for", 180
    ),
    M.CONSOLE_ACTION_REFUSED: Emission(PER_OCCURRENCE, "one refused console POST"),
    M.RECON_NO_BILL_SOURCE: Emission(PER_OCCURRENCE, "one run of a merchant without a bill download"),
    M.RECON_MERCHANTS_BLOCKED: Emission(3600, "gauge: every hourly recon tick, zero included"),
    M.RECON_FUND_FLOW_LATE: Emission(PER_OCCURRENCE, "one fund-flow run past its due day"),
    M.REFUND_POLL_FAILED: Emission(PER_OCCURRENCE, "one refund poll that raised"),
    M.REFUND_NO_CHANNEL: Emission(PER_OCCURRENCE, "one poll of a refund whose merchant has no credentials"),
    M.WEBHOOK_GAVE_UP: Emission(PER_OCCURRENCE, "one delivery failed past its retry window"),
    M.WEBHOOK_HELD: Emission(PER_OCCURRENCE, "one event held for a paused endpoint"),
    M.WEBHOOK_FAILED: Emission(PER_OCCURRENCE, "one delivery attempt that raised"),
    M.EVENT_GENERATION_FAILED: Emission(PER_OCCURRENCE, "one change whose event could not be built"),
    M.ALERT_FAILED: Emission(PER_OCCURRENCE, "one chat card not delivered after its retries"),
    M.AUDIT_MISMATCH: Emission(PER_OCCURRENCE, "one merchant-day that does not verify against its seal"),
}


_listed: frozenset[str] = frozenset()


def configure_merchants(merchants: list[str] | tuple[str, ...] | None = None) -> frozenset[str]:
    """Set the merchant allow-list (default: TALLY_METRIC_MERCHANTS, read at import); at most
    MAX_LISTED_MERCHANTS ids are kept, the rest counted as OTHER. Returns the list in force."""
    global _listed
    ids = [m.strip() for m in (metric_merchants() if merchants is None else merchants) if m and m.strip()]
    if len(ids) > MAX_LISTED_MERCHANTS:
        logger.warning(
            "metric merchant allow-list too long: the rest count as 'other'",
            extra={"listed": len(ids), "kept": MAX_LISTED_MERCHANTS},
        )
    _listed = frozenset(ids[:MAX_LISTED_MERCHANTS])
    return _listed


class _ChannelVocabulary:
    """The `channel` dimension's words, given by channels/registry.py when it is imported (`use_channels`): the
    logger and the metrics know no channel, the registry tells them."""

    of: Callable[[str | None], str | None] = staticmethod(lambda spelling: None)
    words: Callable[[], tuple[str, ...]] = staticmethod(tuple)


def use_channels(of: Callable[[str | None], str | None], words: Callable[[], tuple[str, ...]]) -> None:
    """The registry's `metric_of` (any spelling of a channel → its metric word) and `metric_values`."""
    _ChannelVocabulary.of = staticmethod(of)  # type: ignore[assignment]
    _ChannelVocabulary.words = staticmethod(words)  # type: ignore[assignment]


def channel_words() -> tuple[str, ...]:
    """The `channel` dimension's values (plus OTHER for anything else)."""
    return _ChannelVocabulary.words()


def channel_value(channel: str | None) -> str:
    """The `channel` dimension: one of channel_words(), anything else OTHER."""
    return _ChannelVocabulary.of(channel) or OTHER


def merchant_value(merchant: str | None) -> str:
    """The `merchant` dimension: an allow-listed merchant id, anything else OTHER."""
    return merchant if merchant in _listed else OTHER


# Counts of this invocation, summed by (name, channel, merchant) and handed to Powertools once, when
# `@metrics.log_metrics` (or `metrics.flush_metrics()`) flushes: Powertools' add_metric costs ~35 µs a call
# (validation and a debug f-string of the whole metric), a dict addition under a lock well under 1 µs. A name
# counted n times carries one value, the sum (a gauge: the larger reading).
_pending: dict[tuple[str, str | None, str | None], float] = {}
_pending_lock = threading.Lock()
GAUGES = frozenset(
    {M.PENDING_STALE, M.MANUAL_AGED, M.HEARTBEAT_AGE, M.HEARTBEAT_ECHO_AGE}
)  # readings, not counts (alarms: Maximum)


def count(name: str, value: int = 1, *, channel: str | None = None, merchant: str | None = None) -> None:
    """Count `name` under service=tally. With `channel` (and `merchant`) the same count also lands in the
    per-channel (and per-merchant) series; the merchant series exist only while an allow-list is set."""
    if channel is None and merchant is None:
        key: tuple[str, str | None, str | None] = (name, None, None)
    else:
        key = (
            name,
            channel_value(channel),
            merchant_value(merchant) if _listed and merchant is not None else None,
        )
    with _pending_lock:  # the poller counts from several threads (service/poll.py): no count may be lost
        if name in GAUGES:  # a gauge's alarm reads Maximum: two readings in one invocation keep the larger
            _pending[key] = max(_pending.get(key, value), value)
        else:
            _pending[key] = _pending.get(key, 0) + value


def _drain() -> None:
    """Hand the summed counts to Powertools (in first-counted order), once per flush."""
    with _pending_lock:
        pending = list(_pending.items())
        _pending.clear()
    for (name, channel, merchant), value in pending:
        if channel is None:
            _provider.add_metric(name=name, unit=MetricUnit.Count, value=value)
        else:
            _provider.add_cell_metric(name, value, channel, merchant)


configure_merchants()
