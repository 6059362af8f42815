"""Plain Python values <-> DynamoDB attribute values. Numbers are integers only (money is cents)."""

from __future__ import annotations

from typing import Any, overload


def encode(value: Any) -> dict[str, Any]:
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, dict):
        return {"M": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [encode(v) for v in value]}
    raise TypeError(f"cannot store {type(value).__name__} (floats are not money)")


def decode(attr: dict[str, Any]) -> Any:
    ((kind, value),) = attr.items()
    if kind == "S":
        return value
    if kind == "N":
        return int(value)
    if kind == "BOOL":
        return value
    if kind == "NULL":
        return None
    if kind == "M":
        return {k: decode(v) for k, v in value.items()}
    if kind == "L":
        return [decode(v) for v in value]
    raise TypeError(f"unsupported attribute type {kind}")


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: encode(v) for k, v in values.items() if v is not None}


@overload
def from_item(item: dict[str, Any]) -> dict[str, Any]: ...
@overload
def from_item(item: None) -> None: ...
@overload
def from_item(item: dict[str, Any] | None) -> dict[str, Any] | None: ...
def from_item(item: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if item is None else {k: decode(v) for k, v in item.items()}


def names_values(**values: Any) -> dict[str, Any]:
    """ExpressionAttributeValues from keyword arguments: names_values(x=1) -> {":x": {"N": "1"}}."""
    return {f":{k}": encode(v) for k, v in values.items()}
