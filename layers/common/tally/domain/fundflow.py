"""The money's last leg (R45): the channel's fund-flow bill, in aggregate, against the ledger. Pure.

A fund-flow bill (WeChat 资金账单, Alipay 账务明细) lists every movement of the merchant's balance at the channel.
The parsers (tally.channels.wechatpay_v3.fundflow, tally.channels.alipay.fundflow) turn each row into a `FundFlowRow` with a `category`; a `FundFlowDay`
adds the rows of one merchant and one fund-flow day (all accounts: WeChat BASIC + FEES); `check_day` compares
one *ledger* day's settlement, refunds and fees with the fund-flow days the channel's settlement lag puts
them on, and with the trade bill's sums, and returns the three-way verdict plus `SETTLEMENT_DIFFERS` diffs in
the shape of tally.domain.recon.Diff.

Categories (what a row is to the ledger):
- SETTLEMENT: a payment's money credited (WeChat 业务类型 交易; Alipay 在线支付 / 交易付款);
- REFUND: a refund's money debited (退款 / 交易退款);
- FEE: a fee debited, or given back (WeChat 扣除交易手续费; Alipay 收费); a fee netted inside a SETTLEMENT or
  REFUND row ("总金额1.00元;含手续费0.01元") is split out by the parser into `fee_cent`;
- OTHER: balance movements the ledger does not book (提现 withdrawals, 充值 top-ups, transfers): shown, not diffed;
- UNCLASSIFIED: a business type we do not know: never assumed, always a diff (no silent path).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

from tally.domain.money import yuan_text
from tally.domain.recon import (  # noqa: F401 - SETTLEMENT_DIFFERS: R45's diff class, re-exported here
    PAYMENT,
    SETTLEMENT_DIFFERS,
    BillItem,
    Diff,
    round_units,
)

SETTLEMENT = "SETTLEMENT"
REFUND = "REFUND"
FEE = "FEE"
FEE_RETURN = "FEE_RETURN"  # not a row category: the fees given back, a figure of its own (its own lag)
OTHER = "OTHER"
UNCLASSIFIED = "UNCLASSIFIED"
CATEGORIES = (SETTLEMENT, REFUND, FEE, OTHER, UNCLASSIFIED)


# verdicts of one ledger day
AGREED = "AGREED"  # ledger = trade bill = fund flow
TRADE_DIFFERS = "TRADE_DIFFERS"  # the trade bill's sums differ from the ledger's (the row recon says which)
FUND_DIFFERS = "FUND_DIFFERS"  # the fund flow differs from what the ledger says should have moved
PENDING = "PENDING"  # a leg is not in yet (the fund-flow day the lag points to is not fetched): not "agreed"
VERDICTS = (AGREED, TRADE_DIFFERS, FUND_DIFFERS, PENDING)


@dataclass(frozen=True, slots=True)
class FundFlowRow:
    """One balance movement. `amount_cent` is signed as the balance moved (+ credit, − debit); `gross_cent` and
    `fee_cent` are the row's own split when its memo states one (gross − fee = |amount|), else |amount| and 0."""

    account: str  # BASIC | OPERATION | FEES (WeChat account_type) or ALIPAY
    flow_id: str  # 资金流水单号 / 账务流水号
    business_no: str  # 微信支付业务单号 / 业务流水号
    time: str  # 记账时间 / 发生时间, Beijing "YYYY-MM-DD HH:MM:SS"
    business_type: str  # the channel's word (业务类型)
    category: str  # one of CATEGORIES
    amount_cent: int
    balance_cent: int  # 账户结余 / 账户余额 after the movement
    reference: str = ""  # 业务凭证号 (WeChat) / 商户订单号 (Alipay)
    memo: str = ""
    gross_cent: int = 0
    fee_cent: int = 0
    direction: int = (
        0  # +1 收入 / −1 支出 as the bill says; 0: from the amount's sign (a zero amount: the category's)
    )

    @property
    def sign(self) -> int:
        if self.direction:
            return self.direction
        if self.amount_cent:
            return 1 if self.amount_cent > 0 else -1
        return -1 if self.category == REFUND else 1


@dataclass
class FundFlowDay:
    """The fund flow of one merchant and one day, all accounts, by category. Signed figures: `settlement_cent`
    credited, `refund_cent` debited (positive = money out), `fee_cent` charged, `fee_returned_cent` given back,
    `other_cent` / `unclassified_cent` as the balance moved.
    net = settlement − refund − fee + fee_returned + other + unclassified."""

    day: str = ""
    rows: int = 0
    settlement_cent: int = 0
    refund_cent: int = 0
    fee_cent: int = 0
    fee_returned_cent: int = 0
    other_cent: int = 0
    unclassified_cent: int = 0
    net_cent: int = 0
    accounts: set[str] = field(default_factory=set)
    unclassified: dict[str, int] = field(default_factory=dict)  # business type → rows
    by_type: dict[str, int] = field(default_factory=dict)  # business type → signed cents

    def add(self, row: FundFlowRow) -> None:
        self.rows += 1
        self.accounts.add(row.account)
        self.net_cent += row.amount_cent
        self.by_type[row.business_type] = self.by_type.get(row.business_type, 0) + row.amount_cent
        sign = row.sign
        if row.category == SETTLEMENT:
            self.settlement_cent += sign * row.gross_cent
            self.fee_cent += sign * row.fee_cent
        elif row.category == REFUND:
            self.refund_cent -= sign * row.gross_cent  # a debit is a refund out (positive)
            self.fee_returned_cent -= (
                sign * row.fee_cent
            )  # the fee given back, netted into the refund's debit
        elif row.category == FEE:
            if sign < 0:
                self.fee_cent -= row.amount_cent
            else:
                self.fee_returned_cent += row.amount_cent
        elif row.category == OTHER:
            self.other_cent += row.amount_cent
        else:
            self.unclassified_cent += row.amount_cent
            self.unclassified[row.business_type] = self.unclassified.get(row.business_type, 0) + 1

    def extend(self, rows: Iterable[FundFlowRow]) -> FundFlowDay:
        for row in rows:
            self.add(row)
        return self


@dataclass
class FlowTally:
    """What a fund-flow parser counts for its summary checks (R31/R32), whatever the channel's layout: income
    rows and their sum, expense rows and their sum (positive), and the balance breaks (a row's balance is not
    the previous row's plus its movement: shown, not blocking, the row order is not documented)."""

    income_n: int = 0
    income_cent: int = 0
    expense_n: int = 0
    expense_cent: int = 0
    balance_breaks: int = 0
    _balance: int | None = None

    def add(self, row: FundFlowRow) -> None:
        if self._balance is not None and self._balance + row.amount_cent != row.balance_cent:
            self.balance_breaks += 1
        self._balance = row.balance_cent
        if row.sign > 0:
            self.income_n += 1
            self.income_cent += row.amount_cent
        else:
            self.expense_n += 1
            self.expense_cent -= row.amount_cent


# ---------------------------------------------------------------- the ledger's and the trade bill's figures


@dataclass(frozen=True, slots=True)
class DayFigures:
    """One merchant's day as the ledger (or the trade bill) sums it: settlement amounts of payments, settlement
    refunds, fees charged on payments, fees given back with refunds (all cents, positive)."""

    settlement_cent: int = 0
    refund_cent: int = 0
    fee_cent: int = 0
    fee_returned_cent: int = 0

    @property
    def net_cent(self) -> int:
        return self.settlement_cent - self.refund_cent - self.fee_cent + self.fee_returned_cent


def trade_figures(items: Iterable[BillItem]) -> DayFigures:
    """The trade bill's day in check_day's terms: SUCCESS payments' amounts (WeChat 应结订单金额, Alipay 商家实收),
    SUCCESS refunds, fees charged and fees given back, each row's fee rounded half up to the fen as it is charged.
    A payment row's fee is charged and a refund row's given back, whichever sign the channel writes it with
    (WeChat: + on payments, − on refunds; the simulated Alipay 服务费 the other way round, its sign UNCONFIRMED).
    Rows still PROCESSING (or REVOKED) moved no money and are left out."""
    settlement = refund = fee = returned = 0
    for item in items:
        if item.status != "SUCCESS":
            continue
        cents = abs(round_units(item.fee_e5, 5, 2))
        if item.kind == PAYMENT:
            settlement += item.amount_cent
            fee += cents
        else:
            refund += item.amount_cent
            returned += cents
    return DayFigures(settlement, refund, fee, returned)


# ---------------------------------------------------------------- the lag


@dataclass(frozen=True, slots=True)
class SettlementLag:
    """On which fund-flow day a ledger day's money moves, per category, in calendar days (docs/settlement.md)."""

    settlement_days: int
    refund_days: int
    fee_days: int  # fees charged on payments (WeChat nets them into the settlement credit)
    fee_return_days: int  # fees given back with refunds (WeChat nets them into the refund debit)
    source: str = ""

    def day_of(self, item: str, ledger_day: str) -> str:
        days = {
            SETTLEMENT: self.settlement_days,
            REFUND: self.refund_days,
            FEE: self.fee_days,
            FEE_RETURN: self.fee_return_days,
        }[item]
        return (date.fromisoformat(ledger_day) + timedelta(days=days)).isoformat()

    def due(self, ledger_day: str) -> str:
        """The last fund-flow day a ledger day needs: before its bill is in, the day is PENDING, not AGREED."""
        return max(self.day_of(item, ledger_day) for item in ITEMS)


ITEMS = (SETTLEMENT, REFUND, FEE, FEE_RETURN)


@dataclass(frozen=True, slots=True)
class FundFlowTerms:
    """A channel's fund flow by default (R45; each channel package states its own): the settlement lag, the
    account words a merchant record may name, and the accounts read when it names none."""

    lag: SettlementLag
    accounts: tuple[str, ...]
    default_accounts: tuple[str, ...]


LAG_FIELDS = ("settlement_days", "refund_days", "fee_days", "fee_return_days")
MAX_LAG_DAYS = 30


class ConfigError(ValueError):
    """A merchant's settlement_lag / fund_accounts that cannot be used (the message says what to write)."""


def lag_of(base: SettlementLag, config: Mapping[str, object] | None) -> SettlementLag:
    """A merchant's `settlement_lag` (e.g. {"settlement_days": 7}) over the channel's default `base` (R45): any
    of settlement_days, refund_days, fee_days, fee_return_days, whole days 0..30; `fee_days` follows
    `settlement_days` unless given (WeChat nets the fee into the credit). Anything else is a ConfigError."""
    if not config:
        return base
    if not isinstance(config, Mapping):
        raise ConfigError('settlement_lag is an object, e.g. {"settlement_days": 1}')
    unknown = sorted(str(k) for k in config if k not in LAG_FIELDS)
    if unknown:
        raise ConfigError(
            f"settlement_lag: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(LAG_FIELDS)})"
        )
    days: dict[str, int] = {}
    for name, value in config.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LAG_DAYS:
            raise ConfigError(
                f"settlement_lag.{name} must be a whole number of days 0..{MAX_LAG_DAYS}, not {value!r}"
            )
        days[str(name)] = value
    settlement = days.get("settlement_days", base.settlement_days)
    lag = SettlementLag(
        settlement,
        days.get("refund_days", base.refund_days),
        days.get("fee_days", settlement if "settlement_days" in days else base.fee_days),
        days.get("fee_return_days", base.fee_return_days),
        "merchant settlement_lag " + ", ".join(f"{k}={v}" for k, v in sorted(days.items())),
    )
    return lag


def accounts_of(terms: FundFlowTerms, config: object) -> tuple[str, ...]:
    """A merchant's `fund_accounts` (e.g. ["BASIC", "FEES"]): the channel's account words, each once, at least
    one; none configured → the channel's default (WeChat BASIC, Alipay its one ALIPAY balance)."""
    allowed = terms.accounts
    if config is None or config == []:
        return terms.default_accounts
    if isinstance(config, str) or not isinstance(config, (list, tuple)):
        raise ConfigError(f'fund_accounts is a list, e.g. ["{allowed[0]}"]')
    out: list[str] = []
    for word in config:
        if not isinstance(word, str) or word.upper() not in allowed:
            raise ConfigError(f"fund_accounts: {str(word)[:16]!r} is not one of {', '.join(allowed)}")
        if word.upper() in out:
            raise ConfigError(f"fund_accounts: {word.upper()} named twice")
        out.append(word.upper())
    return tuple(out)


# ---------------------------------------------------------------- the check (R45)


@dataclass
class DayVerdict:
    """The three-way verdict for one merchant's ledger day, with the diffs a person works from."""

    merchant: str
    channel: str
    ledger_day: str
    code: str  # one of VERDICTS
    reason: str
    ledger: DayFigures
    trade: DayFigures | None
    fund: DayFigures | None  # what the fund flow moved for this ledger day (lag applied), None while PENDING
    diffs: list[Diff] = field(default_factory=list)


def check_day(
    merchant: str,
    channel: str,
    ledger_day: str,
    ledger: DayFigures,
    *,
    trade: DayFigures | None,
    fund_days: Mapping[str, FundFlowDay],
    lag: SettlementLag,
    rows_explain: Mapping[str, int] | None = None,
) -> DayVerdict:
    """R45: did ledger day `ledger_day`'s money land? `fund_days` maps fund-flow days (ISO) to their
    `FundFlowDay`; the lag picks, per category, the fund-flow day this ledger day's money is on. A fund-flow day
    not in `fund_days` makes the verdict PENDING (the caller alarms once it is overdue). Unclassified movements
    on any of those days are a diff of their own: a business type nobody looked at is never taken as agreement.

    Aggregate by design: the per-row matching (R34–R36) already says which payment differs; this check says
    whether the day's money moved as booked. Money on the day boundary (a payment at 23:59:59 settled a day
    later) shows as a pair of opposite diffs on consecutive days; the detail says so.

    `lag`: the merchant's (service/ledger_day.merchant_lag: its record over the channel's FundFlowTerms).

    `rows_explain`: per item, the channel-minus-ledger sum of the trade run's own row differences (R34–R36). A
    trade-bill leg whose gap is exactly that sum is the same money as those rows, which are already cases: the
    verdict still says the trade bill differs, but no second difference opens for it (R48)."""
    diffs: list[Diff] = []
    key = f"{merchant}#{ledger_day}"
    trade_differs = False
    explained = rows_explain or {}
    if trade is not None:
        for item, mine, theirs in _legs(ledger, trade):
            trade_differs = trade_differs or mine != theirs
            if mine != theirs and explained.get(item) != theirs - mine:
                diffs.append(
                    Diff(
                        SETTLEMENT_DIFFERS,
                        f"TRADE_{item}",
                        key,
                        theirs,
                        mine,
                        detail=f"trade bill {item.lower()} {yuan_text(theirs)} ≠ ledger {yuan_text(mine)}",
                    )
                )
    needed = {item: lag.day_of(item, ledger_day) for item in ITEMS}
    missing = sorted({d for d in needed.values() if d not in fund_days})
    if missing:
        code = TRADE_DIFFERS if diffs or trade_differs else PENDING
        reason = f"fund-flow bill of {', '.join(missing)} not in yet ({lag.source or 'lag'})"
        if trade is None:
            reason += "; trade bill not in yet"
        return DayVerdict(merchant, channel, ledger_day, code, reason, ledger, trade, None, diffs)
    fund = DayFigures(
        fund_days[needed[SETTLEMENT]].settlement_cent,
        fund_days[needed[REFUND]].refund_cent,
        fund_days[needed[FEE]].fee_cent,
        fund_days[needed[FEE_RETURN]].fee_returned_cent,
    )
    fund_diffs = []
    for item, mine, theirs in _legs(ledger, fund):
        if mine != theirs:
            on = needed[item]
            fund_diffs.append(
                Diff(
                    SETTLEMENT_DIFFERS,
                    item,
                    key,
                    theirs,
                    mine,
                    detail=(
                        f"fund flow of {on} {item.lower()} {yuan_text(theirs)} ≠ ledger of {ledger_day} "
                        f"{yuan_text(mine)} (lag {lag.source or 'as configured'}; money on the day boundary "
                        "shows as opposite differences on consecutive days)"
                    ),
                )
            )
    for on in sorted(set(needed.values())):
        day = fund_days[on]
        if day.unclassified:
            kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(day.unclassified.items()))
            fund_diffs.append(
                Diff(
                    SETTLEMENT_DIFFERS,
                    UNCLASSIFIED,
                    f"{merchant}#{on}",
                    day.unclassified_cent,
                    None,
                    detail=f"fund flow of {on} has movements of unknown business type: {kinds}",
                )
            )
    diffs.extend(fund_diffs)
    if fund_diffs:
        code, reason = FUND_DIFFERS, "the fund flow differs from the ledger (R45)"
    elif diffs or trade_differs:
        code, reason = TRADE_DIFFERS, "the trade bill's sums differ from the ledger's"
        if not diffs:
            reason += ": by exactly its rows' differences (their cases)"
    elif trade is None:
        code, reason = PENDING, "ledger = fund flow; trade bill not in yet"
    else:
        code, reason = AGREED, "ledger = trade bill = fund flow"
    return DayVerdict(merchant, channel, ledger_day, code, reason, ledger, trade, fund, diffs)


def _legs(mine: DayFigures, theirs: DayFigures) -> list[tuple[str, int, int]]:
    return [
        (SETTLEMENT, mine.settlement_cent, theirs.settlement_cent),
        (REFUND, mine.refund_cent, theirs.refund_cent),
        (FEE, mine.fee_cent, theirs.fee_cent),
        (FEE_RETURN, mine.fee_returned_cent, theirs.fee_returned_cent),
    ]
