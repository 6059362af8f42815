"""The channel's settlement lag by default, as the service asks the registry for it (R45)."""

from __future__ import annotations

from tally.channels import registry
from tally.domain.fundflow import SettlementLag


def lag_for(channel: str) -> SettlementLag:
    terms = registry.fund_flow_terms(channel)
    assert terms is not None, f"{channel} has no fund flow"
    return terms.lag
