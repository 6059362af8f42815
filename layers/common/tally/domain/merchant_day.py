"""One merchant's day, one arithmetic (R49): what every view of a merchant-day reads. Pure.

`merchant_day(channel, mchid, bill_date, entries, …)` adds the day's ledger entries (PAYMENT, REFUND, FEE,
REVERSAL) once, and `tally ledger day`, its CSV, the statement, the console's Ledger, Recon and Morning pages
and the order story all show its figures; none adds entries of its own (docs/finance.md).

The figures (integer cents):
- booked: payments at their settlement figure (R43: what the channel settles, WeChat 应结订单金额, Alipay 商家实收;
  an entry booked before R43 at `amount_cent`), refunds at their settlement refund, a person's reversals (R36)
  signed, on the payment or refund they correct;
- fees: one sign convention everywhere: a fee is a cost, written positive. `fee_cent` is what the channel
  charged on the day's payments, `fee_returned_cent` what it gave back with the day's refunds, whatever sign a
  channel's bill writes them with (a FEE entry says which row it was charged on: `of`). Before a recon run has
  read the day's bill the fees are unknown (`fees_known` False) and the net leaves them out, saying so;
- net = payments − refunds + reversals − fees + fees given back: the money that should land for the day;
- expected to land: the net, due on the fund-flow day the merchant's settlement lag puts the day's money on
  (domain/fundflow.SettlementLag.due);
- landed: what the channel's fund flow moved for the day (the fund-flow check's figures, lag applied), None
  until it has been read;
- short by: expected − landed (negative: more landed than expected).

Landing (`landing`): LANDED (short by 0), SHORT (landed, not all of it), IN_TRANSIT (not landed yet, inside the
lag: an expected amount with the day it is due), MISSING (not landed and the fund flow of its due day should be
in: past the lag), NOT_CHECKED (no fund flow is read for this channel).

A trade difference inside the channel's bill lag (`bill_lag`: money booked just before midnight that the
channel puts on its next bill day) is EXPECTED with the day it is due, like a settlement gap inside the
settlement lag (`settlement_gap`); either turns OPEN (missing) by itself once past its lag.

Verdict (`day_state`): the day's differences counted open and worked apart, so a day whose differences are all
worked reads as done (DONE), never as DIFFS with a count nobody can lower.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from tally.domain.clock import CHINA
from tally.domain.money import format_cents

PAYMENT, REFUND, FEE, REVERSAL = "PAYMENT", "REFUND", "FEE", "REVERSAL"

# landing: did the day's money reach the merchant's balance at the channel
LANDED = "LANDED"
SHORT = "SHORT"
IN_TRANSIT = "IN_TRANSIT"  # expected: inside the settlement lag, with the day it is due
MISSING = "MISSING"  # past the lag and not (all) there
NOT_CHECKED = "NOT_CHECKED"

# a difference's state for the person reading the day (recon_diff.handle_status OPEN vs worked)
OPEN = "OPEN"
WORKED = ("RESOLVED", "IGNORED", "AUTO_RESOLVED")


def fee_charged(entry: Mapping[str, Any]) -> bool:
    """A FEE entry charged (on a payment row) rather than given back (on a refund row); an entry without
    `of` by its sign (positive = charged)."""
    of = entry.get("of")
    return of == PAYMENT if of else int(entry["amount_cent"]) > 0


def settled_cent(entry: Mapping[str, Any]) -> int:
    """What the channel settles for a PAYMENT / REFUND entry (R43), `amount_cent` for an entry booked before."""
    field = "settlement_refund_cent" if entry.get("kind") == REFUND else "settlement_cent"
    value = entry.get(field)
    return int(value if value is not None else entry.get("amount_cent", 0))


@dataclass(frozen=True, slots=True)
class MerchantDay:
    """One merchant's and channel's bill date, as every view shows it (cents; `*_yuan` for people)."""

    channel: str
    mchid: str
    bill_date: str
    payments: int = 0
    payment_cent: int = 0  # settlement figures of the day's payments
    gross_cent: int = 0  # order amounts
    merchant_funded_cent: int = 0
    channel_funded_cent: int = 0  # the channel's and other funders' share of discounts
    unattributed_cent: int = 0
    payer_cent: int = 0
    refunds: int = 0
    refund_cent: int = 0  # settlement refunds
    reversals: int = 0
    reversal_cent: int = 0  # signed corrections a person booked (R36)
    reversal_payment_cent: int = 0  # … of which on payments (the rest on refunds)
    fee_cent: int | None = None  # charged, positive; None: not booked yet (no recon run read the bill)
    fee_returned_cent: int = 0  # given back with refunds, positive
    fee_entries: int = 0  # FEE entries the fees come from (0: the run's own total, or not booked yet)
    due: str | None = None  # the fund-flow day the day's money is due on (the settlement lag)
    landed_cent: int | None = None  # what the fund flow moved for the day, None until read
    landing: str = NOT_CHECKED
    landing_reason: str = ""

    @property
    def fees_known(self) -> bool:
        return self.fee_cent is not None

    @property
    def net_fee_cent(self) -> int:
        """Fees charged less fees given back (what the day's fees cost, positive)."""
        return (self.fee_cent or 0) - self.fee_returned_cent

    @property
    def settlement_cent(self) -> int:
        """Payments with the reversals on them (what the fund flow's settlement credit is checked against)."""
        return self.payment_cent + self.reversal_payment_cent

    @property
    def refunded_cent(self) -> int:
        """Refunds with the reversals on them (a reversal of a refund is signed as the refund it corrects)."""
        return self.refund_cent - (self.reversal_cent - self.reversal_payment_cent)

    @property
    def net_cent(self) -> int:
        return self.payment_cent - self.refund_cent + self.reversal_cent - self.net_fee_cent

    @property
    def expected_cent(self) -> int:
        return self.net_cent

    @property
    def short_cent(self) -> int | None:
        return None if self.landed_cent is None else self.expected_cent - self.landed_cent

    def landing_words(self) -> str:
        """ "expected X, landed Y, short by Z" as a person reads it."""
        expected = f"expected {format_cents(self.expected_cent)}"
        if self.landing == IN_TRANSIT:
            return f"{expected}, in transit, due {self.due}"
        if self.landing == MISSING and self.landed_cent is None:
            return f"{expected}, not landed (due {self.due}): missing"
        if self.landed_cent is None:
            return f"{expected}, landing not checked ({self.landing_reason or 'no fund flow'})"
        short = self.short_cent or 0
        words = f"{expected}, landed {format_cents(self.landed_cent)}"
        if short > 0:
            return f"{words}, short by {format_cents(short)}"
        if short < 0:
            return f"{words}, over by {format_cents(-short)}"
        return words

    def as_dict(self) -> dict[str, Any]:
        """The figures as the views and `--json` carry them: cents and yuan side by side; a figure not known
        yet is None (its `*_yuan` empty) with its status beside it, never text in a number's place."""
        out: dict[str, Any] = {
            "channel": self.channel,
            "mchid": self.mchid,
            "bill_date": self.bill_date,
            "payments": self.payments,
            "refunds": self.refunds,
            "reversals": self.reversals,
            "fee_entries": self.fee_entries,
            "fees_status": "booked" if self.fees_known else "not booked yet",
            "net_includes_fee": self.fees_known,
            "due": self.due,
            "landing": self.landing,
            "landing_reason": self.landing_reason,
            "landing_words": self.landing_words(),
        }
        for name, cents in (
            ("payment", self.payment_cent),
            ("gross", self.gross_cent),
            ("refund", self.refund_cent),
            ("reversal", self.reversal_cent),
            ("fee", self.fee_cent),
            ("fee_returned", self.fee_returned_cent),
            ("net", self.net_cent),
            ("expected", self.expected_cent),
            ("landed", self.landed_cent),
            ("short", self.short_cent),
        ):
            out[f"{name}_cent"] = cents
            out[f"{name}_yuan"] = "" if cents is None else format_cents(cents)
        return out


def merchant_day(
    channel: str,
    mchid: str,
    bill_date: str,
    entries: Iterable[Mapping[str, Any]],
    *,
    fee_fallback_cent: int | None = None,
    due: str | None = None,
    landed_cent: int | None = None,
    today: str | None = None,
    fund_flow_read: bool = True,
) -> MerchantDay:
    """The day from its ledger entries. `fee_fallback_cent`: a day reconciled before FEE entries existed (its
    run's own fee total) when there is no FEE entry; `due`: the fund-flow day the lag puts the money on;
    `landed_cent`: the fund flow's net for the day (None: not read yet); `today` (Asia/Shanghai) decides
    whether money not landed is still in transit or missing; `fund_flow_read` False: the channel has no fund
    flow (NOT_CHECKED)."""
    n = payment = gross = merchant = chan = unattributed = payer = 0
    r = refunded = 0
    fee_entries = fee = returned = 0
    reversal_rows: list[Mapping[str, Any]] = []
    kinds: dict[str, str] = {}
    for e in entries:
        kind = str(e.get("kind", PAYMENT))
        kinds[str(e.get("pk"))] = kind
        if kind == PAYMENT:
            n += 1
            amount = int(e.get("amount_cent", 0))
            payment += settled_cent(e)
            gross += int(e.get("total_cent", e.get("order_total_cent", amount)))
            merchant += int(e.get("merchant_funded_cent", 0))
            chan += int(e.get("channel_funded_cent", 0)) + int(e.get("other_funded_cent", 0))
            unattributed += int(e.get("unattributed_cent", 0))
            payer += int(e.get("payer_cent", amount))
        elif kind == REFUND:
            r += 1
            refunded += settled_cent(e)
        elif kind == FEE:  # charged on a payment row, given back on a refund row, whatever the sign (R45)
            fee_entries += 1
            cents = abs(int(e["amount_cent"]))
            if fee_charged(e):
                fee += cents
            else:
                returned += cents
        else:
            reversal_rows.append(e)
    reversal = on_payments = 0
    for e in reversal_rows:  # a person's correction of a recon difference (R36), signed as what it corrects
        cents = int(e["amount_cent"])
        target = kinds.get(str(e.get("reverses"))) or (REFUND if e.get("refund_no") else PAYMENT)
        if target == REFUND:
            reversal -= cents  # a refund reversed by +x moves x more out: the net loses it
        else:
            reversal += cents
            on_payments += cents
    fee_cent: int | None = fee if fee_entries else fee_fallback_cent
    day = MerchantDay(
        channel,
        mchid,
        bill_date,
        n,
        payment,
        gross,
        merchant,
        chan,
        unattributed,
        payer,
        r,
        refunded,
        len(reversal_rows),
        reversal,
        on_payments,
        fee_cent,
        returned if fee_entries else 0,
        fee_entries,
        due,
        landed_cent,
    )
    landing, reason = landing_of(day, today, fund_flow_read)
    return _replace(day, landing=landing, landing_reason=reason)


def landing_of(day: MerchantDay, today: str | None, fund_flow_read: bool) -> tuple[str, str]:
    """Where the day's money is: landed (all of it or short), in transit (inside the lag) or missing (past it:
    the fund flow of the due day is published the morning after, so missing from the day after that)."""
    if day.landed_cent is not None:
        if day.short_cent == 0:
            return LANDED, "the fund flow shows the day's net"
        return SHORT, f"the fund flow of {day.due} differs from the day's net" if day.due else "short"
    if not fund_flow_read:
        return NOT_CHECKED, "no fund flow is read for this channel"
    if day.due is None or today is None:
        return NOT_CHECKED, "settlement lag unknown"
    if today <= published(day.due):
        return (
            IN_TRANSIT,
            f"due on {day.due} (the settlement lag); its fund flow is read on {published(day.due)}",
        )
    return MISSING, f"due on {day.due}, and the fund flow of that day shows nothing for it yet"


def published(day: str) -> str:
    """The morning a channel's bill of `day` is out (T+1)."""
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()


def _replace(day: MerchantDay, **changes: Any) -> MerchantDay:
    from dataclasses import replace

    return replace(day, **changes)


# ---------------------------------------------------------------- the day's verdict, from its differences


@dataclass(frozen=True, slots=True)
class DiffCount:
    """A day's differences: open (a person must act), worked (resolved / ignored / healed), expected (inside
    the lag, not a person's yet; `due`: the last day one of them is due on, when they say)."""

    open: int = 0
    worked: int = 0
    expected: int = 0
    due: str | None = None

    @property
    def total(self) -> int:
        return self.open + self.worked + self.expected

    def words(self) -> str:
        parts = [f"{self.worked} resolved", f"{self.open} open"]
        if self.expected:
            parts.append(f"{self.expected} expected" + (f" (in transit, due {self.due})" if self.due else ""))
        return ", ".join(parts)


EXPECTED = "EXPECTED"  # recon_diff.handle_status of a difference inside the lag (in transit, not a person's)


def count_diffs(diffs: Iterable[Mapping[str, Any]]) -> DiffCount:
    o = w = x = 0
    due: list[str] = []
    for d in diffs:
        status = d.get("handle_status")
        if status == OPEN:
            o += 1
        elif status == EXPECTED:
            x += 1
            if d.get("due") or d.get("due_next"):
                due.append(str(d.get("due") or d.get("due_next")))
        else:
            w += 1
    return DiffCount(o, w, x, max(due) if due else None)


# the recon run statuses as a person reads the day
DONE = "DONE"  # the run found differences and every one has been worked: done, green


def day_state(status: str | None, diffs: DiffCount) -> tuple[str, str]:
    """(state, words) of a reconciled day from its latest run's status and its differences as they are now: a
    run that ended DIFFS whose differences are all worked is DONE ("DIFFS: 25 resolved, 0 open"); one with open
    differences stays DIFFS, the open ones counted apart from the worked ones."""
    if status is None:
        return "no run yet", ""
    words = f"DIFFS: {diffs.words()}" if diffs.total or status == "DIFFS" else ""
    if diffs.open:
        return "DIFFS", words
    if diffs.expected:
        return EXPECTED, words  # money in transit: nobody's work yet, not done either
    if status == "DIFFS":
        return DONE, words
    return status, words


# ---------------------------------------------------------------- a settlement difference a person can act on

FUND_ITEMS = ("SETTLEMENT", "REFUND", "FEE", "FEE_RETURN")  # the fund-flow figures a difference can be in
# what closes a settlement gap: the money came after all, the channel adjusted it, the channel confirmed the
# shortfall (finance books the loss), our ledger was wrong (a reversal follows), or a note says what
SETTLEMENT_CODES = ("landed-late", "channel-adjusted", "channel-confirmed-short", "ledger-corrected", "other")


def next_day(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()


def settlement_gap(
    item: str, local_cent: int, channel_cent: int, ledger_day: str, fund_day: str, today: str
) -> dict[str, Any]:
    """The fields a settlement difference (fund flow ≠ ledger, R45) carries for the person who works it: the
    gap (the money short: positive = less landed than booked, negative = more), both days, whether it is still EXPECTED
    (money on the day boundary lands on the next fund-flow day, whose bill is out the morning after: until
    then it is in transit, not a person's) or missing (OPEN), the next step and the codes that close it."""
    # money short: a credit (settlement, fees given back) that landed less than booked, or a debit (refund,
    # fee charged) that took more than booked
    gap = (channel_cent - local_cent) if item in ("REFUND", "FEE") else (local_cent - channel_cent)
    then = next_day(fund_day)
    expected = today <= published(fund_day)
    words = "short by" if gap > 0 else "over by"
    detail = (
        f"{item.lower()}: ledger of {ledger_day} {format_cents(local_cent)}, fund flow of {fund_day} "
        f"{format_cents(channel_cent)}: {words} {format_cents(abs(gap))}"
    )
    if expected:
        step = (
            f"wait for the fund flow of {then} (read on {published(then)}): money on the day boundary lands "
            "the next day; this opens for a person then if it still differs"
        )
    else:
        step = (
            f"ask the channel about {format_cents(abs(gap))} yuan {'missing from' if gap > 0 else 'extra in'} "
            f"the fund flow of {fund_day} (ledger day {ledger_day}); check the fund flow of {then} first "
            "(money on the day boundary shows there as the opposite difference)"
        )
    return {
        "gap_cent": gap,
        "ledger_day": ledger_day,
        "fund_day": fund_day,
        "due_next": then,
        "handle_status": EXPECTED if expected else OPEN,
        "next_step": step,
        "detail": f"{detail}. Next: {step}",
        "codes": list(SETTLEMENT_CODES),
    }


# ---------------------------------------------------------------- a trade difference inside the bill lag

BILL_EDGE_S = 600  # money this close to a bill day's midnight may be on the channel's next bill day (R34)
LOCAL_ONLY = "LOCAL_ONLY"


def bill_lag(
    cls: str, item: str, bill_date: str, at: str | None, *, due_bill_read: bool
) -> dict[str, Any] | None:
    """A trade-bill difference the channel's bill lag explains, or None (a difference for a person at once).

    Money we booked in the last BILL_EDGE_S seconds of its day (Asia/Shanghai) that the channel's bill of that
    day does not list (LOCAL_ONLY) may be on the channel's next bill day: its clock and its day cut are its
    own. Until that bill has been read (`due_bill_read` False: the next day's reconciliation has not looked, and
    its bill is not overdue) it is EXPECTED, in transit with the day it is due; the next day's run closes it
    when its bill lists the money, or it turns missing: OPEN, for a person, with what to do."""
    if cls != LOCAL_ONLY or item not in (PAYMENT, REFUND):
        return None
    when = _china_instant(at)
    if when is None:
        return None
    day = date.fromisoformat(bill_date)
    midnight = datetime.combine(day + timedelta(days=1), time(), CHINA)
    if not 0 < (midnight - when).total_seconds() <= BILL_EDGE_S:
        return None
    due = next_day(bill_date)
    clock = when.strftime("%H:%M:%S")
    if not due_bill_read:
        step = (
            f"wait for the channel's bill of {due} (out on {published(due)}): money booked at {clock}, just "
            "before midnight, may be on the channel's next bill day; this opens for a person then if that "
            "bill does not list it either"
        )
    else:
        step = (
            f"not in the channel's bill of {bill_date} nor of {due}: find it on the merchant platform; if the "
            "channel never took it, resolve with --reverse (the reversing entry), else ask the channel"
        )
    return {
        "handle_status": OPEN if due_bill_read else EXPECTED,
        "due": due,
        "local_time": at,
        "next_step": step,
    }


def _china_instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=CHINA)).astimezone(CHINA)
