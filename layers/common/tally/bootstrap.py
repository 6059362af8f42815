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
    for built in (settings, tables, merchants, ingest_service, apply_service, order_service, _client,
                  recon_service):
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
                             s.wechatpay_api_base, clock=_clock, http_timeout_s=s.http_timeout_s)


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


@cache
def recon_service() -> Any:
    from tally.service.recon import ReconService
    from tally.service.recon_pull import QueryAndApply
    from tally.service.recon_sources import AlipayBillSource, WeChatBillSource
    from tally.store.recon import BillArchive, LedgerView, ReconStore
    from tally.store.tables import ApplyQueue, RawStore

    s = settings()
    ddb = _client("dynamodb")
    sources = {"wechatpay": WeChatBillSource(merchants()),
               "alipay": AlipayBillSource(_client("secretsmanager"), s.merchant_secret_prefix, s.alipay_gateway)}
    recover = QueryAndApply(merchants(), RawStore(tables()), ApplyQueue(_client("sqs"), s.apply_queue_url),
                            clock=_clock).recover

    def configured() -> list[tuple[str, str]]:  # the merchants table is small configuration: one paged scan
        from tally.store.codec import from_item

        found, kwargs = [], {"TableName": s.merchants_table, "ProjectionExpression": "channel, mchid"}
        while True:
            answer = ddb.scan(**kwargs)
            found += [(r["channel"], r["mchid"]) for r in map(from_item, answer.get("Items", []))
                      if r.get("channel") and r.get("mchid")]
            if "LastEvaluatedKey" not in answer:
                return sorted(found)
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    return ReconService(ReconStore(ddb, s.recon_runs_table, s.recon_diff_table), LedgerView(ddb, s.ledger_table),
                        BillArchive(_client("s3"), s.bills_bucket), sources, recover, configured, clock=_clock,
                        min_ratio=s.recon_min_ratio, min_previous_rows=s.recon_min_previous_rows)
