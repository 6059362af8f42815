"""One line of an order's story (service/story.py): its shape, its times in Asia/Shanghai and its amounts in
cents and yuan, shared by every part of the story that writes lines.

A line says what happened as a sentence with parameters, not as finished text: `says` = {"text": an English
template marked N_ (%(name)s placeholders), "params": the raw values it names (cents under `*_cent`, codes as
stored)}. People read it through `Words.story_title` (tally/i18n/words.py) in their language; `title` is the
same rendering in English, for `--json` and whatever reads it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tally.domain.clock import CHINA
from tally.domain.money import format_cents
from tally.i18n import EN, N_, speaker
from tally.i18n.words import Words

ENGLISH = Words(speaker(EN))
CLOSED_STATES = ("RESOLVED", "IGNORED")  # the work queue's end states, kept on the source row (R41)


def china_time(value: Any) -> str | None:
    """A stored time (ISO UTC `...Z`, or a channel's `+08:00` time) → ISO in Asia/Shanghai, milliseconds."""
    moment = instant(value)
    return None if moment is None else moment.astimezone(CHINA).isoformat(timespec="milliseconds")


def instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def money(cents: Any) -> dict[str, Any]:
    if cents is None:
        return {"amount_cent": None, "amount_yuan": None}
    return {"amount_cent": int(cents), "amount_yuan": format_cents(int(cents))}


def with_yuan(row: dict[str, Any]) -> dict[str, Any]:
    """Every `*_cent` integer field also as `*_yuan` (two decimals), cents kept for machines."""
    out = dict(row)
    for k, v in row.items():
        if k.endswith("_cent") and isinstance(v, int) and not isinstance(v, bool):
            out[k[: -len("_cent")] + "_yuan"] = format_cents(v)
    return out


def stored_fields(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields the row has (not None), each `*_cent` also in yuan: a line's detail."""
    return with_yuan({k: row.get(k) for k in names if row.get(k) is not None})


def with_raw(detail: dict[str, Any], row: dict[str, Any], raw: bool) -> dict[str, Any]:
    """With raw=True, the stored body and verify headers join the detail (the story's --raw)."""
    if raw:
        detail["body"] = row.get("body")
        detail["headers"] = row.get("headers")
    return detail


def entry(
    at: Any,
    kind: str,
    template: str,
    ref: Any,
    *,
    params: dict[str, Any] | None = None,
    amount: Any = None,
    state: Any = None,
    needs_person: bool = False,
    detail: dict[str, Any] | None = None,
    order_: int = 0,
) -> dict[str, Any]:
    says = {"text": template, "params": params or {}}
    return {
        "at": china_time(at),
        "at_utc": at if isinstance(at, str) else None,
        "kind": kind,
        "title": ENGLISH.story_title({"says": says}),
        "says": says,
        "ref": ref,
        **money(amount),
        "state": state,
        "needs_person": needs_person,
        "detail": detail or {},
        "_order": order_,
    }


def history_entry(item: dict[str, Any], ref: Any, on: str) -> dict[str, Any]:
    """A person's action on a row (its `history`), `on` naming the row: order, delivery, refund, refund task or
    recon diff (Words.story_subject)."""
    why = item.get("why") or item.get("note") or ""
    extra = {k: v for k, v in item.items() if k not in ("at", "by", "action", "why", "note")}
    template = (
        N_("%(subject)s %(ref)s: %(action)s by %(by)s - %(why)s")
        if why
        else N_("%(subject)s %(ref)s: %(action)s by %(by)s")
    )
    return entry(
        item.get("at"),
        "queue",
        template,
        ref,
        params={"subject": on, "ref": ref, "action": item.get("action"), "by": item.get("by"), "why": why},
        amount=item.get("amount_cent"),
        state=item.get("action"),
        detail={"by": item.get("by"), "why": why, **extra},
    )


def still_open(row: dict[str, Any]) -> bool:
    """A row that needs a person until the queue closed it (`q_state`) or a resolution was recorded."""
    return row.get("q_state") not in CLOSED_STATES and not row.get("resolution")
