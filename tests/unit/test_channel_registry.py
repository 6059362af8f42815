"""channels/registry.py: one spelling per channel, and the one map to what is stored, routed and measured.

Stored data, routes and alarm dimensions keep the meaning they had before the registry (issue #19 item 3):
these tests pin every value, so a change to one is a decision, not an accident."""

from __future__ import annotations

import pathlib

from tally.channels import outcome_of, registry
from tally.channels.refunds import refund_event_of
from tally.domain.notifications import Outcome
from tally.observability import OTHER, channel_value, channel_words
from tally.service.ingest import failure_for_path

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]

# name: (stored, route = metric = CLI word, POST /orders channel, order api, merchants-table channel)
SPELLINGS = {
    "wechatpay_v3": ("wechatpay", "wechatpay", "wechatpay", None, "wechatpay"),
    "wechatpay_v2": ("wechatpay", "wechatpay-v2", "wechatpay_v2", "wechatpay_v2", "wechatpay_v2"),
    "alipay": ("alipay", "alipay", "alipay", None, "alipay"),
}


def test_each_channel_maps_its_one_name_to_the_values_already_stored_routed_and_measured():
    assert registry.names() == list(SPELLINGS)
    for name, spelled in SPELLINGS.items():
        c = registry.get(name)
        assert (c.stored, c.route, c.order_word, c.api, c.merchant_kind) == spelled
        assert c.metric == c.route


def test_notify_routes_are_the_templates():
    """The notify function routes by routeKey through the registry: every template route has its channel."""
    events = load_template(ROOT / "template.yaml")["Resources"]["NotifyFunction"]["Properties"]["Events"]
    keys = {f"{e['Properties']['Method']} {e['Properties']['Path']}" for e in events.values()}
    assert keys == {c.route_key for c in registry.all_channels() if c.own_route} | {registry.NOTIFY_ANY_ROUTE}
    for key in keys - {registry.NOTIFY_ANY_ROUTE}:
        assert registry.by_route_key(key) is not None


def test_the_any_channel_route_reaches_only_a_channel_without_its_own_route():
    """A new channel's callbacks come by POST /notify/{channel}/{merchant} (no template edit); a built-in
    channel's word there finds nothing: its own, more specific route is the one API Gateway matches."""
    assert registry.by_route_key(registry.NOTIFY_ANY_ROUTE) is None
    for channel in registry.all_channels():
        assert (
            registry.for_notify(registry.NOTIFY_ANY_ROUTE, {"channel": channel.route, "merchant": "1"})
            is None
        )
        assert registry.for_notify(channel.route_key, {}) is channel


def test_lookups_by_every_spelling():
    v3, v2, ali = (registry.get(n) for n in SPELLINGS)
    assert registry.by_order_word("wechatpay_v2") is v2 and registry.by_order_word("wechatpay") is v3
    assert registry.by_order_word("wechatpay_v3") is None  # not a word POST /orders ever took
    assert registry.by_stored("wechatpay") is v3  # the owner of the stored value's tables
    assert registry.by_path("/notify/wechatpay-v2/1900000109") is v2  # not v3's prefix
    assert registry.by_path("/notify/wechatpay/1900000109") is v3 and registry.by_path("/x") is None
    assert registry.for_order({"channel": "wechatpay", "api": "wechatpay_v2"}) is v2
    assert (
        registry.for_order({"channel": "wechatpay"}) is v3
        and registry.for_order({"channel": "alipay"}) is ali
    )
    assert registry.by_merchant_kind("wechatpay_v2") is v2
    assert registry.stored_values() == ["wechatpay", "alipay"] and registry.reconciled() == (
        "wechatpay",
        "alipay",
    )


def test_metric_dimension_values_are_unchanged():
    assert channel_words() == ("wechatpay", "wechatpay-v2", "alipay")
    for spelling, value in {
        "wechatpay": "wechatpay",
        "wechatpay_v2": "wechatpay-v2",
        "wechatpay-v2": "wechatpay-v2",
        "alipay": "alipay",
        None: OTHER,
        "": OTHER,
        "paypal": OTHER,
    }.items():
        assert channel_value(spelling) == value, spelling


def test_state_and_refund_tables_are_the_stored_channels():
    """R16: the worker's tables by stored channel; v2's words were translated into v3's before."""
    assert outcome_of("wechatpay", "SUCCESS") is Outcome.PAID
    assert outcome_of("alipay", "TRADE_SUCCESS") is Outcome.PAID
    assert outcome_of("alipay", "SUCCESS") is None and outcome_of("paypal", "SUCCESS") is None
    assert registry.get("wechatpay_v2").outcome_of("SUCCESS") is Outcome.PAID
    assert refund_event_of("wechatpay", "SUCCESS") is not None
    assert refund_event_of("alipay", "REFUND_SUCCESS") is not None and refund_event_of("x", "SUCCESS") is None


def test_failure_acks_follow_the_path_s_channel():
    assert failure_for_path("/notify/wechatpay-v2/1", 400, "bad").content_type == "text/xml"
    assert failure_for_path("/notify/alipay/1", 400, "bad").body == "fail"
    assert failure_for_path("/notify/wechatpay/1", 400, "bad").content_type == "application/json"
    assert failure_for_path("/elsewhere", 404, "unknown channel").content_type == "application/json"


def test_a_spelling_cannot_be_taken_twice():
    import dataclasses

    import pytest

    clash = dataclasses.replace(registry.get("alipay"), name="alipay_hk")  # same route and order word
    with pytest.raises(ValueError, match="spells"):
        registry.register(clash)
    assert registry.names() == list(SPELLINGS)


def test_r26_refunds_of_the_shared_stored_channel_go_to_v3_then_v2():
    """v2 and v3 share "wechatpay": a merchant with v3 credentials refunds with v3, a v2-only one with its
    v2 API key, an unknown one is not found (registry.refund_clients, as bootstrap wires it)."""
    from types import SimpleNamespace

    import pytest
    from tally.channels.alipay.refunds import AlipayRefunds
    from tally.channels.wechatpay_v2.refunds import WeChatV2Refunds
    from tally.channels.wechatpay_v3.refunds import WeChatRefunds
    from tally.service.merchants import UnknownMerchant

    v3_merchant = SimpleNamespace(notify_url="https://t/notify/wechatpay/1", sp_mchid=None)
    v2_merchant = SimpleNamespace(
        api_key="k" * 32, row={"appid": "wx1"}, client_cert=None, client_key=None, notify_url="https://t/v2"
    )

    class Merchants:
        def desk(self, channel):  # every channel's desk: this one object answers their accessors
            return self

        def wechatpay(self, mchid):
            if mchid != "V3":
                raise UnknownMerchant(mchid)
            return v3_merchant

        def wechatpay_v2(self, mchid):
            if mchid != "V2":
                raise UnknownMerchant(mchid)
            return v2_merchant

        def client(self, merchant):
            return object()

        def alipay(self, app_id):
            return SimpleNamespace(sp_mchid=None)

        def alipay_client(self, merchant):
            return object()

        def setting(self, variable):
            return "http://127.0.0.1:9" if variable.name.endswith("API_BASE") else ""

    settings = SimpleNamespace(http_timeout_s=1.0)
    clients = registry.refund_clients(Merchants(), settings, lambda: 0.0)
    assert set(clients) == {"wechatpay", "alipay"}
    assert isinstance(clients["wechatpay"]("V3"), WeChatRefunds)
    assert isinstance(clients["wechatpay"]("V2"), WeChatV2Refunds)
    assert isinstance(clients["alipay"]("2021000000000001"), AlipayRefunds)
    with pytest.raises(UnknownMerchant):
        clients["wechatpay"]("NOBODY")


def test_the_metrics_know_no_channel_the_registry_tells_them():
    """observability.py imports no channel module (it sits below channels and store); the registry gives it the
    `channel` dimension's words when it is imported, so every spelling still lands on its alarm's value."""
    import ast

    source = (ROOT / "layers/common/tally/observability.py").read_text(encoding="utf-8")
    imported = [
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    ]
    assert not [m for m in imported if m.startswith("tally.channels")]
    assert channel_value("wechatpay_v2") == "wechatpay-v2" and channel_value("no-such") == OTHER
