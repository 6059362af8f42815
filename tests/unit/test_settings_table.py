"""The environment is read from one table (tally/settings.py ENVIRONMENT): each field named once with its
variable and parser, its default written once (on the Settings field), a variable not set leaving that default
and a required one refused by name."""

from __future__ import annotations

import pytest
from tally.channels import registry
from tally.settings import ENVIRONMENT, REQUIRED, Settings, channel_values

MINIMAL = {
    "NOTIFY_RAW_TABLE": "raw",
    "NOTIFY_EVENT_TABLE": "events",
    "ORDERS_TABLE": "orders",
    "TRANSITIONS_TABLE": "transitions",
    "LEDGER_TABLE": "ledger",
    "REFUND_TASKS_TABLE": "tasks",
    "MERCHANTS_TABLE": "merchants",
    "APPLY_QUEUE_URL": "https://sqs.example/q",
    "MERCHANT_SECRET_PREFIX": "tally/prod/merchants/",
    "REFUNDS_TABLE": "refunds",
    "REFUND_RAW_TABLE": "refund-raw",
}


def test_every_field_has_exactly_one_variable():
    assert list(ENVIRONMENT) == list(Settings._fields)
    names = [name for name, _parse in ENVIRONMENT.values()]
    assert len(names) == len(set(names))
    assert {ENVIRONMENT[field][0] for field in REQUIRED} == set(MINIMAL)


def test_unset_variables_leave_the_defaults_and_set_ones_are_parsed():
    minimal = Settings.from_env(MINIMAL)
    assert minimal._asdict() == {**Settings._field_defaults, **minimal._asdict()}
    assert minimal.timestamp_window_s == 300
    assert minimal.heartbeat_echo == () and minimal.console_operator_mfa is False
    tuned = Settings.from_env(
        {
            **MINIMAL,
            "TALLY_TIMESTAMP_WINDOW_S": "60",
            "RECON_MIN_RATIO": "0.25",
            "TALLY_HEARTBEAT_ECHO": " wechatpay/1900000109, ,wechatpay/1900000110",
            "CONSOLE_OPERATOR_MFA": "required",
        }
    )
    assert (tuned.timestamp_window_s, tuned.recon_min_ratio) == (60, 0.25)
    assert tuned.heartbeat_echo == ("wechatpay/1900000109", "wechatpay/1900000110")
    assert tuned.console_operator_mfa is True


@pytest.mark.parametrize("variable", sorted(MINIMAL))
def test_a_required_variable_missing_is_named(variable):
    env = {k: v for k, v in MINIMAL.items() if k != variable}
    with pytest.raises(RuntimeError, match=variable):
        Settings.from_env(env)


def test_a_shared_secret_prefix_is_refused():
    with pytest.raises(RuntimeError, match="MERCHANT_SECRET_PREFIX"):
        Settings.from_env({**MINIMAL, "MERCHANT_SECRET_PREFIX": "merchants"})


def test_the_channels_variables_are_named_in_their_packages_and_read_with_their_defaults():
    """settings.py names no channel: each package declares the variables it reads (`environment`), and
    channel_values reads them all, parsed, a default where unset."""
    declared = registry.environment()
    assert declared and len({v.name for v in declared}) == len(declared)
    assert not {v.name for v in declared} & {name for name, _parse in ENVIRONMENT.values()}
    defaults = channel_values({})
    assert defaults == {v.name: v.parse(v.default) for v in declared}
    base = registry.get("wechatpay_v3").environment[0]
    assert channel_values({base.name: "https://sim.local:8443/"})[base.name] == "https://sim.local:8443"


def test_the_settings_fields_name_no_channel():
    words = {w for c in registry.all_channels() for w in (c.name, c.stored, c.route, c.merchant_kind) if w}
    assert not [field for field in Settings._fields if any(word in field for word in words)]
