"""The environment, read in one place (nothing else in the product reads os.environ)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


class Settings(NamedTuple):
    """Immutable, read by attribute. A NamedTuple, not a frozen dataclass: the dataclass decorator compiles an
    __init__, __repr__, __eq__, __hash__ and __setattr__ for these 40 fields at every cold start (~3 ms of the
    notify function's, docs/cost.md); a NamedTuple builds one small __new__."""

    notify_raw_table: str
    notify_event_table: str
    orders_table: str
    transitions_table: str
    ledger_table: str
    refund_tasks_table: str
    merchants_table: str
    apply_queue_url: str
    merchant_secret_prefix: str
    refunds_table: str
    refund_raw_table: str
    event_bus_name: str = "default"
    event_archive_arn: str = ""  # the bus's archive (stack output EventArchiveArn): `tally events replay`
    outbox_dlq_url: str = ""  # parked stream batches and republish requests (functions/outboxparked)
    timestamp_window_s: int = 300
    order_not_found_max_attempts: int = 4
    http_timeout_s: float = 3.0
    refund_task_policy: str = "manual"  # auto | manual: how refund tasks from ILLEGAL payments are worked
    refund_expiry_s: int = 7 * 86400  # a refund without outcome after this goes to a person
    # reconciliation (docs/recon.md)
    bills_bucket: str = ""
    recon_runs_table: str = ""
    recon_diff_table: str = ""
    recon_min_ratio: float = 0.10
    recon_min_previous_rows: int = 10
    recon_partition_bytes: int = 64 << 20  # a bill this big is matched partition by partition (docs/recon.md)
    recon_map_bytes: int = 1 << 30  # … and this big on the Distributed Map, when the state machine is set
    recon_split_bytes: int = 64 << 20  # a bill on disk this big is parsed in pieces, one process a core
    recon_workers: int = 0  # processes for those pieces; 0: one per CPU this function may run on
    recon_state_machine_arn: str = ""
    # AWS clients (bootstrap.aws_config): botocore's defaults are 60 s connect + 60 s read, far past a channel's
    # 5 s. Worst case of one call: max_attempts x (connect + read) plus standard-mode backoff (< 1 s first).
    aws_connect_timeout_s: float = 1.0
    aws_read_timeout_s: float = 5.0
    aws_max_attempts: int = 3
    # the synthetic heartbeat (service/heartbeat.py): the public API's base URL and the synthetic merchant
    heartbeat_api_url: str = ""
    heartbeat_mchid: str = "0000000000"
    # the notify paths the heartbeat proves with a channel's security echo, "route/merchant id" (the merchant's
    # credentials ask the channel to call that path back: docs/channels.md); () = none
    heartbeat_echo: tuple[str, ...] = ()
    # the operations console (docs/console.md)
    console_user_pool_id: str = ""
    console_client_id: str = ""
    # the poller at volume (docs/pull.md): channel calls per merchant and second, and orders polled at once
    poll_merchant_qps: int = 10
    poll_concurrency: int = 8
    # incidents and chat cards (docs/alerts.md)
    alerts_table: str = ""
    console_url: str = ""  # the console's base URL, for the link on a card
    incident_escalate_per_h: int = 100
    incident_quiet_s: int = 3600
    alert_hour_cap: int = 20
    console_operator_mfa: bool = False  # operators must sign in with TOTP (docs/alerts.md "Hardening")
    console_language: str = "zh-CN"  # the deployment's default page language (template.yaml ConsoleLanguage)
    # the decision journal and its seals (docs/audit.md)
    journal_table: str = ""
    audit_bucket: str = ""
    audit_key_id: str = ""
    audit_retention_days: int = 2557  # 7 years

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Each field from its variable in ENVIRONMENT, parsed; a variable not set leaves the field's default
        above, and a field without one (REQUIRED) must be set."""
        env = os.environ if env is None else env
        missing = [ENVIRONMENT[field][0] for field in REQUIRED if ENVIRONMENT[field][0] not in env]
        if missing:
            raise RuntimeError(f"missing environment variable {missing[0]!r}: see docs/contracts.md")
        values = {field: parse(env[name]) for field, (name, parse) in ENVIRONMENT.items() if name in env}
        return cls(**values)


def _secret_prefix(prefix: str) -> str:
    """The stack's own Secrets Manager prefix (`tally/{stack}/merchants/`, template.yaml, the stack output
    MerchantSecretPrefix). Required, no default: a shared default is how one stack overwrote another's keys."""
    if not prefix.endswith("/") or prefix.count("/") < 3:
        raise RuntimeError(
            f"MERCHANT_SECRET_PREFIX {prefix!r} is not tally/<stack>/merchants/: see docs/deploy.md"
        )
    return prefix


def _comma_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


# field -> (environment variable, parser): the one place each variable is named; its default is the field's
# above (template.yaml sets them for AWS, `tally env-vars` for sam local: tests/integration/test_aws_wiring.py)
ENVIRONMENT: dict[str, tuple[str, Callable[[str], Any]]] = {
    "notify_raw_table": ("NOTIFY_RAW_TABLE", str),
    "notify_event_table": ("NOTIFY_EVENT_TABLE", str),
    "orders_table": ("ORDERS_TABLE", str),
    "transitions_table": ("TRANSITIONS_TABLE", str),
    "ledger_table": ("LEDGER_TABLE", str),
    "refund_tasks_table": ("REFUND_TASKS_TABLE", str),
    "merchants_table": ("MERCHANTS_TABLE", str),
    "apply_queue_url": ("APPLY_QUEUE_URL", str),
    "merchant_secret_prefix": ("MERCHANT_SECRET_PREFIX", _secret_prefix),
    "refunds_table": ("REFUNDS_TABLE", str),
    "refund_raw_table": ("REFUND_RAW_TABLE", str),
    "event_bus_name": ("EVENT_BUS_NAME", str),
    "event_archive_arn": ("EVENT_ARCHIVE_ARN", str),
    "outbox_dlq_url": ("OUTBOX_DLQ_URL", str),
    "timestamp_window_s": ("TALLY_TIMESTAMP_WINDOW_S", int),
    "order_not_found_max_attempts": ("TALLY_ORDER_NOT_FOUND_MAX_ATTEMPTS", int),
    "http_timeout_s": ("TALLY_HTTP_TIMEOUT_S", float),
    "refund_task_policy": ("REFUND_TASK_POLICY", str),
    "refund_expiry_s": ("TALLY_REFUND_EXPIRY_S", int),
    "bills_bucket": ("BILLS_BUCKET", str),
    "recon_runs_table": ("RECON_RUNS_TABLE", str),
    "recon_diff_table": ("RECON_DIFF_TABLE", str),
    "recon_min_ratio": ("RECON_MIN_RATIO", float),
    "recon_min_previous_rows": ("RECON_MIN_PREVIOUS_ROWS", int),
    "recon_partition_bytes": ("RECON_PARTITION_BYTES", int),
    "recon_map_bytes": ("RECON_MAP_BYTES", int),
    "recon_split_bytes": ("RECON_SPLIT_BYTES", int),
    "recon_workers": ("RECON_WORKERS", int),
    "recon_state_machine_arn": ("RECON_STATE_MACHINE_ARN", str),
    "aws_connect_timeout_s": ("TALLY_AWS_CONNECT_TIMEOUT_S", float),
    "aws_read_timeout_s": ("TALLY_AWS_READ_TIMEOUT_S", float),
    "aws_max_attempts": ("TALLY_AWS_MAX_ATTEMPTS", int),
    "heartbeat_api_url": ("HEARTBEAT_API_URL", str),
    "heartbeat_mchid": ("TALLY_HEARTBEAT_MCHID", str),
    "heartbeat_echo": ("TALLY_HEARTBEAT_ECHO", _comma_list),
    "console_user_pool_id": ("CONSOLE_USER_POOL_ID", str),
    "console_client_id": ("CONSOLE_CLIENT_ID", str),
    "poll_merchant_qps": ("TALLY_POLL_MERCHANT_QPS", int),
    "poll_concurrency": ("TALLY_POLL_CONCURRENCY", int),
    "alerts_table": ("ALERTS_TABLE", str),
    "console_url": ("CONSOLE_URL", str),
    "incident_escalate_per_h": ("TALLY_INCIDENT_ESCALATE_PER_H", int),
    "incident_quiet_s": ("TALLY_INCIDENT_QUIET_S", int),
    "alert_hour_cap": ("TALLY_ALERT_HOUR_CAP", int),
    "console_operator_mfa": ("CONSOLE_OPERATOR_MFA", lambda value: value == "required"),
    "console_language": ("CONSOLE_LANGUAGE", str),
    "journal_table": ("JOURNAL_TABLE", str),
    "audit_bucket": ("AUDIT_BUCKET", str),
    "audit_key_id": ("AUDIT_KEY_ID", str),
    "audit_retention_days": ("AUDIT_RETENTION_DAYS", int),
}
REQUIRED = tuple(field for field in Settings._fields if field not in Settings._field_defaults)


def channel_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The channels' own variables (each channel package names its gateway's URL and the like: `environment` in
    channels/<name>/channel.py), parsed, a default where unset: {variable name: value}."""
    from tally.channels import registry

    source = os.environ if env is None else env
    return {v.name: v.parse(source.get(v.name, v.default)) for v in registry.environment()}


def metric_merchants(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """TALLY_METRIC_MERCHANTS: comma-separated merchant ids (mchid / app_id) with their own metric dimension."""
    raw = (os.environ if env is None else env).get("TALLY_METRIC_MERCHANTS", "")
    return tuple(m.strip() for m in raw.split(",") if m.strip())


class WebhookSettings(NamedTuple):
    """The webhooks' environment (docs/webhooks.md); empty names: the stack has no webhooks."""

    table: str = ""
    queue_url: str = ""
    api_url: str = ""  # the public API, for the link in each event (the full object one signed GET away)
    timeout_s: float = 10.0
    retry_s: tuple[int, ...] = ()  # empty: domain/webhooks.RETRY_SCHEDULE_S
    window_s: int = 0  # 0: domain/webhooks.RETRY_WINDOW_S (3 days)
    settle_s: float = 5.0  # GET /events leaves out events younger than this
    concurrency: int = 8  # message groups (orders) of one batch delivered at once
    private_addresses: bool = (
        False  # True: endpoints may resolve to private addresses (the embedded stack only)
    )


def webhook_settings(env: dict[str, str] | None = None) -> WebhookSettings:
    source = os.environ if env is None else env
    retry = source.get("TALLY_WEBHOOK_RETRY_S", "")
    return WebhookSettings(
        table=source.get("WEBHOOKS_TABLE", ""),
        queue_url=source.get("WEBHOOK_QUEUE_URL", ""),
        api_url=source.get("TALLY_API_URL", ""),
        timeout_s=float(source.get("TALLY_WEBHOOK_TIMEOUT_S", "10")),
        retry_s=tuple(int(x) for x in retry.split(",") if x.strip()),
        window_s=int(source.get("TALLY_WEBHOOK_WINDOW_S", "0")),
        settle_s=float(source.get("TALLY_EVENTS_SETTLE_S", "5")),
        concurrency=int(source.get("TALLY_WEBHOOK_CONCURRENCY", "8")),
        private_addresses=source.get("TALLY_WEBHOOK_PRIVATE", "refuse") == "allow",
    )
