"""The simulator's shared kernel: what every channel desk uses and none owns.

* errors: ``SimulatorError`` (a WeChat Pay v3 refusal: HTTP status + ``{code, message}``) and ``AlipayError``
  (an Alipay gateway refusal: ``{code, msg, sub_code, sub_msg}``);
* ``log``, the simulator's logger;
* HTTP: ``post`` (one notification attempt), ``compact`` (the channels' compact JSON), ``is_loopback``;
* money: ``yuan`` (int cents → ``"12.34"``), ``cents`` (``"12.34"`` → int cents, or None);
* the clock: ``now`` / ``now_cst`` / ``now_utc`` / ``now_rfc3339``: the only places the simulator reads the time;
  ``next_morning()`` moves the calendar a day ahead (bills that exist from T+1)
  (the day simulation points ``time`` and ``dt`` of this module at its own clock: tests/sim/channels.py);
* ``Kernel``: the run-time every desk of one simulator shares (stop signal, time scale, notification timeout,
  random source, base URL).

It imports nothing of the simulator but ``_crypto`` (constants), so every other module may import it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import ipaddress
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from urllib.parse import urlsplit

from . import _crypto as c

log = logging.getLogger("tally_local.simulator")
CST = c.CST
WECHAT_FEE_RATE = Decimal("0.0060")  # 0.60 %: the fee WeChat's simulated bills (trade and fund flow) charge


def wechat_fee(cents: int) -> Decimal:
    """The WeChat bill's fee in yuan, rounded half up to the fen (bills.py, fundflow_bills.py, wechatpay_v2_bills.py)."""
    return (Decimal(cents) / 100 * WECHAT_FEE_RATE).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def coupon_refund_split(total: int, coupons: int, unsettled: int, refund: int) -> dict[str, int]:
    """How the channel splits a refund of a discounted payment (R43): the coupons are refunded in proportion
    (rounded down to the fen). `coupons` = every discount on the order, `unsettled` = the part never settled to
    the merchant (WeChat NOCASH / 免充值, Alipay MDISCOUNT). Returns the refund's discount share, the unsettled
    share, what goes back to the payer and the settlement refund (退款金额 = 申请退款金额 − 非充值代金券退款金额)."""
    discount = refund * coupons // total if total else 0
    nocash = refund * unsettled // total if total else 0
    return {
        "discount_refund": discount,
        "nocash_refund": nocash,
        "cash_coupon_refund": discount - nocash,
        "payer_refund": refund - discount,
        "settlement_refund": refund - nocash,
    }


def china_day(rfc3339: str) -> dt.date:
    """The China (Asia/Shanghai) day of an RFC 3339 time: the bills' day."""
    return dt.datetime.fromisoformat(rfc3339).astimezone(CST).date()


# --------------------------------------------------------------------------- errors
class SimulatorError(Exception):
    """A channel-side refusal: ``status`` is the HTTP status, ``code``/``message`` the v3 error body."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class AlipayError(Exception):
    """An Alipay gateway refusal: ``body`` is the answer's business object."""

    def __init__(self, code: str, msg: str, sub_code: str = "", sub_msg: str = ""):
        super().__init__(f"{code} {sub_code}")
        self.body = {
            "code": code,
            "msg": msg,
            **({"sub_code": sub_code, "sub_msg": sub_msg} if sub_code else {}),
        }


# --------------------------------------------------------------------------- HTTP
def compact(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as the channels write it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Reply:
    """What one POST got: the HTTP status (0 = no HTTP answer), up to 64 KiB of the body, or the error."""

    status: int
    body: bytes = b""
    error: str | None = None
    duration_ms: int = 0

    @property
    def text(self) -> bytes:
        """The body, or the error's text when there was no answer."""
        return self.body if self.error is None else self.error.encode()


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Reply:
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", parts.path or "/", body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read(65536)
        return Reply(resp.status, data, None, int((time.monotonic() - t0) * 1000))
    except (OSError, http.client.HTTPException) as exc:
        return Reply(0, b"", f"{type(exc).__name__}: {exc}", int((time.monotonic() - t0) * 1000))
    finally:
        conn.close()


# --------------------------------------------------------------------------- money (int cents, people read yuan)
def yuan(cents: int) -> str:
    """Int cents as the channels write yuan: ``1999`` → ``"19.99"``, ``-5`` → ``"-0.05"``."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def cents(text: Any) -> int | None:
    """A yuan string with at most 2 decimals (``"12.3"``, ``"12.34"``, ``"12"``) as int cents, else None."""
    if not isinstance(text, str) or not text or text.count(".") > 1:
        return None
    whole, _, frac = text.partition(".")
    if not whole.isdigit() or (frac and (not frac.isdigit() or len(frac) > 2)):
        return None
    return int(whole) * 100 + int((frac + "00")[:2])


# --------------------------------------------------------------------------- the clock
def now() -> float:
    """Wall-clock seconds since the epoch (moved back inside `days_behind`)."""
    return time.time() + _SHIFT_S[0]


_SHIFT_S = [0.0]  # days_behind(): the whole clock, epoch and calendar, this many seconds back


_AHEAD = [
    dt.timedelta(0)
]  # next_morning(): the channel's calendar a day ahead (the epoch clock `now` is not)


def now_cst() -> dt.datetime:
    return dt.datetime.now(CST) + _AHEAD[0] + dt.timedelta(seconds=_SHIFT_S[0])


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + _AHEAD[0] + dt.timedelta(seconds=_SHIFT_S[0])


@contextlib.contextmanager
def days_behind(days: float) -> Iterator[None]:
    """Inside, the channels live `days` days ago, epoch clock and calendar alike (signatures, success times,
    bills): the demo plays *yesterday* this way, with the product's clock moved back the same, and then
    reconciles it the morning after, today."""
    _SHIFT_S[0] = -86400.0 * days
    try:
        yield
    finally:
        _SHIFT_S[0] = 0.0


@contextlib.contextmanager
def next_morning() -> Iterator[None]:
    """Inside, the channels' calendar reads one day later: a day's bills (Alipay's and the fund flows exist
    from T+1 only) as the 10:30 schedule fetches them the morning after. The demo plays a day, then
    reconciles it this way; the delivery timers (`now`) are not moved."""
    _AHEAD[0] = dt.timedelta(days=1)
    try:
        yield
    finally:
        _AHEAD[0] = dt.timedelta(0)


def now_rfc3339() -> str:
    return c.rfc3339_cst(now_cst())


def cst_text(fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """Beijing time now, formatted (Alipay's and v2's ``yyyy-MM-dd HH:mm:ss`` by default)."""
    return now_cst().strftime(fmt)


# --------------------------------------------------------------------------- composition
class Forward:
    """``pay = Forward("v3")`` in a class body: ``obj.pay`` is ``obj.v3.pay`` (read and write), so a composed
    desk's API is reachable on its owner under the same name (``Forward("kernel", "rng")`` renames)."""

    def __init__(self, desk: str, name: str | None = None):
        self.desk = desk
        self.name = name or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.desk), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.desk), self.name, value)


# --------------------------------------------------------------------------- the shared run-time
class Kernel:
    """What the desks of one simulator share: the stop signal, the time scale (channel seconds × time_scale =
    wall seconds), the notification timeout, the random source (seeded = reproducible ids) and the base URL."""

    def __init__(self, time_scale: float = 0.01, notify_timeout: float = 5.0, seed: int | None = None):
        self.time_scale = float(time_scale)
        self.notify_timeout = float(notify_timeout)
        self.rng: random.Random = random.Random(seed) if seed is not None else random.SystemRandom()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.url_of: Callable[[], str] = lambda: ""

    @property
    def url(self) -> str:
        """Where the simulator listens (``http://127.0.0.1:PORT``)."""
        return self.url_of()

    def wait(self, channel_seconds: float) -> bool:
        """Sleep ``channel_seconds`` × time_scale; True when the simulator stopped meanwhile."""
        return self.stopping.wait(channel_seconds * self.time_scale)

    def after(self, channel_seconds: float, fn: Callable[..., Any], *args: Any, name: str = "later") -> None:
        """``fn(*args)`` on a daemon thread after ``channel_seconds`` × time_scale, unless the simulator stops."""

        def run() -> None:
            if not self.wait(channel_seconds):
                fn(*args)

        threading.Thread(target=run, daemon=True, name=name).start()

    # random ids
    def digits(self, n: int) -> str:
        with self._lock:
            return "".join(self.rng.choice("0123456789") for _ in range(n))

    def alnum(self, n: int, alphabet: str = c.ALNUM) -> str:
        with self._lock:
            return "".join(self.rng.choice(alphabet) for _ in range(n))

    def uuid(self) -> str:
        with self._lock:
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def randbytes(self, n: int) -> bytes:
        with self._lock:
            return bytes(self.rng.getrandbits(8) for _ in range(n))

    def choice(self, options: tuple[str, ...]) -> str:
        with self._lock:
            return self.rng.choice(options)
