"""Reconciliation, pure: bill items, summary guards (R31–R33) and matching against the ledger (R34–R36).

Nothing here does I/O. The channel parsers (tally.channels.bills_*) turn a bill into `BillItem`s plus a
`BillTotals`; the service runs `check_guards` first and only then `Matcher` (guards before matching).

Money is integer cents; WeChat's fee (手续费) has 5 decimals, so fees are kept exactly in units of
1e-5 yuan (`fee_e5`, a thousandth of a fen) and only rounded (half up) where a bill states a total
with fewer decimals (see `round_units`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from tally.domain.clock import CHINA
from tally.domain.money import yuan_text

PAYMENT = "PAYMENT"
REFUND = "REFUND"
FEE = "FEE"
REVERSAL = "REVERSAL"

# diff classes (R36)
CHANNEL_ONLY = "CHANNEL_ONLY"  # the channel has it, we do not (the classic 掉单)
LOCAL_ONLY = "LOCAL_ONLY"  # we booked it, the channel's bill does not have it
AMOUNT_DIFFERS = "AMOUNT_DIFFERS"
STATUS_DIFFERS = "STATUS_DIFFERS"
SETTLEMENT_DIFFERS = (
    "SETTLEMENT_DIFFERS"  # R45: a day's money did not land as booked (domain/fundflow.check_day)
)
DIFF_CLASSES = (CHANNEL_ONLY, LOCAL_ONLY, AMOUNT_DIFFERS, STATUS_DIFFERS, SETTLEMENT_DIFFERS)

# handle statuses of a diff
OPEN, RESOLVED, IGNORED = "OPEN", "RESOLVED", "IGNORED"

# guard verdicts
PASSED = "PASSED"
QUIET = "QUIET"  # summary says zero and the bill has zero rows (R31: a quiet day)
EMPTY_BILL = "EMPTY_BILL"  # R31
NO_SUMMARY = "NO_SUMMARY"  # R32: a bill without its totals cannot be checked
SUMMARY_MISMATCH = "SUMMARY_MISMATCH"  # R32
VOLUME_DROP = "VOLUME_DROP"  # R33


class BillParseError(ValueError):
    """The file is not a bill we know (HTML error page, unknown header, undecodable, broken row)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


# ---------------------------------------------------------------- exact amounts


def to_units(text: str, places: int) -> int:
    """Exact decimal string → integer units of 10^-places ("0.01000", 5 → 1000). Never a float.

    Accepts an optional leading "-" and at most `places` decimals; anything else raises ValueError.
    Same results as tally.domain.money.yuan_to_cents for places=2 (a test proves it), but fast enough
    for a million-row bill.
    """
    s = text.strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:]
    whole, dot, frac = s.partition(".")
    if (
        not (whole.isascii() and whole.isdigit())
        or (dot and not (frac.isascii() and frac.isdigit()))
        or len(frac) > places
    ):
        raise ValueError(f"not an amount with at most {places} decimals: {text!r}")
    value = int(whole) * 10**places + (int(frac) * 10 ** (places - len(frac)) if frac else 0)
    return -value if negative else value


def round_units(value: int, from_places: int, to_places: int) -> int:
    """Round half up (away from zero), e.g. fee_e5 → cents: round_units(1500, 5, 2) == 2."""
    if to_places >= from_places:
        return value * 10 ** (to_places - from_places)
    step = 10 ** (from_places - to_places)
    q, r = divmod(abs(value), step)
    q += 1 if 2 * r >= step else 0
    return -q if value < 0 else q


def decimals_of(text: str) -> int:
    return len(text.strip().partition(".")[2])


# ---------------------------------------------------------------- what a bill says


@dataclass(slots=True)
class BillItem:
    """One detail row of a channel bill, in our terms. `key` is the ledger pk it should match."""

    key: str
    kind: str  # PAYMENT | REFUND
    amount_cent: int  # positive: money received (payment) or paid back (refund)
    status: str  # the bill's own word: SUCCESS, REVOKED, PROCESSING …
    time: str  # channel time, Beijing, "YYYY-MM-DD HH:MM:SS"
    transaction_id: str
    out_trade_no: str
    refund_no: str = ""
    fee_e5: int = 0  # the row's fee in 1e-5 yuan (signed as the bill writes it)
    expected_fee_e5: int | None = None  # what the row's own rate says the fee should be, if known


@dataclass
class SummaryCheck:
    """One figure the bill states about itself, against what we parsed (R32)."""

    name: str
    stated: int
    parsed: int
    unit: str = "cent"

    @property
    def ok(self) -> bool:
        return self.stated == self.parsed


@dataclass
class BillTotals:
    """What parsing found, plus the bill's own summary (None = the bill carries none)."""

    channel: str
    layout: str
    rows: int = 0
    payments: int = 0
    refunds: int = 0
    payment_cent: int = 0
    refund_cent: int = 0
    fee_e5: int = 0
    stated_rows: int | None = None
    checks: list[SummaryCheck] = field(default_factory=list)

    def add(self, item: BillItem) -> None:
        self.rows += 1
        self.fee_e5 += item.fee_e5
        if item.kind == PAYMENT:
            self.payments += 1
            self.payment_cent += item.amount_cent
        else:
            self.refunds += 1
            self.refund_cent += item.amount_cent

    def as_dict(self) -> dict:
        return {
            "layout": self.layout,
            "rows": self.rows,
            "payments": self.payments,
            "refunds": self.refunds,
            "payment_cent": self.payment_cent,
            "refund_cent": self.refund_cent,
            "fee_e5": self.fee_e5,
            "stated_rows": self.stated_rows,
            "checks": [
                {"name": c.name, "stated": c.stated, "parsed": c.parsed, "unit": c.unit, "ok": c.ok}
                for c in self.checks
            ],
        }


# Set by the partitioned path (service/recon_partition.py) around one parse: called with every BillIndex built
# in this context, so the parser's own index can be drained into partition files while the parser fills it.
INDEX_WATCHER: ContextVar[Callable[[BillIndex], None] | None] = ContextVar("INDEX_WATCHER", default=None)


class BillIndex:
    """What matching needs of every bill row, compact (one parse pass builds it with the totals; R31–R33
    guards run on the totals before anything is matched): the ledger key, the amount in cents, a flag byte,
    where the row starts in the file (byte offset), so the few rows that differ are re-read in full, and the
    row's fee in e-5 yuan as the bill writes it (`fees`: what its FEE entry books, R43, without a second pass).

    About 110 bytes a row (a million rows ≈ 110 MB) instead of a BillItem's ~500.
    """

    REFUND = 1  # the row is a refund (else a payment)
    SUCCESS = 2  # the bill's status word is SUCCESS
    FEE_OK = 4  # the row's fee equals what its own rate says (or fees are not checked)
    CLEAN = SUCCESS | FEE_OK

    __slots__ = ("keys", "amounts", "flags", "where", "fees")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.amounts = array("q")
        self.flags = bytearray()
        self.where = array("q")
        self.fees = array("q")  # fee_e5, signed (a fee given back on a refund row is negative)
        watcher = INDEX_WATCHER.get()
        if watcher is not None:  # the partitioned path drains a parser's index while it grows
            watcher(self)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, item: BillItem, where: int) -> None:
        """The general path (parsers that build a BillItem per row); the WeChat parser fills the arrays itself."""
        fee_ok = item.expected_fee_e5 is None or item.expected_fee_e5 == item.fee_e5
        self.keys.append(item.key)
        self.amounts.append(item.amount_cent)
        self.flags.append(
            (self.REFUND if item.kind == REFUND else 0)
            | (self.SUCCESS if item.status == "SUCCESS" else 0)
            | (self.FEE_OK if fee_ok else 0)
        )
        self.where.append(where)
        self.fees.append(item.fee_e5)


# ---------------------------------------------------------------- guards (R31–R33)


@dataclass(frozen=True)
class GuardVerdict:
    code: str  # PASSED | QUIET | EMPTY_BILL | NO_SUMMARY | SUMMARY_MISMATCH | VOLUME_DROP
    reason: str

    @property
    def blocked(self) -> bool:
        return self.code not in (PASSED, QUIET)


def check_guards(
    totals: BillTotals,
    *,
    previous_rows: int | None = None,
    min_ratio: float = 0.10,
    min_previous_rows: int = 10,
    confirmed: bool = False,
) -> GuardVerdict:
    """Run before any matching. Blocks an empty bill whose summary says otherwise (R31), a bill whose
    parsed count/amounts differ from its summary (R32) and a volume drop below `min_ratio` of the
    previous day's rows (R33) unless a person confirmed this day."""
    if totals.stated_rows is None:
        return GuardVerdict(NO_SUMMARY, "the bill has no summary totals to check against (R32)")
    if totals.rows == 0 and totals.stated_rows > 0:
        return GuardVerdict(EMPTY_BILL, f"zero rows parsed but the summary says {totals.stated_rows} (R31)")
    wrong = [c for c in totals.checks if not c.ok]
    if wrong:
        detail = "; ".join(f"{c.name}: summary {c.stated} != parsed {c.parsed} ({c.unit})" for c in wrong)
        return GuardVerdict(SUMMARY_MISMATCH, f"parsed totals differ from the bill's summary (R32): {detail}")
    if (
        previous_rows is not None
        and previous_rows >= min_previous_rows
        and not confirmed
        and totals.rows * 1.0 < previous_rows * min_ratio
    ):
        return GuardVerdict(
            VOLUME_DROP,
            f"{totals.rows} rows vs {previous_rows} the previous day: below "
            f"{min_ratio:.0%}; blocked until a person confirms (R33)",
        )
    if totals.rows == 0:
        return GuardVerdict(QUIET, "the summary says zero and the bill has zero rows: a quiet day (R31)")
    return GuardVerdict(PASSED, "counts and amounts equal the bill's summary")


# ---------------------------------------------------------------- matching (R34–R36)


def match_key(pk: str, mchid: str | None) -> str:
    """The key a bill row names (`channel#id`) for a ledger entry's pk. Entries are stored scoped per
    merchant, `channel#mchid#id` (issue #15: two tenants' numbers never share a key); an entry booked before
    that is `channel#id` already. A recon run is one merchant's, so `channel#id` is unique within it."""
    channel, _, rest = pk.partition("#")
    if mchid and rest.startswith(f"{mchid}#"):
        return f"{channel}#{rest[len(mchid) + 1 :]}"
    return pk


def ledger_pks(key: str, mchid: str) -> tuple[str, str]:
    """A bill key `channel#id` → the ledger pks it may be stored under: scoped first, then pre-#15."""
    channel, _, ident = key.partition("#")
    return f"{channel}#{mchid}#{ident}", key


@dataclass(slots=True)
class LocalEntry:
    """A ledger entry as matching sees it (reversals already folded into `amount_cent`). `key` is the bill's
    key (`match_key`), `pk` the entry's own key in the ledger (what a reversal names)."""

    key: str
    kind: str  # PAYMENT | REFUND
    amount_cent: int
    bill_date: str = ""
    transaction_id: str = ""
    out_trade_no: str = ""
    refund_no: str = ""
    pk: str = ""
    at: str = ""  # when the money succeeded (the entry's success_time): the bill lag reads it (merchant_day)


SETTLED_FIELD = {PAYMENT: "settlement_cent", REFUND: "settlement_refund_cent"}  # R43, store/payments.py
LEGACY_COUNTS = ("legacy_payments", "legacy_refunds", "settlement_unknown")


def matched_cent(row: Mapping[str, Any], counts: dict[str, int] | None = None) -> int:
    """The amount recon matches for one PAYMENT / REFUND entry (R43): what the channel settles
    (`settlement_cent` / `settlement_refund_cent`), the figure WeChat's 应结订单金额 and Alipay's 商家实收 carry.
    An entry booked before R43 (or booked UNKNOWN) has none: it is matched on `amount_cent`, explicitly, and
    counted in `counts` (legacy_payments / legacy_refunds / settlement_unknown) so the run says why."""
    kind = row.get("kind", PAYMENT)
    settled = row.get(SETTLED_FIELD.get(kind, ""))
    if settled is not None:
        return int(settled)
    if counts is not None:
        name = (
            "settlement_unknown"
            if row.get("settlement_state") == "UNKNOWN"
            else ("legacy_refunds" if kind == REFUND else "legacy_payments")
        )
        counts[name] = counts.get(name, 0) + 1
    return int(row["amount_cent"])


def fold_ledger(entries: Iterable[dict], counts: dict[str, int] | None = None) -> dict[str, LocalEntry]:
    """Ledger rows of one bill_date → {pk: LocalEntry} at their settlement amounts (`matched_cent`, R43).
    REVERSAL entries (signed, `reverses` = the pk they correct) are added to their target; an entry reversed
    to zero counts as never booked. FEE entries are not matched here. Keyed by the bill key (`match_key`)."""
    local: dict[str, LocalEntry] = {}  # by ledger pk until the reversals are folded
    reversals: list[dict] = []
    for row in entries:
        kind = row.get("kind", PAYMENT)
        if kind == REVERSAL:
            reversals.append(row)
            continue
        if kind not in (PAYMENT, REFUND):
            continue
        local[row["pk"]] = local_entry(row, counts)
    for row in reversals:
        target = local.get(row.get("reverses", ""))
        if target is not None:
            target.amount_cent += int(row["amount_cent"])
    return {e.key: e for e in local.values() if e.amount_cent != 0}


def local_entry(row: dict, counts: dict[str, int] | None = None) -> LocalEntry:
    return LocalEntry(
        match_key(row["pk"], row.get("mchid")),
        row.get("kind", PAYMENT),
        matched_cent(row, counts),  # the settlement amount (R43)
        row.get("bill_date", ""),
        row.get("transaction_id", ""),
        row.get("out_trade_no", ""),
        row.get("refund_no", ""),
        row["pk"],
        str(row.get("success_time") or ""),
    )


def fee_entry_pk(key: str, mchid: str) -> str:
    """A FEE ledger entry's key: the bill row's own key (`BillItem.key`, `channel#id`: WeChat 微信订单号 / 商户退款单号,
    Alipay 支付宝交易号 / 退款请求号) scoped by merchant as every entry is since issue #15, `fee#{channel}#{mchid}#{id}`:
    a re-run of the day finds the entry it booked, and two merchants' refund numbers never share one. Entries
    booked before were `fee#{channel}#{id}` (`legacy_fee_pk`); the day's Query finds those too (FeeBook)."""
    channel, _, ident = key.partition("#")
    return f"fee#{channel}#{mchid}#{ident}"


def legacy_fee_pk(key: str) -> str:
    return f"fee#{key}"


def fee_cent(fee_e5: int) -> int:
    """The fee a bill row charges (positive) or gives back (negative), rounded half up to the fen as charged."""
    return round_units(fee_e5, 5, 2)


def fee_differs(item: BillItem, pk: str, booked_cent: int) -> Diff:
    """A re-run whose bill states another fee than the one booked under `pk`: a difference for a person, never an
    overwrite of the booked entry (docs/settlement.md §6.5)."""
    return Diff(
        AMOUNT_DIFFERS,
        FEE,
        pk,  # not item.key: that is the row-rate check's FEE diff (Matcher), a different finding
        fee_cent(item.fee_e5),
        booked_cent,
        transaction_id=item.transaction_id,
        out_trade_no=item.out_trade_no,
        refund_no=item.refund_no,
        detail=f"the bill's fee {yuan_text(fee_cent(item.fee_e5))} != the booked fee {yuan_text(booked_cent)}",
    )


class _FeeCents(dict[int, int]):
    """fee_e5 → cents, each distinct fee rounded once (fees repeat a lot in a big bill); bounded."""

    def __missing__(self, fee_e5: int) -> int:
        cents = fee_cent(fee_e5)
        if len(self) < 100_000:
            self[fee_e5] = cents
        return cents


class FeeBook:
    """The FEE entries of one bill, or of one partition of it, from its `BillIndex` (no second parse pass): pure.

    `booked` is what the ledger holds already for these rows, {pk: cents} (one Query: the day's FEE entries, or
    one shard's). `new(index)` yields (pk, cents, row) for every row with a non-zero fee whose entry is not
    booked yet; a row whose fee differs from the booked entry goes to `differs` as (row, booked cents): a FEE
    AMOUNT_DIFFERS for a person, never an overwrite. A key twice in one bill is yielded twice: the conditional
    put books the first and refuses the second, which the caller then compares (`refused`)."""

    def __init__(self, mchid: str, booked: Mapping[str, int]):
        self.mchid = mchid
        self.booked = booked
        self.differs: list[tuple[int, int]] = []

    def new(self, index: BillIndex) -> Iterator[tuple[str, int, int]]:
        booked, mchid = self.booked, self.mchid
        cents_of = _FeeCents()
        head, prefix, cut = "\0", "", 0  # the channel part of the last key, its FEE prefix, its length
        for i, (key, fee) in enumerate(zip(index.keys, index.fees, strict=True)):
            if not fee:
                continue
            cents = cents_of[fee]
            if not cents:  # a fee under half a fen: nothing charged, nothing booked
                continue
            if not key.startswith(head):
                channel = key.partition("#")[0]
                head, prefix = f"{channel}#", f"fee#{channel}#{mchid}#"
                cut = len(head)
            pk = prefix + key[cut:]  # fee_entry_pk(key, mchid), inlined for a million rows
            if not booked:  # a first run of the day: nothing to compare
                yield pk, cents, i
                continue
            already = booked.get(pk)
            if already is None:
                already = booked.get("fee#" + key)  # legacy_fee_pk: booked before merchant scoping
                if already is None:
                    yield pk, cents, i
                    continue
            if already != cents:
                self.differs.append((i, already))

    def refused(self, index: BillIndex, refused: Mapping[str, int]) -> None:
        """Rows whose conditional put found the key taken (a duplicate row, a concurrent run, an entry the
        index-backed Query did not show yet), {pk: cents booked}: each compared as `new` compares the booked."""
        if not refused:
            return
        for i, (key, fee) in enumerate(zip(index.keys, index.fees, strict=True)):
            pk = fee_entry_pk(key, self.mchid)
            if pk in refused and fee_cent(fee) not in (0, refused[pk]):
                self.differs.append((i, refused[pk]))


@dataclass
class Diff:
    cls: str  # one of DIFF_CLASSES
    item: str  # PAYMENT | REFUND | FEE
    key: str
    channel_amount_cent: int | None = None
    local_amount_cent: int | None = None
    channel_status: str = ""
    local_status: str = ""
    transaction_id: str = ""
    out_trade_no: str = ""
    refund_no: str = ""
    detail: str = ""
    local_time: str = ""  # a LOCAL_ONLY entry's success time (the bill lag, domain/merchant_day.bill_lag)

    @property
    def sk(self) -> str:
        return f"{self.item}#{self.key}"


def local_only(entry: LocalEntry) -> Diff:
    """The LOCAL_ONLY difference of a ledger entry the channel's bill of its day does not list."""
    return Diff(
        LOCAL_ONLY,
        entry.kind,
        entry.key,
        None,
        entry.amount_cent,
        "",
        "BOOKED",
        entry.transaction_id,
        entry.out_trade_no,
        entry.refund_no,
        f"booked for {entry.bill_date or 'this day'}, not in the channel's bill",
        entry.at,
    )


@dataclass
class MatchStats:
    matched: int = 0
    cross_day: int = 0  # found in the ledger under another bill_date (a straggler, R34)
    pending_refunds: int = 0  # refund rows still PROCESSING at the channel, not booked yet: not a diff
    duplicates: int = 0
    by_class: dict[str, int] = field(default_factory=dict)


class Matcher:
    """Streams bill items against the day's ledger entries (R34–R36).

    `local` is consumed: what is left after the bill is local-only. `lookup(key)` may find a ledger
    entry booked under another bill_date (a payment on the day boundary) before calling it channel-only.
    """

    def __init__(
        self,
        local: dict[str, LocalEntry],
        lookup: Callable[[str], LocalEntry | None] | None = None,
        *,
        check_fees: bool = True,
    ):
        self.local = local
        self.lookup = lookup
        self.check_fees = check_fees
        self.stats = MatchStats()
        self._seen: set[str] = set()
        self.elsewhere: list[LocalEntry] = []  # entries found booked on another day (cross_day): few

    def match(self, items: Iterable[BillItem]) -> Iterator[Diff]:
        for item in items:
            yield from self._one(item)
        yield from self._local_only()

    def match_index(self, index: BillIndex, item_at: Callable[[int], BillItem]) -> Iterator[Diff]:
        """The same verdicts as `match`, from pass 1's compact index: a clean row whose key is in the day's
        ledger with the same amount is matched here without building anything; every other row is re-read
        in full (`item_at(where)`) and decided by the one general rule (`_one`)."""
        local = self.local
        seen = self._seen
        matched = 0
        clean = BillIndex.CLEAN
        for key, amount, flag, where in zip(index.keys, index.amounts, index.flags, index.where, strict=True):
            if flag & clean == clean:
                entry = local.get(key)
                # a key still in `local` was never seen before (seeing it pops it): not a duplicate
                if entry is not None and entry.amount_cent == amount:
                    del local[key]
                    seen.add(key)
                    matched += 1
                    continue
            yield from self._one(item_at(where))
        self.stats.matched += matched
        yield from self._local_only()

    def _local_only(self) -> Iterator[Diff]:
        for entry in self.local.values():
            yield self._count(local_only(entry))
        self.local = {}

    def _one(self, item: BillItem) -> Iterator[Diff]:
        key = item.key
        if key in self._seen:
            self.stats.duplicates += 1  # the same payment twice in one bill: compare each row anyway
        entry = self.local.pop(key, None)
        if entry is None and self.lookup is not None and key not in self._seen:
            entry = self.lookup(key)
            if entry is not None:
                self.stats.cross_day += 1
                self.elsewhere.append(entry)
        self._seen.add(key)
        if self.check_fees and item.expected_fee_e5 is not None and item.expected_fee_e5 != item.fee_e5:
            yield self._count(
                Diff(
                    AMOUNT_DIFFERS,
                    FEE,
                    key,
                    round_units(item.fee_e5, 5, 2),
                    round_units(item.expected_fee_e5, 5, 2),
                    item.status,
                    "",
                    item.transaction_id,
                    item.out_trade_no,
                    item.refund_no,
                    f"fee {item.fee_e5} e-5 yuan != {item.expected_fee_e5} from the row's rate",
                )
            )
        ok_status = item.status == "SUCCESS"
        if entry is None:
            if item.kind == REFUND and not ok_status:
                self.stats.pending_refunds += 1
                return
            cls = CHANNEL_ONLY if ok_status else STATUS_DIFFERS
            if cls is STATUS_DIFFERS:
                return  # e.g. a REVOKED payment we never booked: nothing moved on either side
            yield self._count(
                Diff(
                    cls,
                    item.kind,
                    key,
                    item.amount_cent,
                    None,
                    item.status,
                    "",
                    item.transaction_id,
                    item.out_trade_no,
                    item.refund_no,
                    f"in the channel's bill at {item.time}, not in our ledger",
                )
            )
            return
        if not ok_status:
            yield self._count(
                Diff(
                    STATUS_DIFFERS,
                    item.kind,
                    key,
                    item.amount_cent,
                    entry.amount_cent,
                    item.status,
                    "BOOKED",
                    item.transaction_id,
                    item.out_trade_no,
                    item.refund_no,
                    f"channel says {item.status}, we booked it",
                )
            )
            return
        if entry.amount_cent != item.amount_cent:
            yield self._count(
                Diff(
                    AMOUNT_DIFFERS,
                    item.kind,
                    key,
                    item.amount_cent,
                    entry.amount_cent,
                    item.status,
                    "BOOKED",
                    item.transaction_id,
                    item.out_trade_no,
                    item.refund_no,
                    f"channel {yuan_text(item.amount_cent)} ≠ ledger {yuan_text(entry.amount_cent)}",
                )
            )
            return
        self.stats.matched += 1

    def _count(self, diff: Diff) -> Diff:
        self.stats.by_class[diff.cls] = self.stats.by_class.get(diff.cls, 0) + 1
        return diff


# ---------------------------------------------------------------- the channel's day (R34)


def china_date(epoch_s: float) -> date:
    return datetime.fromtimestamp(epoch_s, CHINA).date()


def scheduled_days(epoch_s: float, passes: int = 3) -> list[tuple[str, str]]:
    """The days a scheduled run covers, by the channel's clock, whatever the server's: T+1 is yesterday in
    Asia/Shanghai; T+2 and T+3 re-run the two days before (R34). [(bill_date, pass)]"""
    today = china_date(epoch_s)
    return [((today - timedelta(days=n)).isoformat(), f"T+{n}") for n in range(1, passes + 1)]


def previous_day(bill_date: str) -> str:
    return (date.fromisoformat(bill_date) - timedelta(days=1)).isoformat()


def rate_units(rate: str) -> int | None:
    """A fee rate like "0.60%" in units of 1e-6 (6000); None if it is not a plain percentage."""
    text = rate.strip()
    if not text.endswith("%"):
        return None
    try:
        return to_units(text[:-1], 4)
    except ValueError:
        return None


def fee_from_rate(amount_cent: int, rate: str) -> int | None:
    """Expected fee in e-5 yuan: amount × rate, rounded half up to the fen (how the bills we have round)."""
    units = rate_units(rate)
    if units is None:
        return None
    return round_units(amount_cent * units, 6, 0) * 1000
