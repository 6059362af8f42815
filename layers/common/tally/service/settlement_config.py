"""A merchant's fund-flow configuration (R45, docs/settlement.md §6.4): `settlement_lag` (e.g.
{"settlement_days": 1}) and `fund_accounts` (["BASIC"], ["BASIC", "FEES"]) on its merchants-table record,
validated before they are stored (domain/fundflow.lag_of / accounts_of: a clear error for bad input), read by
`ReconService.fund_flow` for each run.

Which record: the one `tally merchant add CHANNEL …` wrote (`wechatpay`, `wechatpay_v2`, `alipay`). A WeChat merchant
with a v3 and a v2 record is one stored channel ("wechatpay"): the v3 record's figures win, then the v2 record's."""

from __future__ import annotations

from typing import Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.domain.fundflow import ConfigError, FundFlowTerms, accounts_of, lag_of

FIELDS = ("settlement_lag", "fund_accounts")


def _terms(channel: channel_registry.Channel) -> FundFlowTerms:
    terms = channel.fund_flow_terms()
    if terms is None:
        raise errors.InvalidRequest(f"{channel.route} has no fund flow to configure")
    return terms


class MerchantSettlement:
    def __init__(self, store: Any, clock: Any = None):
        self.store = store  # store.tables.MerchantStore
        self.clock = clock

    def update(
        self,
        kind: str,
        merchant_id: str,
        *,
        settlement_lag: dict[str, Any] | None = None,
        fund_accounts: list[str] | None = None,
        clear: bool = False,
    ) -> dict[str, Any]:
        """Set (or with `clear`, remove) the merchant record's figures; ValueError-derived InvalidRequest for
        input the fund-flow check could not use, NotFound when the record does not exist."""
        channel = channel_registry.by_merchant_kind(kind)
        if channel is None:
            raise errors.InvalidRequest(f"unknown merchant kind {kind!r}")
        row = self.store.get(kind, merchant_id)
        if row is None:
            raise errors.NotFound(
                f"no {channel.route} merchant {merchant_id}: tally merchant add {channel.route} … first"
            )
        terms = _terms(channel)
        try:
            if settlement_lag is not None:
                lag_of(terms.lag, settlement_lag)
                row["settlement_lag"] = dict(settlement_lag)
            if fund_accounts is not None:
                row["fund_accounts"] = list(accounts_of(terms, fund_accounts))
        except ConfigError as exc:
            raise errors.InvalidRequest(str(exc)) from None
        if clear:
            for name in FIELDS:
                row.pop(name, None)
        self.store.put(row)
        return self.show(kind, merchant_id)

    def show(self, kind: str, merchant_id: str) -> dict[str, Any]:
        """What the fund-flow check will use for this merchant: the record's figures and the lag they make."""
        channel = channel_registry.by_merchant_kind(kind)
        if channel is None:
            raise errors.InvalidRequest(f"unknown merchant kind {kind!r}")
        row = self.store.get(kind, merchant_id)
        if row is None:
            raise errors.NotFound(f"no {channel.route} merchant {merchant_id}")
        config = self.config(channel.stored, merchant_id)
        out: dict[str, Any] = {
            "channel": channel.route,
            "id": merchant_id,
            "mode": row.get("mode", "direct"),
            "appid": row.get("appid") or None,
            "notify_url": row.get("notify_url"),
            "bill_source": row.get("bill_source"),
            "ready": row.get("ready"),
            "ready_reason": row.get("ready_reason"),
            "settlement_lag": row.get("settlement_lag"),
            "fund_accounts": row.get("fund_accounts"),
        }
        terms = _terms(channel)
        try:
            lag = lag_of(terms.lag, config.get("settlement_lag"))
            out["fund_flow"] = {
                "accounts": list(accounts_of(terms, config.get("fund_accounts"))),
                "settlement_days": lag.settlement_days,
                "refund_days": lag.refund_days,
                "fee_days": lag.fee_days,
                "fee_return_days": lag.fee_return_days,
                "lag_source": lag.source,
            }
        except ConfigError as exc:
            out["fund_flow"] = {"error": str(exc)}
        return out

    def config(self, stored: str, merchant_id: str) -> dict[str, Any]:
        """(stored channel, merchant) -> the figures its records carry (ReconService.fund_config)."""
        out: dict[str, Any] = {}
        for channel in reversed([c for c in channel_registry.all_channels() if c.stored == stored]):
            row = self.store.get(channel.merchant_kind, merchant_id) or {}
            for name in FIELDS:  # the first registered (v3) wins over v2 for a shared stored channel
                if row.get(name) is not None:
                    out[name] = row[name]
        return out
