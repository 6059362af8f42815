"""The channel-blind service modules ask the registry (issue #19, docs/design.md "Channel packages"): a merchant
record is its channel's (channels/<name>/merchant.py Desk, typed by `<name>_desk(directory)`), the heartbeat's
synthetic payment, combine payments and the keys function's certificate download are optional capabilities."""

from __future__ import annotations

import importlib
import pathlib

import pytest
from tally.channels import registry
from tally.service import heartbeat
from tally.service.merchants import MerchantDirectory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _directory() -> MerchantDirectory:
    return MerchantDirectory(None, None, "tally/merchants/")  # type: ignore[arg-type]


@pytest.mark.parametrize("channel", registry.all_channels(), ids=registry.names())
def test_each_channel_has_a_typed_desk_accessor_over_the_directory(channel):
    """A caller of a channel's own accessors holds its package's `Desk`, through `<name>_desk(directory)`: no
    name is forwarded by the directory (grep, go-to-definition and mypy see every call)."""
    directory = _directory()
    module = importlib.import_module(f"tally.channels.{channel.name}.merchant")
    desk = getattr(module, f"{channel.name}_desk")(directory)
    assert isinstance(desk, module.Desk) and desk is directory.desk(channel)
    for asked in ("expiries", "check_expiry", "local_check"):  # what service/merchants asks every channel
        assert callable(getattr(desk, asked, None)), f"{channel.name}'s desk lacks {asked}"


def test_the_directory_forwards_nothing():
    assert "__getattr__" not in vars(MerchantDirectory)
    with pytest.raises(AttributeError):
        _directory().add_wechatpay  # noqa: B018


def test_combine_payments_is_a_capability_only_wechatpay_v3_offers():
    offering = [c.name for c in registry.all_channels() if c.combine() is not None]
    assert offering == ["wechatpay_v3"]


def test_only_wechatpay_v3_has_a_synthetic_payment_and_the_heartbeat_takes_it():
    having = [c.name for c in registry.all_channels() if c.synthetic() is not None]
    assert having == ["wechatpay_v3"]
    channel, synthetic = heartbeat.synthetic_channel()
    assert channel.name == "wechatpay_v3" and synthetic is registry.get("wechatpay_v3").synthetic()


def test_a_channel_without_certificates_to_download_refreshes_nothing():
    for name in ("wechatpay_v2", "alipay"):
        assert registry.get(name).refresh_certificates(_directory(), ["2021000000000001"], 0) == {}


def test_the_v2_appid_refusal_is_the_channels_and_only_for_a_prepay():
    class Record:
        appid = ""

    v2 = registry.get("wechatpay_v2")
    assert "appid" in (v2.order_refusal(Record(), True) or "")
    assert v2.order_refusal(Record(), False) is None
    assert registry.get("wechatpay_v3").order_refusal(Record(), True) is None


def test_china_time_is_defined_once_in_domain_clock():
    """The review follow-up: one UTC+8 for the product (layer, CLI, embedded stack); the simulator plays the
    channels and keeps its own clock (tally_local/simulator/_crypto.py)."""
    found = []
    for folder in ("layers", "tally_cli", "tally_local", "functions"):
        for path in (ROOT / folder).rglob("*.py"):
            if "simulator" in path.parts or path.name == "clock.py":
                continue
            if "hours=8" in path.read_text(encoding="utf-8"):
                found.append(str(path.relative_to(ROOT)))
    assert found == []
