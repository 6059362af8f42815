"""Build clients, repositories and services once per container (cold start pays it once)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from typing import Any

from tally.settings import Settings

_clock: Callable[[], float] = time.time


def set_clock(clock: Callable[[], float]) -> None:
    """Inject a clock (tests replaying a recorded event); rebuilds the services."""
    global _clock
    _clock = clock
    reset()


def reset() -> None:
    for built in (settings, tables, merchants, ingest_service, apply_service, order_service, _client):
        built.cache_clear()


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def _client(service: str) -> Any:
    import boto3

    return boto3.client(service)  # AWS_ENDPOINT_URL (boto3's own variable) points it at moto locally


@cache
def tables() -> Any:
    from tally.store.tables import Tables

    s = settings()
    return Tables(_client("dynamodb"), s.notify_raw_table, s.notify_event_table, s.orders_table,
                  s.transitions_table, s.ledger_table, s.refund_tasks_table, s.merchants_table)


@cache
def merchants() -> Any:
    from tally.service.merchants import MerchantDirectory
    from tally.store.tables import MerchantStore

    s = settings()
    return MerchantDirectory(MerchantStore(tables()), _client("secretsmanager"), s.merchant_secret_prefix,
                             s.wechatpay_api_base, clock=_clock, http_timeout_s=s.http_timeout_s,
                             alipay_gateway=s.alipay_gateway)


@cache
def ingest_service() -> Any:
    from tally.service.ingest import IngestService
    from tally.store.tables import ApplyQueue, EventStore, RawStore

    s = settings()
    return IngestService(merchants(), RawStore(tables()), EventStore(tables()),
                         ApplyQueue(_client("sqs"), s.apply_queue_url), clock=_clock, window_s=s.timestamp_window_s)


@cache
def apply_service() -> Any:
    from tally.service.apply import ApplyService
    from tally.store.tables import OrderStore, RawStore

    return ApplyService(tables(), RawStore(tables()), OrderStore(tables()), clock=_clock,
                        max_not_found_attempts=settings().order_not_found_max_attempts)


@cache
def order_service() -> Any:
    from tally.service.orders import OrderService
    from tally.store.tables import OrderStore, RawStore

    return OrderService(OrderStore(tables()), RawStore(tables()), merchants(), clock=_clock)
