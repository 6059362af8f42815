"""Narrowing a work-queue listing: the filter a person types (`kind=refund,age>2h,since=2026-12-01`), parsed
into a dict, and whether an item matches it."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tally.service.queue_terms import QueueError, _legacy, _part_ids

_AGE = re.compile(r"^age\s*([<>])\s*(\d+)\s*([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_filter(text: str | None) -> dict[str, Any]:
    """`kind=refund,merchant=1900000109,age>2h,state=open,owner=alice,channel=alipay` → a filter dict.
    `kind` matches the kind or its prefix (kind=recon matches recon-diff and recon-blocked)."""
    wanted: dict[str, Any] = {}
    for part in (p.strip() for p in _filter_parts(text or "") if p.strip()):
        age = _AGE.match(part.replace(" ", ""))
        if age:
            op, n, unit = age.groups()
            wanted["age_gt" if op == ">" else "age_lt"] = int(n) * _UNITS[unit]
            continue
        name, eq, value = part.partition("=")
        names = (
            "kind",
            "merchant",
            "channel",
            "state",
            "owner",
            "id",
            "order",
            "since",
            "until",
            "cls",
            "bill_date",
        )
        if not eq or name.strip() not in names:
            raise QueueError(
                f"filter {part!r}: use kind=…, merchant=…, channel=…, state=…, owner=…, order=…, id=…, "
                "cls=…, bill_date=…, since=…, until=…, age>…, age<…"
            )
        if name.strip() in wanted:  # a value that smuggled a second "merchant=…" in must not win silently
            raise QueueError(f"filter names {name.strip()} twice: say it once")
        if name.strip() in ("since", "until"):
            wanted[name.strip()] = parse_bound(value.strip(), end=name.strip() == "until")
            continue
        wanted[name.strip()] = value.strip()
    return wanted


def filter_value(value: str) -> str:
    """`value` as filter text: "\\" and "," escaped, so a value holding "," or "=" stays one value."""
    return value.replace("\\", "\\\\").replace(",", "\\,")


def _filter_parts(text: str) -> list[str]:
    """The filter's comma-separated parts; "\\," is a comma inside a value, "\\\\" a backslash."""
    parts, current, chars = [], [], iter(text)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, "\\"))
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_bound(text: str, *, end: bool = False) -> datetime:
    """`since=`/`until=` of a filter: a date (Asia/Shanghai, like every date the CLI takes: `until` a date
    means through its end), or an ISO time (UTC unless it says otherwise). Items are kept when
    since <= item.since < until."""
    from datetime import UTC, timedelta

    from tally.domain.clock import CHINA

    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = datetime.fromisoformat(text).replace(tzinfo=CHINA)
            return (day + timedelta(days=1) if end else day).astimezone(UTC)
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueueError(
            f"{text!r}: since/until take a date (2026-12-01) or a time (2026-12-01T08:00:00Z)"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def _parse_utc(iso: Any) -> datetime | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    from datetime import UTC

    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _matches(item: dict[str, Any], wanted: dict[str, Any]) -> bool:
    for name, value in wanted.items():
        if name == "age_gt" and not item["age_s"] > value:
            return False
        if name == "age_lt" and not item["age_s"] < value:
            return False
        if name == "kind" and not any(
            k == value or k.startswith(value) for k in item.get("kinds") or [item["kind"]]
        ):
            return False
        if name == "state" and item["state"] != str(value).upper():
            return False
        if name == "id" and _legacy(str(value)) not in {item["id"], *_part_ids(item)}:
            return False
        if name in ("since", "until"):
            when = _parse_utc(item.get("since"))
            if when is None or (when < value if name == "since" else when >= value):
                return False
        if (
            name in ("merchant", "channel", "owner", "order", "cls", "bill_date")
            and str(item.get(name)) != value
        ):
            return False
        if name == "ids" and not ({item["id"], *_part_ids(item)} & set(value)):  # rows a person ticked
            return False
    return True
