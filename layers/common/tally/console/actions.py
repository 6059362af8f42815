"""What an operator may do from a page: the work queue's own actions (service/queue.py), audited with the
identity from the token. The same calls as `tally manual …`: one way to do each thing, no second path for
money (replay is the product path, refund-outcome the refund state machine, a diff the recon service).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tally import bootstrap, errors
from tally.console import lang
from tally.console.auth import Identity
from tally.console.data import Item, queue_filter, yuan
from tally.i18n.words import Words
from tally.observability import M, count, logger

ACTIONS = {
    "ack": "Acknowledge (I am on it)",
    "resolve": "Resolve (dealt with)",
    "ignore": "Ignore (nothing to do)",
    "replay": "Replay through the product path (after a fix)",
    "refund-outcome": "Record the refund's outcome (from the merchant platform)",
    "close-task": "Close the refund task",
    "refund-now": "Refund this payment now (through the channel)",
    "accept-amount": "Accept the amount paid (book what the channel says)",
}
FIELDS = ("owner", "outcome", "code", "reverse")  # what a form may pass on to the queue's action
FILTERS = ("kind", "merchant", "age", "state", "owner", "cls", "bill_date")  # the queue page's filter fields
IDS_CARRIED = 500  # a preview carries its item ids up to this many; beyond, its count and amount (R52)


def _(message: str) -> str:
    """A message in the page's language (console/lang.py; Babel extracts `_`)."""
    return lang.current().gettext(message)


class ActionRefused(errors.Conflict, ValueError):
    """The action does not fit the item (or the item moved on): the queue's message, in plain words."""


@dataclass(frozen=True)
class Outcome:
    item_id: str
    action: str
    message: str
    state: str
    detail: str = ""  # the queue's own words (codes, amounts): behind the page's "details" toggle


def act(item_id: str, action: str, who: Identity, reason: str, **fields: str) -> Outcome:
    from tally.service.queue import QueueError

    if not who.can_act:
        raise PermissionError("only members of operators may act")
    if action not in ACTIONS:
        raise ActionRefused(f"unknown action {action!r}")
    extra: dict[str, Any] = {k: v for k, v in fields.items() if k in FIELDS and v}
    if action == "ack" and not extra.get("owner"):
        extra["owner"] = who.username
    try:
        done = bootstrap.work_queue().act(item_id, action, by=who.who, reason=reason.strip(), **extra)
    except (QueueError, LookupError, ValueError) as exc:
        raise ActionRefused(str(exc)) from None
    count(M.CONSOLE_ACTION)
    logger.info("console action", extra={"item": item_id, "action": action, "by": who.who})
    words = Words(lang.current())
    state = str(done.get("state"))
    message = lang.current().gettext("Done: %(action)s. The case is now: %(state)s.") % {
        "action": words.action(action),
        "state": words.state(state),
    }
    return Outcome(item_id, action, message, state, f"{action}: {done.get('outcome')} ({state})")


CONSOLE_REPLAY_LIMIT = 100  # items one request replays (at 20 a second: 5 s); the page offers to continue


def filter_text(filters: dict[str, str]) -> str:
    """The page's filter as `tally manual … --filter` text (what a bulk replay run stores, and the command
    the preview prints: the CLI's dry run of it shows the same numbers)."""
    from tally.console.data import AGE_FILTERS
    from tally.service.queue import filter_value

    parts = [f"{k}={filter_value(v)}" for k, v in filters.items() if v and k in FILTERS and k != "age"]
    for name, seconds in AGE_FILTERS.get(filters.get("age") or "", {}).items():
        parts.append(f"age{'>' if name == 'age_gt' else '<'}{seconds}s")
    return ",".join(parts)


def selection(filters: dict[str, str], picked: list[str] | None = None) -> dict[str, Any]:
    """The page's filter as the queue's, narrowed to the rows a person ticked (if any)."""
    wanted = queue_filter(**filters)
    if picked:
        wanted["ids"] = list(picked)
    return wanted


def bulk_preview(
    filters: dict[str, str], action: str, picked: list[str] | None = None, **fields: str
) -> dict[str, Any]:
    """The queue's dry run: what would change, counts and amount in yuan, each item not done with why.
    Changes nothing. A replay is previewed by the bulk replay run's own preview (service/replay.py), as
    `tally manual replay --dry-run`. The confirm form carries what it shows (R52: `expect`)."""
    extra: dict[str, Any] = {k: v for k, v in fields.items() if k in FIELDS and v}
    if action == "replay" and not picked:
        text = filter_text(filters)
        report = bootstrap.bulk_replay().preview(text)
        report["cli"] = f"tally manual replay --filter '{text}' --dry-run"
    else:
        report = bootstrap.work_queue().bulk(
            selection(filters, picked), action, by="preview", dry_run=True, **extra
        )
    count_now = report.get("would_change", 0)
    ids = report.get("ids") or []
    return {
        **report,
        "count": count_now,
        "expect": {
            "ids": ",".join(ids) if len(ids) <= IDS_CARRIED else "",
            "count": str(count_now),
            "amount_cent": str(report.get("amount_cent") or 0),
            "as_of": str(report.get("as_of") or ""),
        },
    }


def expected(form: dict[str, str]) -> dict[str, Any]:
    """What the confirmed preview showed, from its form (R52)."""
    out: dict[str, Any] = {}
    if form.get("expect_ids"):
        out["ids"] = [i for i in form["expect_ids"].split(",") if i]
    for name in ("count", "amount_cent"):
        if str(form.get(f"expect_{name}") or "").isdigit():
            out[name] = int(form[f"expect_{name}"])
    if form.get("expect_as_of"):
        out["as_of"] = form["expect_as_of"]
    if not out:
        raise ActionRefused("this confirmation does not say what its preview showed: preview again")
    return out


def replay_run(
    filters: dict[str, str],
    who: Identity,
    reason: str,
    run_id: str = "",
    expect: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A bulk replay run from the queue page: started from a confirmed preview (exactly its set, R52) or
    continued with its id, at most CONSOLE_REPLAY_LIMIT items per request; rate-limited, resumable and
    audited like the CLI's. A changed set raises SetChanged (nothing started)."""
    from tally.service.queue import QueueError, SetChanged

    if not who.can_act:
        raise PermissionError("only members of operators may act")
    runs = bootstrap.bulk_replay()
    try:
        if run_id:
            result = runs.resume(run_id, limit=CONSOLE_REPLAY_LIMIT)
        else:
            result = runs.start(
                filter_text(filters),
                by=who.who,
                why=reason.strip(),
                limit=CONSOLE_REPLAY_LIMIT,
                expect=expect,
            )
    except (QueueError, LookupError, ValueError) as exc:
        if isinstance(exc, SetChanged):
            raise
        raise ActionRefused(str(exc)) from None
    count(M.CONSOLE_ACTION, int(result["this_call"]["changed"] or 0))
    logger.info(
        "console bulk replay", extra={"run": result["run_id"], "by": who.who, "status": result["status"]}
    )
    return result


def bulk(
    filters: dict[str, str],
    action: str,
    who: Identity,
    reason: str,
    *,
    expect: dict[str, Any],
    picked: list[str] | None = None,
    **fields: str,
) -> dict[str, Any]:
    """The confirmed bulk action: on exactly the set its preview showed (`expect`, R52), or SetChanged."""
    from tally.service.queue import QueueError, SetChanged

    if not who.can_act:
        raise PermissionError("only members of operators may act")
    extra: dict[str, Any] = {k: v for k, v in fields.items() if k in FIELDS and v}
    try:
        report = bootstrap.work_queue().bulk(
            selection(filters, picked),
            action,
            by=who.who,
            reason=reason.strip(),
            dry_run=False,
            expect=expect,
            **extra,
        )
    except (QueueError, LookupError, ValueError) as exc:
        if isinstance(exc, SetChanged):
            raise
        raise ActionRefused(str(exc)) from None
    count(M.CONSOLE_ACTION, int(report.get("changed") or 0))
    logger.info(
        "console bulk action", extra={"action": action, "by": who.who, "changed": report.get("changed")}
    )
    return report


__all__ = [
    "ACTIONS",
    "FILTERS",
    "ActionRefused",
    "Item",
    "Outcome",
    "act",
    "bulk",
    "bulk_preview",
    "filter_text",
    "replay_run",
    "yuan",
]


def webhook_action(form: dict[str, str], who: Identity) -> dict[str, Any]:
    """One webhooks action from the console (docs/webhooks.md); what the page shows after it. The secret of a new
    endpoint is shown once, on this answer only (never in a link or a log)."""
    from tally.service.webhooks import WebhookError, WebhookNotFound

    if not who.can_act:
        raise PermissionError("only members of operators may act")
    action, endpoint = form.get("action", ""), form.get("endpoint", "")
    try:
        if action == "add":
            events = [e for e in form.get("events", "").replace(",", " ").split() if e] or None
            added = bootstrap.webhook_endpoints().add(form.get("mchid", ""), form.get("url", ""), events)
            shown: dict[str, Any] = {"message": _("The endpoint was added."), "secret": added}
        elif action == "resume":
            bootstrap.webhook_endpoints().resume(endpoint)
            shown = {"message": _("The endpoint was resumed: now resend what it missed.")}
        elif action == "remove":
            bootstrap.webhook_endpoints().remove(endpoint)
            shown = {"message": _("The endpoint was removed.")}
        elif action == "resend":
            until = form.get("until") or "9999-12-31T23:59:59Z"
            digest = form.get("digest", "")
            done = bootstrap.webhook_resender().range(
                endpoint, form.get("since", ""), until, dry_run=not digest, expect=digest
            )
            n = int(done["count"])
            said = (
                lang.current().ngettext("%(n)s event would be resent.", "%(n)s events would be resent.", n)
                if done["dry_run"]
                else lang.current().ngettext(
                    "%(n)s event queued to be resent.", "%(n)s events queued to be resent.", n
                )
            )
            shown = {"message": said % {"n": n}, "message_detail": endpoint, "preview": done}
        else:
            raise ActionRefused(f"unknown action {action!r}")
    except (WebhookError, WebhookNotFound) as exc:
        raise ActionRefused(str(exc)) from None
    count(M.CONSOLE_ACTION)
    logger.info(
        "console action", extra={"page": "webhooks", "action": action, "endpoint": endpoint, "by": who.who}
    )
    return shown
