"""The merchant API's reference is the code's: docs/openapi.json and docs/errors.md are what `make openapi`
builds from tally/api (the models and the code table), every error code the code raises is documented, and
the models check what the services check (R14: cents are integers, never decimals or strings)."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from tally.api import models
from tally.api.codes import ERROR_CODES, FIELD_CODES
from tally.api.edge import order_request, parse
from tally.api.openapi import document, document_text, errors_page
from tally.domain.orders import Status
from tally.domain.refunds import RefundStatus
from tally.errors import InvalidRequest
from tally.service import orders, refunds

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_committed_openapi_json_is_what_the_models_say():
    committed = (ROOT / "docs/openapi.json").read_text(encoding="utf-8")
    assert committed == document_text(), "docs/openapi.json is stale: run `make openapi` and commit it"


def test_committed_errors_page_is_what_the_code_table_says():
    committed = (ROOT / "docs/errors.md").read_text(encoding="utf-8")
    assert committed == errors_page(), "docs/errors.md is stale: run `make openapi` and commit it"


def test_the_document_is_valid_openapi_3_1_with_every_route():
    validator = pytest.importorskip("openapi_spec_validator")
    doc = document()
    validator.validate(doc)
    assert doc["openapi"] == "3.1.0"
    assert {(path, verb) for path, ops in doc["paths"].items() for verb in ops} == {
        ("/orders", "post"),
        ("/orders/{mchid}/{out_trade_no}", "get"),
        ("/refunds", "post"),
        ("/refunds/{refund_no}", "get"),
    }
    for ops in doc["paths"].values():
        for op in ops.values():
            errors = {s: r for s, r in op["responses"].items() if int(s) >= 400}
            assert errors and all(
                r["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
                for r in errors.values()
            )


def test_money_is_integer_cents_in_every_schema_R14():
    schemas = document()["components"]["schemas"]
    for name, schema in schemas.items():
        for field, spec in schema.get("properties", {}).items():
            if field.endswith("_cent"):
                types = {spec.get("type")} | {s.get("type") for s in spec.get("anyOf", [])}
                assert types - {None, "null"} == {"integer"}, (name, field, spec)


SOURCES = [
    "layers/common/tally/errors.py",
    "layers/common/tally/apigw.py",
    "layers/common/tally/domain/refunds.py",
    "layers/common/tally/service/orders.py",
    "layers/common/tally/service/refunds.py",
    "layers/common/tally/service/refund_base.py",
    "layers/common/tally/service/refund_requests.py",
    "layers/common/tally/service/callers.py",
    "layers/common/tally/service/merchants.py",
]


def test_every_error_code_the_api_can_raise_is_documented():
    raised = set()
    for source in SOURCES:
        text = (ROOT / source).read_text(encoding="utf-8")
        raised |= set(re.findall(r'\bcode(?: = |=)"([a-z_]+)"', text))
        raised |= set(re.findall(r'error_body\("([a-z_]+)"', text))
    raised -= {
        "error",
        "retry_later",
        "channel_error",
        "signature",
        "parse",
    }  # never an HTTP answer (no status)
    assert raised <= set(ERROR_CODES), sorted(raised - set(ERROR_CODES))
    field_codes = set()
    for source in SOURCES + ["layers/common/tally/api/edge.py"]:
        text = (ROOT / source).read_text(encoding="utf-8")
        field_codes |= set(re.findall(r'field_error\(\s*[^,]+,\s*"([a-z_]+)"', text))
        field_codes |= set(re.findall(r'BadRequest\([^)]*,\s*"([a-z_]+)"\)', text))
    assert field_codes <= set(FIELD_CODES), sorted(field_codes - set(FIELD_CODES))


def test_the_models_know_the_services_words():
    assert models.CHANNELS == orders.CHANNELS
    assert set(models.ORDER_STATUSES) == {s.value for s in Status}
    assert {s.value for s in RefundStatus} <= set(models.REFUND_STATUSES)
    assert models.OUT_TRADE_NO == orders.OUT_TRADE_NO.pattern == refunds.OUT_TRADE_NO.pattern
    assert models.REFUND_NO == refunds.REFUND_NO.pattern


GOOD = {"mchid": "1900000109", "out_trade_no": "ORDER00001", "amount_cent": 100, "description": "coffee"}
BAD_ORDERS = [
    {**GOOD, "amount_cent": 1.5},
    {**GOOD, "amount_cent": "100"},
    {**GOOD, "amount_cent": True},
    {**GOOD, "amount_cent": 0},
    {**GOOD, "amount_cent": 100_000_000_001},
    {**GOOD, "mchid": 1900000109},
    {**GOOD, "mchid": "１９００"},
    {**GOOD, "out_trade_no": "short"},
    {**GOOD, "out_trade_no": "has space 01"},
    {**GOOD, "currency": "cny"},
    {**GOOD, "description": ""},
    {**GOOD, "description": "x" * 128},
    {**GOOD, "expire_minutes": 10081},
    {**GOOD, "prepay": "yes"},
    {**GOOD, "channel": "paypal"},
    {k: v for k, v in GOOD.items() if k != "description"},
    [GOOD],
]
GOOD_ORDERS = [GOOD, {**GOOD, "amount_cent": 100_000_000_000, "channel": "alipay", "expire_minutes": 1}]


@pytest.mark.parametrize("body", BAD_ORDERS + GOOD_ORDERS, ids=repr)
def test_the_order_model_and_the_service_agree_on_every_body_R14(body):
    """The API edge (pydantic) and the service's own check (the CLI's and console's door) accept the same."""

    def accepted(check) -> bool:
        try:
            check(body)
        except (InvalidRequest, ValueError):
            return False
        return True

    assert accepted(order_request) == accepted(orders.validate_order_request) == (body in GOOD_ORDERS)


@pytest.mark.parametrize(
    "change",
    [
        {"amount_cent": 1.0},
        {"amount_cent": -1},
        {"reason": "x" * 81},
        {"refund_no": "R1"},
        {"refund_no": 12345678},
    ],
    ids=repr,
)
def test_the_refund_model_and_the_service_agree(change):
    body = {**GOOD, "reason": "", **change}
    with pytest.raises(InvalidRequest):
        parse(models.RefundRequest, body)
    with pytest.raises(InvalidRequest):
        refunds.validate_refund_request(body)


def test_three_bad_fields_are_three_errors_each_with_its_field_and_code():
    with pytest.raises(InvalidRequest) as raised:
        order_request({"mchid": "19x", "out_trade_no": "ORDER00001", "amount_cent": "1", "currency": "cny"})
    error = raised.value.payload()["error"]
    assert error["code"] == "invalid_request"
    got = {(e["field"], e["code"]) for e in error["errors"]}
    assert got == {
        ("mchid", "bad_format"),
        ("amount_cent", "wrong_type"),
        ("currency", "bad_format"),
        ("description", "missing"),
    }
    amount = next(e for e in error["errors"] if e["field"] == "amount_cent")
    assert "integer number of cents" in amount["message"]


def test_a_combine_sub_order_error_names_its_place():
    body = {
        "combine": True,
        "mchid": "1900000109",
        "combine_out_trade_no": "COMBINE001",
        "sub_orders": [{"out_trade_no": "SUB0000001", "amount_cent": 1}, {"out_trade_no": "SUB0000002"}],
    }
    with pytest.raises(InvalidRequest) as raised:
        order_request(body)
    assert [(e["field"], e["code"]) for e in raised.value.fields] == [("sub_orders.1.amount_cent", "missing")]


def test_answers_keep_only_public_keys():
    from tally.api.edge import public

    row = {
        **GOOD,
        "pk": "1900000109#ORDER00001",
        "tenant": "t",
        "version": 3,
        "poll_pk": "p",
        "poll_due": "x",
        "poll_count": 1,
        "upd_shard": "07",
        "channel": "wechatpay",
        "status": "PAID",
        "currency": "CNY",
        "created_at": "2026-12-06T00:00:00.000Z",
        "expire_at": "2026-12-06T02:00:00.000Z",
        "raw": [{"pk": "r", "handled": 1}],
        "transitions": [{"at": "t", "event": "PAY", "raw_key": "wechatpay#1#2", "source": "notify"}],
    }
    shown = public(models.OrderDetail, row)
    assert not {"pk", "tenant", "version", "poll_pk", "poll_due", "poll_count", "upd_shard", "raw"} & set(
        shown
    )
    assert shown["transitions"] == [{"at": "t", "event": "PAY", "source": "notify"}]
    assert json.dumps(shown)  # plain JSON
