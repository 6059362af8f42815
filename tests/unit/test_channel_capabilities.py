"""The channel-blind service modules ask the registry (issue #19, docs/design.md "Channel packages"): a merchant
record is its channel's (channels/<name>/merchant.py Desk, forwarded by MerchantDirectory), the heartbeat's
synthetic payment and the keys function's certificate download are optional Channel capabilities."""

from __future__ import annotations

import inspect
import pathlib

import pytest
from tally.channels import registry
from tally.service import heartbeat
from tally.service.merchants import MerchantDirectory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _directory() -> MerchantDirectory:
    return MerchantDirectory(None, None, "tally/merchants/", "http://127.0.0.1:9")  # type: ignore[arg-type]


@pytest.mark.parametrize("channel", registry.all_channels(), ids=registry.names())
def test_each_declared_accessor_is_a_method_of_the_channels_desk(channel):
    desk = channel.merchant_desk(_directory())
    assert channel.merchant_accessors, f"{channel.name} declares no accessor for its merchants"
    for name in channel.merchant_accessors:
        assert callable(getattr(desk, name, None)), f"{channel.name}'s desk lacks {name}"
    for asked in ("expiries", "check_expiry", "local_check"):  # what service/merchants asks every channel
        assert callable(getattr(desk, asked, None)), f"{channel.name}'s desk lacks {asked}"


def test_accessors_are_unique_and_never_shadow_the_directorys_own_names():
    own = {name for name, _ in inspect.getmembers(MerchantDirectory)}
    seen: dict[str, str] = {}
    for channel in registry.all_channels():
        for name in channel.merchant_accessors:
            assert name not in own, f"{channel.name}'s {name} would be hidden by MerchantDirectory.{name}"
            assert name not in seen, f"{name} declared by {seen.get(name)} and {channel.name}"
            seen[name] = channel.name


def test_the_directory_forwards_an_accessor_to_its_desk_and_binds_it_once():
    directory = _directory()
    v3 = registry.get("wechatpay_v3")
    method = directory.add_wechatpay
    assert method.__self__ is directory.desk(v3)
    assert directory.__dict__["add_wechatpay"] is method  # the next lookup skips __getattr__
    assert directory.alipay.__self__ is directory.desk(registry.get("alipay"))
    with pytest.raises(AttributeError):
        directory.no_such_accessor  # noqa: B018
    assert not hasattr(directory, "_private_probe")


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
