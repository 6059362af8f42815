"""Parse a request into its model (every field error at once) and shape an answer into its public model; the
HTTP resolver (Powertools' APIGatewayHttpResolver) the orders and refunds functions route with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from tally import errors
from tally.api import models
from tally.apigw import HttpResponse, answer, json_response

M = TypeVar("M", bound=BaseModel)

# pydantic's error types → the stable field codes of docs/errors.md (tally/api/codes.py FIELD_CODES)
_FIELD_CODES = {
    "missing": "missing",
    "string_pattern_mismatch": "bad_format",
    "string_too_short": "bad_length",
    "string_too_long": "bad_length",
    "too_short": "bad_length",
    "too_long": "bad_length",
    "greater_than_equal": "out_of_range",
    "less_than_equal": "out_of_range",
    "greater_than": "out_of_range",
    "less_than": "out_of_range",
    "literal_error": "not_allowed",
    "extra_forbidden": "unknown_field",
}


def field_code(pydantic_type: str) -> str:
    if pydantic_type in _FIELD_CODES:
        return _FIELD_CODES[pydantic_type]
    return "wrong_type" if pydantic_type.endswith("_type") or "_parsing" in pydantic_type else "invalid"


def parse(model: type[M], body: Any) -> M:
    """`body` (parsed JSON) as `model`, or an InvalidRequest (400 `invalid_request`) listing every field at
    fault, each with its code and what the field must be (its description)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid(model, exc) from None


def invalid(model: type[BaseModel], exc: ValidationError) -> errors.InvalidRequest:
    found = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"])
        if not path:  # the body itself: not an object
            found.append(errors.field_error("body", "not_json", "body must be a JSON object"))
            continue
        message = error["msg"]
        hint = _description(model, error["loc"])
        found.append(
            errors.field_error(
                path, field_code(error["type"]), f"{message}; {path}: {hint}" if hint else message
            )
        )
    names = ", ".join(dict.fromkeys(e["field"] for e in found))
    noun = "field is" if len(found) == 1 else "fields are"
    return errors.InvalidRequest(f"{len(found)} {noun} invalid: {names}", fields=found)


def _description(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """The description of the field at `loc` (through nested models and lists): what the field must be."""
    current: Any = model
    info = None
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return ""
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        current = next(
            (a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
    return (info.description or "") if info is not None else ""


def order_request(body: Any) -> models.OrderRequest | models.CombineOrderRequest:
    if isinstance(body, dict) and body.get("combine") is True:
        return parse(models.CombineOrderRequest, body)
    return parse(models.OrderRequest, body)


def public(model: type[BaseModel], view: Mapping[str, Any]) -> dict[str, Any]:
    """`view` as `model` shows it: unknown keys dropped, absent (None) ones left out."""
    return model.model_validate(view).model_dump(mode="json", exclude_none=True)


def order_view(view: Mapping[str, Any]) -> dict[str, Any]:
    return public(models.CombineOrder if view.get("combine") is True else models.Order, view)


def respond(status: int, model: type[BaseModel], view: Mapping[str, Any]) -> HttpResponse:
    return json_response(status, public(model, view))


def _public_error(payload: dict[str, Any]) -> dict[str, Any]:
    """An error's stored order (prepay_failed) is shown as any order is: public keys only."""
    detail = payload.get("error") or {}
    if isinstance(detail.get("order"), Mapping):
        payload = {"error": {**detail, "order": order_view(detail["order"])}}
    return payload


def api_answer(
    call: Callable[[], HttpResponse], *, what: str, retry_hint: str = "internal error, retry"
) -> dict[str, Any]:
    """tally.apigw.answer with the public error shape: what the orders and refunds handlers return."""
    return answer(call, what=what, retry_hint=retry_hint, shape=_public_error)


def resolver(*, what: str, retry_hint: str = "internal error, retry") -> APIGatewayHttpResolver:
    """Powertools' HTTP API resolver for one function's routes, with validation on (a route's typed path and
    query parameters), answering every error in the one shape of docs/errors.md: a TallyError with its status
    and code, a parameter the resolver refused as 400 `invalid_request` with every field at fault, a path no
    route matches as 404 `not_found`, anything else as the counted, logged 500 of tally.apigw.answer (R40).

    The body is parsed by the route itself (`parse`), after the signed caller is checked against the merchant
    it names (R53: a caller learns nothing of another merchant's request shape), and its errors carry the
    field descriptions and stable codes of tally/api/codes.py."""
    app = APIGatewayHttpResolver(enable_validation=True)

    @app.exception_handler(RequestValidationError)
    def refused(exc: RequestValidationError) -> Response:
        found = [
            errors.field_error(
                ".".join(str(part) for part in error["loc"][1:]) or str(error["loc"][0]),
                field_code(error["type"]),
                error["msg"],
            )
            for error in exc.errors()
        ]
        noun = "field is" if len(found) == 1 else "fields are"
        names = ", ".join(dict.fromkeys(e["field"] for e in found))
        return _raised(errors.InvalidRequest(f"{len(found)} {noun} invalid: {names}", fields=found))

    @app.not_found
    def no_route(exc: NotFoundError) -> Response:
        return _raised(errors.NotFound("no such route", code="not_found"))

    @app.exception_handler(Exception)
    def failed(exc: Exception) -> Response:
        return _raised(exc, what=what, retry_hint=retry_hint)

    return app


def _raised(exc: Exception, *, what: str = "api", retry_hint: str = "internal error, retry") -> Response:
    def again() -> HttpResponse:
        raise exc

    return to_response(api_answer(again, what=what, retry_hint=retry_hint))


def to_response(event: dict[str, Any] | HttpResponse) -> Response:
    """An answer (tally.apigw's event or HttpResponse) as the resolver's Response: the same status and bytes."""
    if isinstance(event, HttpResponse):
        event = event.to_event()
    headers = event.get("headers") or {}
    return Response(
        status_code=event["statusCode"],
        content_type=headers.get("content-type"),
        body=event.get("body") or "",
    )
