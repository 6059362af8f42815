"""Every function builds its clients and services at init (bootstrap.at_init at its module's top level), so a
cold start pays for them before the first request; outside a function's environment nothing is built."""

from __future__ import annotations

import ast

from tally import bootstrap

from tests.conftest import ROOT

ENV = {  # what Settings.from_env requires (template.yaml sets these for every function)
    **{k: "t" for k in ("NOTIFY_RAW_TABLE", "NOTIFY_EVENT_TABLE", "ORDERS_TABLE", "TRANSITIONS_TABLE")},
    **{k: "t" for k in ("LEDGER_TABLE", "REFUND_TASKS_TABLE", "MERCHANTS_TABLE", "REFUNDS_TABLE")},
    "REFUND_RAW_TABLE": "t",
    "MERCHANT_SECRET_PREFIX": "tally/test/merchants/",
    "APPLY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
}


def test_at_init_builds_in_a_functions_environment(monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    bootstrap.reset()
    built = []
    try:
        bootstrap.at_init(lambda: built.append("service"))
        assert built == ["service"] and bootstrap.settings.cache_info().currsize == 1
    finally:
        bootstrap.reset()


def test_at_init_builds_nothing_without_the_environment(monkeypatch):
    monkeypatch.delenv("NOTIFY_RAW_TABLE", raising=False)
    bootstrap.reset()
    built = []
    bootstrap.at_init(lambda: built.append("service"))
    assert built == []


def test_every_function_but_the_console_builds_at_init():
    """The console builds per page (its pages need different services; docs/console.md)."""
    missing = []
    for app in sorted((ROOT / "functions").glob("*/app.py")):
        calls = [
            node
            for node in ast.parse(app.read_text(encoding="utf-8")).body
            if isinstance(node, ast.Expr) and "at_init" in ast.unparse(node)
        ]
        if not calls and app.parent.name != "console":
            missing.append(app.parent.name)
    assert missing == []
