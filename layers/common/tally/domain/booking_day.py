"""Which day a payment or refund may be booked on without a person knowing (R50), pure.

Reconciliation looks at a channel day three times (T+1, T+2, T+3, R34) and never again. Money booked on a
day whose last pass is due or done, or on a day that has not come, would sit in the ledger where no run will
compare it with the channel's bill in time: it is parked for a person instead (`booking_day_refusal` names
why; None: book it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tally.domain.clock import CHINA

RECON_PASSES = 3  # T+1, T+2, T+3: the last run that looks at a day is on its third day after
CLOCK_SKEW_S = 600  # the channel's clock and ours may disagree by this much


def booking_day_refusal(success_time: str | None, now_s: float) -> str | None:
    """Why money reported as succeeding at `success_time` must not be booked now (R50), or None.

    A missing or unreadable success time is booked on today's date (apply.bill_date), which reconciliation
    still looks at: None. A time far from its order's life on a day reconciliation still looks at needs no
    rule here: that day's bill does not have it, so recon finds it local-only, a diff for a person (R36)."""
    when = _instant(success_time)
    if when is None:
        return None
    now = datetime.fromtimestamp(now_s, CHINA)
    if when > now + timedelta(seconds=CLOCK_SKEW_S):
        return f"its success time {success_time} is in the future: a day reconciliation has not seen"
    day, today = when.astimezone(CHINA).date(), now.date()
    if (today - day).days >= RECON_PASSES:
        return (
            f"its day {day.isoformat()} is one reconciliation has finished with (last pass T+{RECON_PASSES}): "
            "compare it with that day's bill before booking it by hand"
        )
    return None


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=CHINA)
