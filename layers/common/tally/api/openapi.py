"""docs/openapi.json (OpenAPI 3.1) and docs/errors.md, built from the models and the code table.

`make openapi` writes both (`python -m tally.api.openapi`); tests/unit/test_api_reference.py fails when the
committed files and the code disagree; the embedded stack serves the document at GET /openapi.json."""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tally.api import models
from tally.api.codes import ERROR_CODES, FIELD_CODES

SCHEMAS: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
    (models.OrderRequest, "validation"),
    (models.CombineOrderRequest, "validation"),
    (models.RefundRequest, "validation"),
    (models.Order, "serialization"),
    (models.OrderDetail, "serialization"),
    (models.CombineOrder, "serialization"),
    (models.Refund, "serialization"),
    (models.Error, "serialization"),
]
REF = "#/components/schemas/{model}"


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _errors(*codes: str) -> dict[str, Any]:
    """The error answers of a route, one per status, each listing the codes it may carry."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(ERROR_CODES[code].status, []).append(code)
    return {
        str(status): {
            "description": "codes: " + ", ".join(f"`{c}`" for c in listed) + " (docs/errors.md)",
            "content": _json(_ref(models.Error)),
        }
        for status, listed in sorted(by_status.items())
    }


COMMON = ("invalid_request", "forbidden", "internal_error")
SIGNED: list[dict[str, list[str]]] = [{"sigv4": []}]


def _path_param(name: str, description: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if pattern:
        schema["pattern"] = pattern
    return {"name": name, "in": "path", "required": True, "description": description, "schema": schema}


def document() -> dict[str, Any]:
    _, defs = models_json_schema(SCHEMAS, ref_template=REF)
    schemas = defs.get("$defs", {})
    schemas["Error"]["properties"]["error"] = _ref(models.ErrorDetail)
    schemas["ErrorDetail"]["properties"]["code"]["enum"] = list(ERROR_CODES)
    schemas["FieldError"]["properties"]["code"]["enum"] = list(FIELD_CODES)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tally merchant API",
            "version": "1",
            "description": (
                "Orders and refunds for a merchant's backend. Every request is signed with AWS SigV4 (service "
                "`execute-api`) by a principal registered for the merchant it names (R53). Money is integer "
                "cents. Re-posting an order or a refund with the same terms is a retry: 200 with what is stored "
                "(201 only when this request created it); other terms are a 409 naming the term. Every error "
                "is one JSON body with a stable `code` and every field at fault at once: docs/errors.md."
            ),
        },
        "servers": [{"url": "http://127.0.0.1:3000", "description": "the embedded stack (make run)"}],
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {
                "sigv4": {
                    "type": "apiKey",
                    "name": "Authorization",
                    "in": "header",
                    "description": "AWS Signature Version 4 (service execute-api); examples/ sign with botocore "
                    "and the AWS SDK for JavaScript",
                }
            },
        },
        "security": SIGNED,
        "paths": {
            "/orders": {
                "post": {
                    "operationId": "createOrder",
                    "summary": "Register an order (and get its prepay QR code); idempotent on out_trade_no",
                    "requestBody": {
                        "required": True,
                        "content": _json(
                            {"oneOf": [_ref(models.OrderRequest), _ref(models.CombineOrderRequest)]}
                        ),
                    },
                    "responses": {
                        "201": {
                            "description": "created",
                            "content": _json({"oneOf": [_ref(models.Order), _ref(models.CombineOrder)]}),
                        },
                        "200": {
                            "description": "the same terms again: the stored order, in whatever state it is",
                            "content": _json({"oneOf": [_ref(models.Order), _ref(models.CombineOrder)]}),
                        },
                        **_errors(
                            *COMMON,
                            "merchant_not_found",
                            "order_terms_differ",
                            "merchant_not_ready",
                            "prepay_failed",
                        ),
                    },
                }
            },
            "/orders/{mchid}/{out_trade_no}": {
                "get": {
                    "operationId": "getOrder",
                    "summary": "The order and its transitions (asks the channel once about an unpaid order, R24)",
                    "parameters": [
                        _path_param("mchid", "the merchant number", models.MCHID),
                        _path_param("out_trade_no", "the merchant's order number"),
                    ],
                    "responses": {
                        "200": {"description": "the order", "content": _json(_ref(models.OrderDetail))},
                        **_errors("forbidden", "internal_error", "order_not_found"),
                    },
                }
            },
            "/refunds": {
                "post": {
                    "operationId": "createRefund",
                    "summary": "Refund a paid order; idempotent on refund_no",
                    "requestBody": {"required": True, "content": _json(_ref(models.RefundRequest))},
                    "responses": {
                        "201": {"description": "created", "content": _json(_ref(models.Refund))},
                        "200": {
                            "description": "the same refund_no with the same terms: the stored refund",
                            "content": _json(_ref(models.Refund)),
                        },
                        **_errors(
                            *COMMON,
                            "order_not_found",
                            "merchant_not_found",
                            "refund_terms_differ",
                            "refund_no_spent",
                            "order_not_paid",
                            "exceeds_refundable",
                            "conflict",
                            "busy",
                        ),
                    },
                }
            },
            "/refunds/{refund_no}": {
                "get": {
                    "operationId": "getRefund",
                    "summary": "A refund; pass ?mchid= (your merchant): another merchant's number is not found",
                    "parameters": [
                        _path_param("refund_no", "the refund number"),
                        {
                            "name": "mchid",
                            "in": "query",
                            "required": False,
                            "description": "your merchant number",
                            "schema": {"type": "string", "pattern": models.MCHID},
                        },
                    ],
                    "responses": {
                        "200": {"description": "the refund", "content": _json(_ref(models.Refund))},
                        **_errors("forbidden", "internal_error", "refund_not_found"),
                    },
                }
            },
        },
    }


def document_text() -> str:
    return json.dumps(document(), ensure_ascii=False, indent=2) + "\n"


def errors_page() -> str:
    lines = [
        "# API errors",
        "",
        "Every error answer of the merchant API (`POST /orders`, `GET /orders/{mchid}/{out_trade_no}`,",
        "`POST /refunds`, `GET /refunds/{refund_no}`) is one JSON body, whatever its status:",
        "",
        "```json",
        '{"error": {"code": "invalid_request", "message": "2 fields are invalid: amount_cent, out_trade_no",',
        '           "errors": [{"field": "amount_cent", "code": "wrong_type", "message": "…"},',
        '                      {"field": "out_trade_no", "code": "bad_format", "message": "…"}]}}',
        "```",
        "",
        "`code` is stable: branch on it, never on `message` (English, for engineers, may change). `errors` lists",
        "every field at fault at once (empty when the error is not a field's); on a 409 it names the term that",
        "differs. The schema is `Error` in [openapi.json](openapi.json). This page is generated from",
        "`layers/common/tally/api/codes.py` by `make openapi`.",
        "",
        "## Codes",
        "",
        "| code | HTTP | what it means | what the caller does |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{code}` | {c.status} | {c.means} | {c.then} |" for code, c in ERROR_CODES.items()]
    lines += ["", "## Field codes (`errors[].code`)", "", "| code | what it means |", "|---|---|"]
    lines += [f"| `{code}` | {means} |" for code, means in FIELD_CODES.items()]
    return "\n".join(lines) + "\n"


def write(root: pathlib.Path) -> None:
    (root / "docs" / "openapi.json").write_text(document_text(), encoding="utf-8")
    (root / "docs" / "errors.md").write_text(errors_page(), encoding="utf-8")


if __name__ == "__main__":
    write(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
