"""What a work-queue item can be and what a person may do to it: states, kinds and their thresholds, ids,
actions, the codes a closing action accepts, and the error a refused action raises (service/queue.py)."""

from __future__ import annotations

from typing import Any

from tally import errors

OPEN, ACKNOWLEDGED, RESOLVED, IGNORED = "OPEN", "ACKNOWLEDGED", "RESOLVED", "IGNORED"
LIVE = (OPEN, ACKNOWLEDGED)
DAY_S = 24 * 3600
CERT_WARNING_S = 7 * DAY_S

# notify_event manual kinds listed (the `manual` index is keyed by kind, so each is one Query). Any other
# kind a writer adds is shown generically once it is named here.
KEPT_KINDS = (
    "quarantined",
    "rejected",
    "suspected_forgery",
    "no_transaction_id",
    "certificate",
    "settlement_unknown",  # R43: store/payments.py and store/refunds.py write it in the booking transaction
    "merchant_not_ready",  # R47: the live credential doctor
    "bill_upload",  # an uploaded bill in a folder recon cannot file (service/recon.py, L5)
    "webhook_failing",  # an endpoint that failed a delivery's whole retry window (service/webhooks.py)
    "event_generation_failed",  # a committed change whose event could not be built (service/outbox.py)
    "alert_delivery",  # a chat card not delivered after its retries (service/alerts.py)
    "audit_mismatch",  # a day whose books do not verify against its seal (service/audit.py, docs/audit.md)
    "heartbeat_echo",  # the channel's security echo did not come back (service/heartbeat.py)
)
FORGERY_KIND = "suspected-forgery"
REPLAYABLE = ("quarantined", "rejected")  # kept with the body and headers the ingest path needs again

# kind → (what it is in plain words, how long it may stay open before it counts in the morning number)
KINDS: dict[str, tuple[str, int]] = {
    "unbooked-payment": ("a payment that came in and was not booked", DAY_S),
    "quarantined": ("a signed notification Tally could not read", DAY_S),
    "rejected": ("notifications refused for their signature (kept 7 days)", DAY_S),
    "suspected-forgery": ("a report that claims another merchant's money", DAY_S),
    "no-transaction-id": ("a SUCCESS notification without a transaction id", DAY_S),
    "refund-report": ("a refund report Tally could not apply", DAY_S),
    "refund": ("a refund waiting for a person (abnormal, no outcome, mismatch)", DAY_S),
    "refund-task": ("money that came in and must go back (could not be booked)", DAY_S),
    "recon-diff": ("a difference between the channel's bill and our ledger", DAY_S),
    "recon-blocked": ("a day's bill was refused, so the day is not reconciled", DAY_S),
    "volume-drop": ("a day's bill is much smaller than the day before", DAY_S),
    "bill-layout": ("a day's bill has a layout no parser knows: quarantined until it is mapped", DAY_S),
    "order": ("an order the poller could not settle", DAY_S),
    "certificate": ("a channel certificate about to expire with no successor", 0),
    "settlement-unknown": ("a booked payment or refund whose settlement amount is unknown (R43)", DAY_S),
    "merchant-not-ready": ("a merchant whose credentials fail the live check: its orders are refused", 0),
    "bill-upload": ("an uploaded bill under a folder that names no day: not reconciled", DAY_S),
    "webhook-failing": ("a merchant's webhook endpoint that kept failing: paused, its events held", 0),
    "event-generation-failed": ("a committed change whose event could not be built", 0),
    "alert-delivery": ("a chat card that did not reach its destination: the pager is silent", 0),
    "audit-mismatch": ("a day whose books no longer match what was sealed: someone changed a record", 0),
    "heartbeat-echo": (
        "the channel's echo did not reach Tally's notify route: its callbacks may not either",
        0,
    ),
}
PREFIXES = (
    "pay-",
    "evt-",
    "rejected-",
    "forgery-",
    "report-",
    "refund-",
    "task-",
    "diff-",
    "recon-",
    "order-",
    "cert-",
)
ACTIONS = (
    "ack",
    "resolve",
    "ignore",
    "replay",
    "refund-outcome",
    "abnormal-refund",
    "close-task",
    "refund-now",  # R48: the payment back through the one refund path (its refund task's refund)
    "accept-amount",  # R48: book what the channel says was paid on an amount mismatch
)
CLOSING = ("resolve", "ignore", "close-task", "refund-now", "accept-amount")  # one decision for a whole case
# R48: the kinds that concern one order's money: every live item of these kinds naming the same merchant and
# order is one case (the oldest part leads; the others attach to it and close with it)
CASE_KINDS = frozenset(
    {
        "unbooked-payment",
        "order",
        "refund-task",
        "recon-diff",
        "refund",
        "refund-report",
        "settlement-unknown",
        "no-transaction-id",
    }
)
# What each closing action accepts as --code, per kind (the console offers exactly these; anything else is
# refused with this list). `resolve` without a code stays allowed: the reason says what was done.
TASK_CODES = ("refunded-at-channel", "booked-after-all")
RESOLVE_CODES: dict[str, tuple[str, ...]] = {
    "unbooked-payment": ("refunded-by-hand", "settled-outside-tally", "confirmed-junk", "other"),
    "order": ("closed-by-hand", "settled-outside-tally", "confirmed-junk", "other"),
    "refund-task": ("refunded-by-hand", "settled-outside-tally", "other"),
    "recon-diff": ("explained", "corrected", "channel-fixed", "other"),
    "refund": ("settled-outside-tally", "other"),
    "refund-report": ("refunded-by-hand", "confirmed-junk", "other"),
    "settlement-unknown": ("queried", "other"),
    "no-transaction-id": ("booked-by-query", "confirmed-junk", "other"),
    "quarantined": ("key-fixed", "confirmed-junk", "other"),
    "rejected": ("key-fixed", "confirmed-junk", "other"),
    "suspected-forgery": ("reported", "confirmed-junk", "other"),
    "certificate": ("added", "other"),
    "merchant-not-ready": ("key-fixed", "other"),
    "recon-blocked": ("bill-fixed", "other"),
    "volume-drop": ("confirmed", "other"),
    "bill-upload": ("filed", "other"),
    "bill-layout": ("mapped", "other"),
    "webhook-failing": ("receiver-fixed", "endpoint-removed", "other"),
    "event-generation-failed": ("republished", "other"),
    "alert-delivery": ("robot-fixed", "other"),
    "heartbeat-echo": ("key-fixed", "other"),
}
# given to an action but never written to an item's history (the user's bank card for abnormal-refund)
SECRET_FIELDS = frozenset({"bank_account", "real_name"})


class QueueError(errors.InvalidRequest, ValueError):
    """The action does not fit the item (unknown id, closed already, not offered for this kind): says why."""


def _part_ids(item: dict[str, Any]) -> set[str]:
    return {p["id"] for p in item.get("parts") or []}


def _check_code(item: dict[str, Any], action: str, fields: dict[str, Any]) -> None:
    """A code the item's action does not accept is refused with the ones it does (the console's choices)."""
    code = str(fields.get("code") or "")
    accepted = (item.get("codes") or {}).get(action)
    if action == "close-task" and code not in TASK_CODES:
        raise QueueError(f"close-task needs --code {' or --code '.join(TASK_CODES)}")
    if code and accepted is not None and code not in accepted:
        raise QueueError(f"{item['id']}: {action} takes --code {', '.join(accepted)}; not {code!r}")
    if code and accepted is None and action not in ("resolve", "close-task"):
        raise QueueError(f"{action} takes no --code")


def _closed_state(action: str) -> str:
    return IGNORED if action == "ignore" else RESOLVED


def _legacy(item_id: str) -> str:
    """The ids the old `tally manual` printed (raw:<channel#id>, event:<pk>) still work."""
    if item_id.startswith("raw:"):
        return "pay-" + item_id[4:].replace("#", "-", 1)
    if item_id.startswith("event:"):
        return "evt-" + item_id[6:]
    return item_id
