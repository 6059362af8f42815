"""The environment, read in one place (nothing else in the product reads os.environ)."""

from __future__ import annotations

import os
from typing import NamedTuple


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
    wechatpay_api_base: str
    merchant_secret_prefix: str
    event_bus_name: str = "default"
    event_archive_arn: str = ""  # the bus's archive (stack output EventArchiveArn): `tally events replay`
    outbox_dlq_url: str = ""  # parked stream batches and republish requests (functions/outboxparked)
    alipay_gateway: str = "https://openapi.alipay.com/gateway.do"
    timestamp_window_s: int = 300
    order_not_found_max_attempts: int = 4
    http_timeout_s: float = 3.0
    refunds_table: str = ""
    refund_raw_table: str = ""
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
    # AWS clients (bootstrap.aws_config): botocore's defaults are 60 s connect + 60 s read, far past WeChat's
    # 5 s. Worst case of one call: max_attempts x (connect + read) plus standard-mode backoff (< 1 s first).
    aws_connect_timeout_s: float = 1.0
    aws_read_timeout_s: float = 5.0
    aws_max_attempts: int = 3
    # the synthetic heartbeat (service/heartbeat.py): the public API's base URL and the synthetic merchant
    heartbeat_api_url: str = ""
    heartbeat_mchid: str = "0000000000"
    # the notify paths the heartbeat proves with the channel's security echo, "route/merchant id" (WeChat Pay v3:
    # "wechatpay/1900000109", a service provider's or platform merchant's credentials); () = none
    heartbeat_echo: tuple[str, ...] = ()
    wechatpay_ca_file: str = (
        ""  # trust these CAs for WeChat's TLS instead of the system's (tests: the simulator)
    )
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
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        try:
            return cls(
                notify_raw_table=env["NOTIFY_RAW_TABLE"],
                notify_event_table=env["NOTIFY_EVENT_TABLE"],
                orders_table=env["ORDERS_TABLE"],
                transitions_table=env["TRANSITIONS_TABLE"],
                ledger_table=env["LEDGER_TABLE"],
                refund_tasks_table=env["REFUND_TASKS_TABLE"],
                merchants_table=env["MERCHANTS_TABLE"],
                apply_queue_url=env["APPLY_QUEUE_URL"],
                wechatpay_api_base=env.get("WECHATPAY_API_BASE", "https://api.mch.weixin.qq.com").rstrip("/"),
                merchant_secret_prefix=_secret_prefix(env["MERCHANT_SECRET_PREFIX"]),
                event_bus_name=env.get("EVENT_BUS_NAME", "default"),
                event_archive_arn=env.get("EVENT_ARCHIVE_ARN", ""),
                outbox_dlq_url=env.get("OUTBOX_DLQ_URL", ""),
                alipay_gateway=env.get("ALIPAY_GATEWAY", "https://openapi.alipay.com/gateway.do"),
                timestamp_window_s=int(env.get("TALLY_TIMESTAMP_WINDOW_S", "300")),
                order_not_found_max_attempts=int(env.get("TALLY_ORDER_NOT_FOUND_MAX_ATTEMPTS", "4")),
                http_timeout_s=float(env.get("TALLY_HTTP_TIMEOUT_S", "3")),
                refunds_table=env["REFUNDS_TABLE"],
                refund_raw_table=env["REFUND_RAW_TABLE"],
                refund_task_policy=env.get("REFUND_TASK_POLICY", "manual"),
                refund_expiry_s=int(env.get("TALLY_REFUND_EXPIRY_S", str(7 * 86400))),
                bills_bucket=env.get("BILLS_BUCKET", ""),
                recon_runs_table=env.get("RECON_RUNS_TABLE", ""),
                recon_diff_table=env.get("RECON_DIFF_TABLE", ""),
                recon_min_ratio=float(env.get("RECON_MIN_RATIO", "0.10")),
                recon_min_previous_rows=int(env.get("RECON_MIN_PREVIOUS_ROWS", "10")),
                recon_partition_bytes=int(env.get("RECON_PARTITION_BYTES", str(64 << 20))),
                recon_map_bytes=int(env.get("RECON_MAP_BYTES", str(1 << 30))),
                recon_split_bytes=int(env.get("RECON_SPLIT_BYTES", str(64 << 20))),
                recon_workers=int(env.get("RECON_WORKERS", "0")),
                recon_state_machine_arn=env.get("RECON_STATE_MACHINE_ARN", ""),
                aws_connect_timeout_s=float(env.get("TALLY_AWS_CONNECT_TIMEOUT_S", "1")),
                aws_read_timeout_s=float(env.get("TALLY_AWS_READ_TIMEOUT_S", "5")),
                aws_max_attempts=int(env.get("TALLY_AWS_MAX_ATTEMPTS", "3")),
                heartbeat_api_url=env.get("HEARTBEAT_API_URL", ""),
                heartbeat_mchid=env.get("TALLY_HEARTBEAT_MCHID", "0000000000"),
                heartbeat_echo=tuple(
                    p.strip() for p in env.get("TALLY_HEARTBEAT_ECHO", "").split(",") if p.strip()
                ),
                wechatpay_ca_file=env.get("TALLY_WECHATPAY_CA_FILE", ""),
                console_user_pool_id=env.get("CONSOLE_USER_POOL_ID", ""),
                console_client_id=env.get("CONSOLE_CLIENT_ID", ""),
                poll_merchant_qps=int(env.get("TALLY_POLL_MERCHANT_QPS", "10")),
                poll_concurrency=int(env.get("TALLY_POLL_CONCURRENCY", "8")),
                alerts_table=env.get("ALERTS_TABLE", ""),
                console_url=env.get("CONSOLE_URL", ""),
                incident_escalate_per_h=int(env.get("TALLY_INCIDENT_ESCALATE_PER_H", "100")),
                incident_quiet_s=int(env.get("TALLY_INCIDENT_QUIET_S", "3600")),
                alert_hour_cap=int(env.get("TALLY_ALERT_HOUR_CAP", "20")),
                console_operator_mfa=env.get("CONSOLE_OPERATOR_MFA", "") == "required",
                console_language=env.get("CONSOLE_LANGUAGE", "zh-CN"),
                journal_table=env.get("JOURNAL_TABLE", ""),
                audit_bucket=env.get("AUDIT_BUCKET", ""),
                audit_key_id=env.get("AUDIT_KEY_ID", ""),
                audit_retention_days=int(env.get("AUDIT_RETENTION_DAYS", "2557")),
            )
        except KeyError as missing:
            raise RuntimeError(f"missing environment variable {missing}: see docs/contracts.md") from None


def _secret_prefix(prefix: str) -> str:
    """The stack's own Secrets Manager prefix (`tally/{stack}/merchants/`, template.yaml, the stack output
    MerchantSecretPrefix). Required, no default: a shared default is how one stack overwrote another's keys."""
    if not prefix.endswith("/") or prefix.count("/") < 3:
        raise RuntimeError(
            f"MERCHANT_SECRET_PREFIX {prefix!r} is not tally/<stack>/merchants/: see docs/deploy.md"
        )
    return prefix


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
