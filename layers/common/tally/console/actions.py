"""What an operator may do from a page: the same service calls as the CLI, audited with the token's identity.

`act(item_id, action, who, reason)` → a sentence for the page. Every call writes the item's history (who,
when, what, why) through the service that owns the row; nothing here writes a table itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tally import bootstrap
from tally.console.auth import Identity
from tally.console.data import Item, filter_items, queue_items, yuan
from tally.observability import M, count, logger

ACTIONS = {
    "resolve": "Resolve (dealt with outside Tally)",
    "ignore": "Ignore (nothing to do)",
    "replay": "Replay through the product path (after a fix)",
}
RESOLVE_CODES = ("refunded-by-hand", "booked-by-hand", "confirmed-junk", "channel-fixed", "other")


class ActionRefused(ValueError):
    """The action does not fit the item (or the item moved on): the message says why, in plain words."""


@dataclass(frozen=True)
class Outcome:
    item_id: str
    action: str
    message: str


def act(item_id: str, action: str, who: Identity, reason: str, *, code: str = "") -> Outcome:
    if not who.can_act:
        raise PermissionError("only members of operators may act")
    reason = reason.strip()
    if not reason:
        raise ActionRefused("say why: the item's history keeps the reason with your name")
    if action not in ACTIONS:
        raise ActionRefused(f"unknown action {action!r}")
    by = who.who
    try:
        message = _dispatch(item_id, action, by, reason, code)
    except ValueError as exc:  # ManualError, ReconError: the service's own words
        raise ActionRefused(str(exc)) from None
    count(M.CONSOLE_ACTION)
    logger.info("console action", extra={"item": item_id, "action": action, "by": by})
    return Outcome(item_id, action, message)


def _dispatch(item_id: str, action: str, by: str, reason: str, code: str) -> str:
    if item_id.startswith(("raw:", "event:")):
        queue = bootstrap.manual_queue()
        if action == "replay":
            answer = queue.replay(item_id, by=by, why=reason)
            return f"replayed: {answer.get('outcome')}"
        answer_code = code if code in RESOLVE_CODES else ("ignored" if action == "ignore" else "other")
        queue.resolve(item_id, by=by, action=answer_code, why=reason)
        return f"{'ignored' if action == 'ignore' else 'resolved'} ({answer_code})"
    if item_id.startswith("diff:"):
        if action == "replay":
            raise ActionRefused("a recon difference is resolved or ignored, not replayed")
        pk, _, sk = item_id[5:].partition("|")
        channel, mchid, day = pk.split("#", 2)
        bootstrap.recon_service().resolve(
            channel, mchid, day, sk, by=by, note=reason, ignore=action == "ignore"
        )
        return "difference " + ("ignored" if action == "ignore" else "resolved")
    raise ActionRefused(
        "this kind of item has no console action yet: use the CLI (docs/runbook.md names the command)"
    )


def bulk_preview(filters: dict[str, str], action: str) -> dict[str, Any]:
    """What a bulk action would change: the items, their count and their amount in yuan. Changes nothing."""
    items = [i for i in filter_items(queue_items(), **filters) if action in i.actions]
    total = sum(int(i.amount_cent or 0) for i in items)
    return {"items": items, "count": len(items), "amount": yuan(total), "action": action}


def bulk(filters: dict[str, str], action: str, who: Identity, reason: str) -> dict[str, Any]:
    done: list[Item] = []
    failed: list[tuple[Item, str]] = []
    for item in bulk_preview(filters, action)["items"]:
        try:
            act(item.id, action, who, reason)
            done.append(item)
        except ActionRefused as exc:
            failed.append((item, str(exc)))
    return {"done": done, "failed": failed, "amount": yuan(sum(int(i.amount_cent or 0) for i in done))}
