"""The channels' clock: Beijing time (UTC+8, no DST). A channel's day (bills, the day cut of R34), its
`time_expire` and `success_time`, and the times people read are in it; the one definition."""

from __future__ import annotations

from datetime import timedelta, timezone

CHINA = timezone(timedelta(hours=8))  # the channels' day cut (R34); China has no DST
