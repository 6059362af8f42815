"""The synthetic heartbeat (issue #16): every minute a channel's callback, signed and encrypted the way the
channel does it, for a synthetic merchant, posted through the public API like any channel's; if none is booked
within 3 minutes, HeartbeatAgeAlarm fires. It proves the whole money path (API Gateway, notify, the queue,
the worker, the tables) with real traffic, whatever the merchants' own traffic is. The channel is the first
registered one with a synthetic payment (`Channel.synthetic()`): WeChat Pay v3's, whose merchant and signed
callback channels/wechatpay_v3/heartbeat.py builds; this module is the channel-blind loop.

- The synthetic merchant (`TALLY_HEARTBEAT_MCHID`, default 0000000000: WeChat mchids never start with 0) is
  configured on the first beat in public-key mode with keys generated here; the channel-side key it signs
  with is kept in Secrets Manager (store/heartbeat.py). Recon skips it (bootstrap.recon_service); the keys
  function has nothing to download for a public-key merchant.
- Each beat is a 1-cent order `HB{yyyymmddHHMM}` (UTC minute) created through OrderService and its callback,
  whose transaction id is a function of the beat (`beat_transaction_id`): two beats in one minute (a duplicate
  EventBridge delivery, a re-run) are one order and one payment, the second a duplicate (R54). What would send
  a synthetic payment to a person (another payment on a paid beat, a beat whose order is gone) is closed as
  synthetic by the worker instead (`ApplyService.synthetic_mchid`, HeartbeatDiscarded): no item, no refund task.
- The age (`age_s`): seconds since the newest booked beat was sent; while none of the last 10 minutes' beats is
  booked, since the oldest of them that exists (a new stack starts at 0, not in alarm). Published every run as
  the HeartbeatAge gauge and shown by `tally pending`.

The echo (issue #38): the synthetic payment never leaves the stack, so it cannot prove that the channel reaches
Tally. For each notify path in `TALLY_HEARTBEAT_ECHO` ("route/merchant id", settings.heartbeat_echo) every beat
also asks the channel for its security echo (`Channel.security_echo`: WeChat Pay v3's `POST /v3/security/echo`,
channels/wechatpay_v3/echo.py) with that merchant's credentials and `notify_url` = this stack's
`/notify/{route}/{merchant id}`; the channel's signed SECURITY_ECHO callback then comes in through API Gateway and
the notify function, is verified and decrypted with the merchant's keys, and only its arrival is written
(service/ingest.py, EventStore.echo_arrived). No money moves, nothing is booked.

- Each ask is written first (`echo_asked`): `waiting_since` is the first ask no echo has answered since.
- The echo age: seconds since `waiting_since`, 0 while nothing waits; the largest over the configured paths is the
  HeartbeatEchoAge gauge, every run (HeartbeatEchoAgeAlarm at 180 s, like HeartbeatAge).
- An echo missing for ECHO_WINDOW_S (a refused call, an answer that does not verify, a callback that never
  arrives or is rejected) is a case in the work queue (`heartbeat-echo`, one per outage: its key is the first
  unanswered ask), logged with the path; it is closed by a person once the path works (the age is back to 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tally import httpclient
from tally.channels import registry as channel_registry
from tally.errors import ChannelError, NotFound
from tally.observability import M, count, logger
from tally.store.tables import iso_now

if TYPE_CHECKING:
    from tally.channels.registry import Channel, Synthetic
    from tally.service.merchants import MerchantDirectory
    from tally.service.orders import OrderService
    from tally.store.heartbeat import HeartbeatKeys
    from tally.store.tables import EventStore, OrderStore

WINDOW_MINUTES = 10
ECHO_WINDOW_S = 180  # an echo not back within 3 beats is missing (the channel calls back within seconds)
ECHO_CASE = "heartbeat_echo"  # the work-queue kind (service/queue.py KEPT_KINDS)


def _beat_id(minute: int) -> str:
    return "HB" + datetime.fromtimestamp(minute * 60, UTC).strftime("%Y%m%d%H%M")


def synthetic_channel() -> tuple[Channel, Synthetic]:
    """The first registered channel with a synthetic payment, and that payment."""
    for channel in channel_registry.all_channels():
        synthetic = channel.synthetic()
        if synthetic is not None:
            return channel, synthetic
    raise LookupError("no registered channel has a synthetic payment for the heartbeat")


def post_json(url: str, headers: dict[str, str], body: bytes, timeout_s: float = 5.0) -> int:
    """POST over HTTP(S); the status, or 0 when the API could not be reached at all."""
    try:
        return httpclient.request("POST", url, body=body, headers=headers, timeout_s=timeout_s).status
    except httpclient.StatusError as error:
        return error.status
    except (OSError, ValueError) as error:  # no HEARTBEAT_API_URL set: Unreachable too
        logger.warning("heartbeat: API unreachable", extra={"error": str(error)[:200]})
        return 0


class Heartbeat:
    def __init__(
        self,
        directory: MerchantDirectory,
        orders: OrderService,
        order_store: OrderStore,
        keys: HeartbeatKeys,
        *,
        api_url: str,
        mchid: str,
        clock: Callable[[], float] = time.time,
        post: Callable[[str, dict[str, str], bytes], int] = post_json,
        channel: tuple[Channel, Synthetic] | None = None,
        events: EventStore | None = None,
        echo: tuple[str, ...] = (),
    ):
        """`echo`: the notify paths ("route/merchant id") proven with the channel's security echo; `events` keeps
        their asks and arrivals and takes the missing echo's case."""
        self.channel, self.synthetic = channel or synthetic_channel()
        self.directory = directory
        self.orders = orders
        self.order_store = order_store
        self.keys = keys
        self.api_url = api_url.rstrip("/")
        self.mchid = mchid
        self.clock = clock
        self.post = post
        self.events = events
        self.echo = echo if events is not None else ()

    # ------------------------------------------------------------------ the beat
    def beat(self) -> dict[str, Any]:
        keys = self._keys()
        now = self.clock()
        minute = int(now // 60)
        out_trade_no = _beat_id(minute)
        self.orders.create(
            {
                "mchid": self.mchid,
                "out_trade_no": out_trade_no,
                "amount_cent": 1,
                "description": "tally heartbeat (synthetic)",
                "channel": self.channel.order_word,
                "prepay": False,  # nothing to ask the channel: the synthetic merchant exists only here
            }
        )
        headers, body = self.synthetic.callback(keys, self.mchid, out_trade_no, now)
        status = self.post(self.notify_url, headers, body)
        if status != 204:
            logger.error("heartbeat callback refused", extra={"status": status, "order": out_trade_no})
        age = self.age_s()
        count(M.HEARTBEAT_AGE, age)  # a gauge, every run: HeartbeatAgeAlarm (Maximum >= 180)
        echoes, echo_age = self._echo_beat(now)
        count(M.HEARTBEAT_ECHO_AGE, echo_age)  # a gauge, every run: HeartbeatEchoAgeAlarm (Maximum >= 180)
        logger.info(
            "heartbeat",
            extra={
                "order": out_trade_no,
                "status": status,
                "age_s": age,
                "echo": echoes,
                "echo_age_s": echo_age,
            },
        )
        return {"order": out_trade_no, "status": status, "age_s": age, "echo": echoes, "echo_age_s": echo_age}

    # ------------------------------------------------------------------ the echo
    def _echo_beat(self, now: float) -> tuple[dict[str, str], int]:
        """For each configured path: its echo age (a case once it passes ECHO_WINDOW_S), then this beat's ask.
        ({path: what became of the ask}, the largest age)."""
        asked: dict[str, str] = {}
        oldest = 0
        for path in self.echo:
            route, _, mchid = path.partition("/")
            waiting = self._echo_waiting(route, mchid)
            age = 0 if waiting is None else max(int(now - waiting), 0)
            if waiting is not None and age >= ECHO_WINDOW_S:
                self._echo_missing(route, mchid, waiting, age)
            oldest = max(oldest, age)
            asked[path] = self._ask_echo(route, mchid, now)
        return asked, oldest

    def _echo_waiting(self, route: str, mchid: str) -> int | None:
        """The first ask no echo has answered (None while nothing waits)."""
        assert self.events is not None
        waiting = (self.events.echo_row(route, mchid) or {}).get("waiting_since")
        return None if waiting is None else int(waiting)

    def _ask_echo(self, route: str, mchid: str, now: float) -> str:
        """Write the ask, then ask the channel; what became of it, in words ("asked": the channel took it)."""
        assert self.events is not None
        channel = channel_registry.by_route(route)
        self.events.echo_asked(route, mchid, now)  # first: a refused call is an echo that will not come
        if channel is None:
            logger.error("heartbeat echo: no notify route", extra={"route": route, "mchid": mchid})
            return f"no notify route {route!r}"
        message = f"tally-heartbeat-{int(now)}"
        try:
            echoed = channel.security_echo(
                self.directory, mchid, f"{self.api_url}/notify/{route}/{mchid}", message
            )
        except (ChannelError, NotFound) as exc:  # refused, unreachable, unverified; or not configured
            logger.error(
                "heartbeat echo: the channel did not take the call",
                extra={"route": route, "mchid": mchid, "error": str(exc)[:200]},
            )
            return f"refused: {str(exc)[:200]}"
        if echoed is None:
            logger.error(
                "heartbeat echo: the channel has no echo call", extra={"route": route, "mchid": mchid}
            )
            return "the channel has no echo call"
        if echoed and echoed != message:
            logger.warning("heartbeat echo: the answer echoed another message", extra={"echoed": echoed[:64]})
        return "asked"

    def _echo_missing(self, route: str, mchid: str, waiting: int, age: int) -> None:
        """The case of a missing echo: one per outage (keyed by its first unanswered ask), for a person."""
        assert self.events is not None
        channel = channel_registry.by_route(route)
        stored = channel.stored if channel is not None else route
        written = self.events.put(
            f"echo-missing#{route}#{mchid}#{waiting}",
            ECHO_CASE,
            self.clock(),
            manual_kind=ECHO_CASE,
            channel=stored,
            mchid=mchid,
            reason=f"no echo callback on /notify/{route}/{mchid} since {iso_now(waiting)}: check the merchant's keys "
            "(`tally merchant check --live`), the notify route and the heartbeat's log",
        )
        if written:
            logger.error(
                "heartbeat echo missing: case opened", extra={"route": route, "mchid": mchid, "age_s": age}
            )

    def echo_status(self) -> list[dict[str, Any]]:
        """Each configured echo path as `tally pending` shows it: seconds since its last echo arrived (None: never)
        seconds an unanswered ask has waited (0: nothing waits) and whether that is past ECHO_WINDOW_S (a case is open)."""
        if self.events is None:
            return []
        now = self.clock()
        status = []
        for path in self.echo:
            route, _, mchid = path.partition("/")
            row = self.events.echo_row(route, mchid) or {}
            arrived, waiting = row.get("arrived_s"), row.get("waiting_since")
            waiting_s = 0 if waiting is None else max(int(now - int(waiting)), 0)
            status.append(
                {
                    "path": path,
                    "last_echo_age_s": None if arrived is None else max(int(now - int(arrived)), 0),
                    "waiting_s": waiting_s,
                    "missing": waiting_s >= ECHO_WINDOW_S,  # its case is open
                }
            )
        return status

    def age_s(self) -> int:
        """Seconds since the newest booked beat was sent (see the module docstring)."""
        now = self.clock()
        minute = int(now // 60)
        oldest_waiting = None
        for back in range(WINDOW_MINUTES):
            row = self.order_store.get(self.mchid, _beat_id(minute - back))
            if row is None:
                continue
            sent = (minute - back) * 60
            if row.get("status") == "PAID":
                return max(int(now - sent), 0)
            oldest_waiting = sent
        return 0 if oldest_waiting is None else max(int(now - oldest_waiting), 0)

    # ------------------------------------------------------------------ the channel side
    @property
    def notify_url(self) -> str:
        return f"{self.api_url}/notify/{self.channel.route}/{self.mchid}"

    def _keys(self) -> dict[str, str]:
        """The synthetic merchant's keys, generated and configured on the first beat."""
        keys = self.keys.get()
        if keys is not None:
            return keys
        keys = self.synthetic.configure(self.directory, self.mchid, self.notify_url, self.keys.put)
        logger.info("heartbeat: synthetic merchant configured", extra={"mchid": self.mchid})
        return keys
