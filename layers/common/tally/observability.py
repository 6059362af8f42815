"""Logger and metrics singletons, and every metric name the product emits (one place).

Alarms in template.yaml may only watch names listed here; a test checks both directions.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="tally")
metrics = Metrics(namespace="Tally", service="tally")


class M:
    # ingest
    NOTIFY_ACCEPTED = "NotifyAccepted"
    NOTIFY_DUPLICATE = "NotifyDuplicate"
    NOTIFY_REJECTED = "NotifyRejected"  # signature / timestamp / unknown merchant / bad request (R4)
    NOTIFY_PROBE = "NotifyProbeRejected"  # WECHATPAY/SIGNTEST/ probes: expected, not alarmed
    NOTIFY_QUARANTINED = "NotifyQuarantined"  # valid signature, undecryptable or unparseable (R5)
    NOTIFY_IN_BETWEEN = "NotifyInBetween"  # NOTPAY / USERPAYING kept as events (R8)
    ENQUEUE_FAILED = "EnqueueFailed"
    CERT_REFRESHED = "PlatformCertRefreshed"
    # apply
    APPLY_BOOKED = "ApplyBooked"
    APPLY_DUPLICATE = "ApplyDuplicate"
    APPLY_MANUAL = "ApplyManual"  # every row sent to handled=2: the manual queue (R12, R15, R16, R17)
    APPLY_MISMATCH = "ApplyMismatch"
    APPLY_UNKNOWN_STATE = "ApplyUnknownState"
    APPLY_ORDER_NOT_FOUND = "ApplyOrderNotFound"
    APPLY_ILLEGAL = "ApplyIllegal"
    APPLY_RETRY = "ApplyRetry"
    APPLY_FAILED = "ApplyFailed"  # unexpected exception in the worker: the message is retried
    REFUND_TASK_CREATED = "RefundTaskCreated"
    # orders
    PREPAY_FAILED = "PrepayFailed"
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


# Metrics an alarm must watch: a failure nobody watches is a silent path.
ALARMED = frozenset(
    {M.NOTIFY_REJECTED, M.NOTIFY_QUARANTINED, M.ENQUEUE_FAILED, M.APPLY_MANUAL, M.APPLY_FAILED}
) | frozenset(  # reconciliation
    {M.RECON_BLOCKED, M.RECON_PARSE_FAILED, M.RECON_DOWNLOAD_FAILED, M.RECON_DIFF_OPENED, M.RECON_RECOVER_FAILED,
     M.RECON_FAILED}
)


def count(name: str, value: int = 1) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
