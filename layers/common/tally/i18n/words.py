"""What people read instead of codes: each case kind and difference class in one plain sentence with a next
step, states, channels, run verdicts, ages, amounts (¥1,234.56) and times (Asia/Shanghai).

Every table here is written in English with N_ (so Babel extracts it) and translated where it is shown
(`Speaker.gettext`). tests/unit/test_i18n_catalogues.py fails when a kind of service/queue.py KINDS or a class
of domain/recon.py DIFF_CLASSES has no entry, or an entry no translation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tally.domain.clock import CHINA
from tally.domain.money import format_cents
from tally.i18n import N_, Speaker


class Reason:
    """A kind's plain sentence and the next step a person takes (docs/morning.md's table, in plain words)."""

    def __init__(self, title: str, reason: str, todo: str):
        self.title, self.reason, self.todo = title, reason, todo


KIND_REASONS: dict[str, Reason] = {
    "unbooked-payment": Reason(
        N_("Payment not booked"),
        N_("A customer paid, but the payment could not be booked automatically."),
        N_(
            "Find out why on the order's story. Once the cause is fixed, replay it; if the amount was wrong, "
            "accept the amount paid; or refund it now."
        ),
    ),
    "quarantined": Reason(
        N_("Notification could not be read"),
        N_("The payment channel sent a signed notification that Tally could not decrypt or read."),
        N_("Ask an engineer to check the merchant's API key and settings, then replay it."),
    ),
    "rejected": Reason(
        N_("Notifications refused"),
        N_("Notifications arrived whose signature did not check out, so they were not accepted."),
        N_("Ask an engineer to check the merchant's keys and the server clock, then replay the group."),
    ),
    "suspected-forgery": Reason(
        N_("Suspected forgery"),
        N_("A report claimed money that belongs to another merchant; nothing was changed."),
        N_("Check with both merchants, then resolve it as reported."),
    ),
    "no-transaction-id": Reason(
        N_("Payment without a transaction number"),
        N_(
            "The channel reported a successful payment but left out its transaction number; nothing was booked."
        ),
        N_("Find the payment on the merchant platform, then resolve it once it has been booked."),
    ),
    "refund-report": Reason(
        N_("Refund report not applied"),
        N_("The channel reported a refund Tally did not start or could not apply, e.g. one made by hand."),
        N_("Compare it with the merchant platform, then resolve it as refunded by hand."),
    ),
    "refund": Reason(
        N_("Refund needs a person"),
        N_("A refund has no clear outcome from the channel; its amount stays reserved."),
        N_("Look the refund up on the merchant platform and record its outcome: succeeded or failed."),
    ),
    "refund-task": Reason(
        N_("Money to give back"),
        N_("Money came in that cannot be booked, so it has to go back to the customer."),
        N_("Refund it now, or close the task if it was already refunded at the channel or booked after all."),
    ),
    "recon-diff": Reason(
        N_("Bill and books differ"),
        N_("The channel's daily bill and Tally's ledger disagree about this payment."),
        N_(
            "Check the order and the bill, then resolve it (with a reversing entry if our books are wrong) or ignore it."
        ),
    ),
    "recon-blocked": Reason(
        N_("Day not reconciled"),
        N_(
            "The channel's bill for the day was refused (missing, empty or inconsistent), so the day is not checked."
        ),
        N_("Ask an engineer to fetch the bill again and re-run the day, then resolve it."),
    ),
    "volume-drop": Reason(
        N_("Bill much smaller than usual"),
        N_("The day's bill is much smaller than the day before, so it was held back."),
        N_("If the day really was quiet, replay it to reconcile the day from the kept bill."),
    ),
    "bill-layout": Reason(
        N_("New bill layout"),
        N_("The channel's bill has a layout Tally does not know yet; the day is held until it is mapped."),
        N_("Ask an engineer to map the new layout; every held day is then reconciled again."),
    ),
    "order": Reason(
        N_("Order not settled"),
        N_("Tally could not find out whether this order was paid or closed."),
        N_("Replay it to ask the channel again now, or check the channel and resolve it."),
    ),
    "certificate": Reason(
        N_("Certificate about to expire"),
        N_("A channel certificate expires within 7 days and no successor has been added."),
        N_("Ask an engineer to add the new certificate, then resolve it."),
    ),
    "settlement-unknown": Reason(
        N_("Settlement amount unknown"),
        N_(
            "The payment was booked, but its coupon figures contradict each other, so what the merchant receives is unclear."
        ),
        N_("Query the order on the merchant platform, compare it with the bill, then resolve it."),
    ),
    "merchant-not-ready": Reason(
        N_("Merchant not ready"),
        N_("The merchant's credentials fail the live check, so its orders are refused."),
        N_("Ask an engineer to fix the merchant's credentials, then resolve it."),
    ),
    "bill-upload": Reason(
        N_("Uploaded bill not used"),
        N_("Someone uploaded a bill into a folder that names no day, so nothing was reconciled from it."),
        N_("Upload it again into the folder of its day, then resolve it."),
    ),
    "webhook-failing": Reason(
        N_("Merchant webhook failing"),
        N_(
            "The merchant's webhook receiver kept failing, so it is paused and its events are held, not lost."
        ),
        N_(
            "Get the merchant's receiver fixed, resume the endpoint on the Webhooks page and resend what it missed, then resolve it."
        ),
    ),
    "event-generation-failed": Reason(
        N_("Event not sent"),
        N_("An order or refund changed, but the event telling the merchant's systems could not be built."),
        N_("Ask an engineer to fix it and send the event again, then resolve it."),
    ),
    "alert-delivery": Reason(
        N_("Alert not delivered"),
        N_("An alert card did not reach its chat group after 3 attempts, so that group heard nothing."),
        N_("Check the chat robot's settings and read the incident it was about, then resolve it."),
    ),
    "audit-mismatch": Reason(
        N_("Books changed after sealing"),
        N_("A day's books no longer match what was sealed that night: a record was changed or deleted."),
        N_(
            "Tell an engineer at once: the day's audit check names the records that changed; restore them, then resolve it."
        ),
    ),
    "heartbeat-echo": Reason(
        N_("Channel echo missing"),
        N_(
            "WeChat Pay was asked for a test callback to this merchant's notify address and none arrived, so real callbacks may not arrive either."
        ),
        N_(
            "Check the merchant's keys with a live check and the notify route, wait for the next echo, then resolve it."
        ),
    ),
}
STUCK = Reason(
    N_("Not applied yet"),
    N_("A payment notification was stored but not applied for 10 minutes; Tally retries it by itself."),
    N_("Nothing to do unless it stays here: then tell an engineer."),
)
UNKNOWN_KIND = Reason(
    N_("Needs a look"),
    N_("Something Tally could not handle by itself."),
    N_("Open the details and ask an engineer if it is unclear."),
)

DIFF_REASONS: dict[str, Reason] = {
    "CHANNEL_ONLY": Reason(
        N_("Only on the channel's bill"),
        N_("The channel's bill has this payment, but Tally's ledger does not (a lost notification)."),
        N_("Open the order: replay it to book it, or resolve it if it was settled another way."),
    ),
    "LOCAL_ONLY": Reason(
        N_("Only in our books"),
        N_("Tally booked this payment, but the channel's bill does not have it."),
        N_(
            "Check the order on the merchant platform; if the money never came, resolve it with a reversing entry."
        ),
    ),
    "AMOUNT_DIFFERS": Reason(
        N_("Amounts differ"),
        N_("The channel's bill and Tally's ledger show different amounts for this payment."),
        N_(
            "Compare the amounts on the merchant platform, then resolve it (with a reversing entry if ours is wrong)."
        ),
    ),
    "STATUS_DIFFERS": Reason(
        N_("Status differs"),
        N_("The channel's bill and Tally's ledger disagree on whether this was paid or refunded."),
        N_("Check the order on the merchant platform, then resolve or ignore it."),
    ),
    "SETTLEMENT_DIFFERS": Reason(
        N_("Money did not land as booked"),
        N_("The money the channel paid out for the day differs from what Tally booked."),
        N_(
            "Check the settlement on the merchant platform; resolve it when the money landed late or the channel confirmed it."
        ),
    ),
}

STATES = {
    "OPEN": N_("open"),
    "ACKNOWLEDGED": N_("being worked on"),
    "RESOLVED": N_("resolved"),
    "IGNORED": N_("ignored"),
    "closed": N_("closed"),
}
ACTIONS = {
    "ack": N_("Take it (I am on it)"),
    "resolve": N_("Resolve (dealt with)"),
    "ignore": N_("Ignore (nothing to do)"),
    "replay": N_("Try again through the normal path (after a fix)"),
    "refund-outcome": N_("Record the refund's outcome (from the merchant platform)"),
    "abnormal-refund": N_("Mark the refund abnormal"),
    "close-task": N_("Close the refund task"),
    "refund-now": N_("Refund this payment now"),
    "accept-amount": N_("Accept the amount paid (book what the channel says)"),
}
CODES = {  # what a closing action records as done (service/queue.py RESOLVE_CODES, TASK_CODES; R48)
    "refunded-by-hand": N_("refunded by hand"),
    "settled-outside-tally": N_("settled outside Tally"),
    "confirmed-junk": N_("confirmed as junk"),
    "closed-by-hand": N_("closed by hand"),
    "explained": N_("explained"),
    "corrected": N_("corrected"),
    "channel-fixed": N_("fixed by the channel"),
    "queried": N_("queried at the channel"),
    "booked-by-query": N_("booked after a query"),
    "key-fixed": N_("key fixed"),
    "reported": N_("reported"),
    "added": N_("added"),
    "bill-fixed": N_("bill fixed"),
    "confirmed": N_("confirmed"),
    "filed": N_("filed under its day"),
    "mapped": N_("layout mapped"),
    "receiver-fixed": N_("receiver fixed"),
    "endpoint-removed": N_("endpoint removed"),
    "republished": N_("sent again"),
    "robot-fixed": N_("robot fixed"),
    "refunded-at-channel": N_("refunded at the channel"),
    "booked-after-all": N_("booked after all"),
    "landed-late": N_("the money landed late"),
    "channel-adjusted": N_("adjusted by the channel"),
    "channel-confirmed-short": N_("the channel confirmed the shortfall"),
    "ledger-corrected": N_("our ledger corrected"),
    "other": N_("other (say what in the note)"),
}
RUN_STATUSES = {  # a recon day or run as a person reads it (domain/merchant_day.py day_state, service/recon.py)
    "MATCHED": N_("matched"),
    "DIFFS": N_("differences open"),
    "DONE": N_("done"),
    "EXPECTED": N_("money in transit"),
    "BLOCKED": N_("bill refused"),
    "FAILED": N_("failed"),
    "RUNNING": N_("running"),
    "QUIET_DAY": N_("quiet day"),
    "QUIET": N_("quiet day"),  # a trade run's own word for it (service/recon_endings.py)
    "QUARANTINED": N_("held: new bill layout"),
    "no run yet": N_("not reconciled yet"),
}
VERDICTS = {  # the ledger day's three-way verdict (domain/fundflow.py VERDICTS)
    "AGREES": N_("agrees"),
    "DIFFERS": N_("differs"),
    "DONE": N_("done"),
    "PENDING": N_("waiting for the money"),
    "NOT_CHECKED": N_("not checked yet"),
}
DIFF_STATUS = {"OPEN": N_("open"), "RESOLVED": N_("resolved"), "IGNORED": N_("ignored")}
REFUND_STATUSES = {
    "MANUAL": N_("with a person"),
    "PENDING": N_("sent"),
    "ACCEPTED": N_("accepted by the channel"),
    "SUCCESS": N_("refunded"),
    "ABNORMAL": N_("abnormal"),
    "FAIL": N_("failed"),
    "CLOSED": N_("closed"),
}
ORDER_STATUSES = {
    "CREATED": N_("created"),
    "NOTPAY": N_("not paid"),
    "PAID": N_("paid"),
    "SUCCESS": N_("paid"),
    "CLOSED": N_("closed"),
    "REFUND": N_("refunded"),
    "REFUNDED": N_("refunded"),
    "PARTIALLY_REFUNDED": N_("partly refunded"),
}
BUCKETS = {
    "< 1 h": N_("under 1 hour"),
    "1–24 h": N_("1–24 hours"),
    "1–7 d": N_("1–7 days"),
    "> 7 d": N_("over 7 days"),
}
INCIDENT_STATES = {"open": N_("open"), "escalated": N_("escalated"), "resolved": N_("resolved")}
ORIGINS = {"ours": N_("our systems"), "tenant": N_("merchant settings"), "money": N_("a money decision")}
STORY_KINDS = {  # an order story's entry kinds (service/story.py)
    "order": N_("order"),
    "poll": N_("query"),
    "queue": N_("person"),
    "refund": N_("refund"),
    "refund_report": N_("refund report"),
    "delivery": N_("notification"),
    "transition": N_("status change"),
    "ledger": N_("ledger"),
    "outbox": N_("event"),
    "webhook": N_("merchant webhook"),
    "recon": N_("reconciliation"),
}
STORY_STATES = {  # the states an order story's entries carry besides order, refund and case states
    "WAIT_PAY": N_("waiting for payment"),
    "PAY_FAILED": N_("payment failed"),
    "PREPAY_FAILED": N_("payment could not be started"),
    "RESERVED": N_("amount reserved"),
    "DUPLICATE": N_("repeated notification"),
    "ILLEGAL": N_("could not be booked"),
    "OK": N_("accepted"),
    "PAYMENT": N_("payment"),
    "REVERSAL": N_("reversal"),
    "FEE": N_("fee"),
    "FEE_RETURN": N_("fee returned"),
    "HELD": N_("held"),
    "DELIVERED": N_("delivered"),
    "OPENED": N_("opened"),
    "applied": N_("applied"),
    "waiting to be applied": N_("waiting to be applied"),
    "with a person": N_("with a person"),
    "BOOKED": N_("booked"),
    "TRANSITIONED": N_("status changed"),
    "REVOKED": N_("revoked"),
    "REFUNDING": N_("being refunded"),
}
# An order story's titles (service/story*.py `entry`) name codes in their parameters; these read them.
TRADE_STATES = {  # a channel's word on a payment in a callback or a poll answer (WeChat Pay, Alipay)
    "SUCCESS": N_("paid"),
    "NOTPAY": N_("not paid"),
    "CLOSED": N_("closed"),
    "REFUND": N_("refunded"),
    "USERPAYING": N_("customer paying"),
    "PAYERROR": N_("payment failed"),
    "REVOKED": N_("revoked"),
    "WAIT_BUYER_PAY": N_("waiting for payment"),
    "TRADE_SUCCESS": N_("paid"),
    "TRADE_FINISHED": N_("paid"),
    "TRADE_CLOSED": N_("closed"),
}
ORDER_EVENTS = {  # domain/orders.py Event: what moved an order
    "PAY": N_("pay"),
    "CLOSE": N_("close"),
    "REVOKE": N_("revoke"),
    "PAY_ERROR": N_("payment error"),
}
SOURCES = {  # how a row came in: the channel's callback, the poller's query, recon's recovery of a lost payment
    "notify": N_("notification"),
    "query": N_("poll answer"),
    "recon": N_("recon recovery"),
}
HANDLED = {  # a stored callback's handled flag (store/tables.py RawStore)
    "0": N_("waiting to be applied"),
    "1": N_("applied"),
    "2": N_("with a person"),
}
LEDGER_KINDS = {
    "PAYMENT": N_("payment"),
    "REFUND": N_("refund"),
    "REVERSAL": N_("reversal"),
    "FEE": N_("fee"),
    "FEE_RETURN": N_("fee returned"),
    "SETTLEMENT": N_("settlement"),  # a fund-flow difference's item (domain/merchant_day.py FUND_ITEMS)
}
EVENT_TYPES = {  # domain/events.py: what Tally tells the merchant's systems
    "OrderPaid": N_("order paid"),
    "OrderClosed": N_("order closed"),
    "RefundSucceeded": N_("refund succeeded"),
    "RefundFailed": N_("refund failed"),
}
WEBHOOK_STATUSES = {  # store/webhooks.py: one event's delivery to one endpoint
    "PENDING": N_("waiting to be sent"),
    "DELIVERED": N_("delivered"),
    "FAILED": N_("failed"),
    "HELD": N_("held"),
}
TASK_REASONS = {  # domain/orders.py transit: why money that came in has to go back (R17)
    "money-in: double payment": N_("paid twice"),
    "money-in: paid while CLOSED": N_("paid after the order closed"),
    "money-in: paid while PAY_FAILED": N_("paid after the payment failed"),
}
STORY_SUBJECTS = {  # what a person's action in an order story was on (service/story_entries.py history_entry)
    "order": N_("order"),
    "delivery": N_("notification"),
    "refund": N_("refund"),
    "refund task": N_("refund task"),
    "recon diff": N_("recon difference"),
}
STORY_PARAMS = {  # a story title's parameter → the Words method that reads it; `*_cent` is money, others as stored
    "channel": "channel",
    "trade_state": "trade_state",
    "poll_last": "trade_state",
    "from_status": "any_status",
    "to_status": "any_status",
    "outcome": "any_status",
    "task_status": "any_status",
    "event": "order_event",
    "source": "source",
    "handled": "handled",
    "refund_status": "refund_status",
    "ledger_kind": "ledger_kind",
    "diff_item": "ledger_kind",
    "day_state": "run",
    "diff_class": "diff_title",
    "diff_status": "diff_status",
    "action": "history_action",
    "subject": "story_subject",
    "event_type": "event_type",
    "webhook_status": "webhook_status",
    "task_reason": "task_reason",
}
AUDIT_FINDINGS = {  # service/books.py finding_code: the first thing a day's verify found, in plain words
    "not-sealed": N_("The day has no seal."),
    "seal-signature": N_("The seal itself was changed: its signature no longer matches."),
    "evidence": N_("A kept callback body or bill is missing or changed."),
    "raw-body": N_("A callback body as received was changed after the seal."),
    "history-line": N_("A line of a case's or an order's history was deleted."),
    "row-changed": N_("A booked value (an amount, a status) was changed after it was recorded."),
    "row-missing": N_("A ledger entry or status change the journal recorded was deleted."),
    "after-seal": N_("Journal records were added, removed or rewritten after the seal."),
    "record": N_("A journal record was changed or removed."),
}
MODES = {"direct": N_("direct merchant"), "partner": N_("sub-merchant of a service provider")}
ENDPOINT_STATUSES = {"ACTIVE": N_("active"), "PAUSED": N_("paused"), "REMOVED": N_("removed")}


class Words:
    """The tables above and the formats, in one speaker's language."""

    def __init__(self, speaker: Speaker):
        self.s = speaker
        self._ = speaker.gettext

    # ---- codes → words

    def reason(self, kind: str) -> Reason:
        found = KIND_REASONS.get(kind) or UNKNOWN_KIND
        return Reason(self._(found.title), self._(found.reason), self._(found.todo))

    def diff(self, cls: str) -> Reason:
        found = DIFF_REASONS.get(cls)
        if found is None:
            return self.reason("recon-diff")
        return Reason(self._(found.title), self._(found.reason), self._(found.todo))

    def stuck(self) -> Reason:
        return Reason(self._(STUCK.title), self._(STUCK.reason), self._(STUCK.todo))

    def case(self, kind: str, cls: str = "") -> Reason:
        """An item's sentence: a recon difference by its class, anything else by its kind."""
        return self.diff(cls) if kind == "recon-diff" and cls else self.reason(kind)

    def _table(self, table: dict[str, str], code: Any) -> str:
        text = "" if code is None else str(code)
        return self._(table[text]) if text in table else text

    def state(self, code: Any) -> str:
        return self._table(STATES, code)

    def action(self, code: Any) -> str:
        return self._table(ACTIONS, code)

    def code(self, code: Any) -> str:
        return self._table(CODES, code)

    def channel(self, code: Any) -> str:
        """A channel as people read it: its label (channels/<name>/channel.py), translated; any spelling."""
        from tally.channels import registry

        text = "" if code is None else str(code)
        found = registry.find(lambda c: text in {c.name, c.stored, c.route, c.order_word, c.merchant_kind})
        return self._(found.label) if found else text

    def run(self, code: Any) -> str:
        return self._table(RUN_STATUSES, code)

    def verdict(self, code: Any) -> str:
        return self._table(VERDICTS, code)

    def diff_status(self, code: Any) -> str:
        return self._table(DIFF_STATUS, code)

    def refund_status(self, code: Any) -> str:
        return self._table(REFUND_STATUSES, code)

    def order_status(self, code: Any) -> str:
        return self._table(ORDER_STATUSES, code)

    def bucket(self, code: Any) -> str:
        return self._table(BUCKETS, code)

    def incident_state(self, code: Any) -> str:
        return self._table(INCIDENT_STATES, code)

    def origin(self, code: Any) -> str:
        return self._table(ORIGINS, code)

    def story_kind(self, code: Any) -> str:
        return self._table(STORY_KINDS, code)

    def audit_finding(self, code: Any) -> str:
        return self._table(AUDIT_FINDINGS, code)

    def mode(self, code: Any) -> str:
        return self._table(MODES, code)

    def endpoint_status(self, code: Any) -> str:
        return self._table(ENDPOINT_STATUSES, code)

    def trade_state(self, code: Any) -> str:
        return self._table(TRADE_STATES, code)

    def order_event(self, code: Any) -> str:
        return self._table(ORDER_EVENTS, code)

    def source(self, code: Any) -> str:
        return self._table(SOURCES, code)

    def handled(self, code: Any) -> str:
        return self._table(HANDLED, code)

    def ledger_kind(self, code: Any) -> str:
        return self._table(LEDGER_KINDS, code)

    def event_type(self, code: Any) -> str:
        return self._table(EVENT_TYPES, code)

    def webhook_status(self, code: Any) -> str:
        return self._table(WEBHOOK_STATUSES, code)

    def task_reason(self, code: Any) -> str:
        return self._table(TASK_REASONS, code)

    def story_subject(self, code: Any) -> str:
        return self._table(STORY_SUBJECTS, code)

    def diff_title(self, cls: Any) -> str:
        """A difference class's short name; a class no table knows reads as itself."""
        found = DIFF_REASONS.get(str(cls))
        return self._(found.title) if found else str(cls)

    def history_action(self, code: Any) -> str:
        """What a person's history line did: a closing code (CODES), an action or a state, or an action with its
        code ("resolve: refunded-by-hand", service/manual.py)."""
        action, colon, done = str(code).partition(": ")
        if colon and done in CODES:
            return self._("%(action)s: %(code)s") % {
                "action": self.any_status(action),
                "code": self.code(done),
            }
        return self.code(code) if str(code) in CODES else self.any_status(code)

    def any_status(self, code: Any) -> str:
        """A status of unknown origin (an order story's entry): the first table that knows it, else the code."""
        text = "" if code is None else str(code)
        for table in (ORDER_STATUSES, STORY_STATES, REFUND_STATUSES, STATES, RUN_STATUSES, ACTIONS):
            if text in table:
                return self._(table[text])
        return text

    def story_title(self, entry: dict[str, Any]) -> str:
        """An order story's line in this language: its template (`says.text`, service/story_entries.py) translated,
        then filled: `*_cent` as ¥1,234.56, codes through STORY_PARAMS, anything else as stored."""
        says = entry.get("says") or {}
        template, params = says.get("text"), says.get("params") or {}
        if not template:
            return str(entry.get("title") or "")
        return self._(template) % {name: self.story_value(name, v) for name, v in params.items()}

    def story_value(self, name: str, value: Any) -> str:
        """One parameter of a story title as people read it; a value no table knows reads as itself."""
        if value is None or value == "":
            return "-"
        if name.endswith("_cent"):
            whole = isinstance(value, int) and not isinstance(value, bool)
            return self.money(value) if whole else str(value)
        method = STORY_PARAMS.get(name)
        return getattr(self, method)(value) if method else str(value)

    # ---- formats

    def money_text(self, yuan: Any) -> str:
        """An amount already written in yuan ("1234.56", as a service's report carries it) as ¥1,234.56."""
        from decimal import Decimal, InvalidOperation

        if yuan is None or yuan == "":
            return ""
        try:
            cents = Decimal(str(yuan)) * 100
        except InvalidOperation:
            return str(yuan)
        return self.money(int(cents))

    def money(self, cents: Any) -> str:
        """¥1,234.56 (domain/money.format_cents, grouped); empty for an amount not known."""
        return money(cents)

    def age(self, seconds: Any) -> str:
        """One unit style: minutes under an hour, hours and minutes under a day, then days and hours."""
        s = max(0, int(seconds or 0))
        if s < 3600:
            return self._("%(m)d min") % {"m": s // 60}
        if s < 86400:
            return self._("%(h)d h %(m)d min") % {"h": s // 3600, "m": s % 3600 // 60}
        return self._("%(d)d d %(h)d h") % {"d": s // 86400, "h": s % 86400 // 3600}

    def landing(self, figures: dict[str, Any] | None) -> str:
        """Where a merchant-day's money is (domain/merchant_day.py landing), in words with amounts."""
        if not figures:
            return self._("nothing booked")
        values = {
            "expected": self.money(figures.get("expected_cent")),
            "landed": self.money(figures.get("landed_cent")),
            "due": figures.get("due") or "",
            "short": self.money(abs(int(figures.get("short_cent") or 0))),
        }
        landing, short = figures.get("landing"), int(figures.get("short_cent") or 0)
        if landing == "IN_TRANSIT":
            return self._("expected %(expected)s, on its way, due %(due)s") % values
        if figures.get("landed_cent") is None:
            if landing == "MISSING":
                return self._("expected %(expected)s, not arrived (due %(due)s): missing") % values
            return self._("expected %(expected)s, arrival not checked yet") % values
        if short > 0:
            return self._("expected %(expected)s, arrived %(landed)s, short by %(short)s") % values
        if short < 0:
            return self._("expected %(expected)s, arrived %(landed)s, over by %(short)s") % values
        return self._("expected %(expected)s, arrived %(landed)s") % values


def money(cents: Any) -> str:
    """An amount as every console page writes it: ¥1,234.56, -¥5.01; empty for an amount not known."""
    if cents is None or cents == "":
        return ""
    amount = int(cents)
    return ("-" if amount < 0 else "") + "¥" + format_cents(abs(amount), grouped=True)


def cst(value: Any) -> str:
    """A stored time (ISO UTC, or epoch seconds) as people in China read it: 2026-12-01 17:05:09."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value, CHINA).strftime("%Y-%m-%d %H:%M:%S")
    if not isinstance(value, str) or not value:
        return ""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value if not value.isdigit() else cst(int(value))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(CHINA).strftime("%Y-%m-%d %H:%M:%S")
