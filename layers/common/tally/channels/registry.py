"""The channels Tally speaks, by one name each, and the one place that maps a name to what is stored.

Three channels, one spelling each (the package name): `wechatpay_v3`, `wechatpay_v2`, `alipay`. The values
already on the wire, in rows and in alarms keep their meaning; this module is where each is written down:

| name         | stored (`channel` of rows, raw keys) | route / metric / CLI word | POST /orders `channel` | order `api`    | merchants table |
|--------------|--------------------------------------|---------------------------|------------------------|----------------|-----------------|
| wechatpay_v3 | wechatpay                            | wechatpay                 | wechatpay              | -              | wechatpay       |
| wechatpay_v2 | wechatpay (v2 reports v3's payments) | wechatpay-v2              | wechatpay_v2           | wechatpay_v2   | wechatpay_v2    |
| alipay       | alipay                               | alipay                    | alipay                 | -              | alipay          |

A caller looks a channel up (`get(name)`, `by_route_key`, `by_order_word`, `by_stored`, `for_order`) and asks
it (the `Channel` protocol) instead of writing `if channel == "alipay"`. Adding a fourth channel: a package
`channels/<name>/` with its wire module and a `channel.py` defining an object that satisfies `Channel`,
listed in `_BUILTIN` below (docs/design.md "Adding a channel").

Nothing here imports a wire module at import time: the notify function's cold start and the CLI's names
cost nothing (each channel.py imports its wire module when a table or an ACK is first asked for).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from tally.channels.bill_source import Bill, BillSource
    from tally.channels.doctor import Finding
    from tally.domain.fundflow import FundFlowTerms
    from tally.domain.notifications import Outcome, PaymentNotice
    from tally.domain.poll import CloseResult, QueryResult
    from tally.domain.refunds import ChannelAnswer, RefundEvent
    from tally.domain.settlement import Refund, Settlement


# not frozen: a frozen init costs ~4 µs on the notify hot path (bench.notify_cpu); treat it as read-only
@dataclass(slots=True)
class ReadNotification:
    """What a channel's notify step (channels/<name>/notify.py: verify over the raw bytes, decrypt, parse)
    made of one callback; service/ingest.py acts on it without knowing the wire. At most one of `reject`,
    `probe`, `quarantine`; otherwise the verified `payments` (several: a combine's sub-orders, `group`) or
    the `refund` report."""

    reject: tuple[int, str, str] | None = (
        None  # (status, reason, errors.REJECTION_CAUSES): kept for replay (R4, R40)
    )
    probe: bool = False  # a signature probe: answered 401 and counted, not kept
    echo: bool = (
        False  # the channel's own connectivity check (v3 SECURITY_ECHO): verified, acknowledged, no row
    )
    quarantine: str | None = None  # signed by the channel but unusable: the reason a person reads (R5)
    event_id: str = ""  # the notification's own id (event rows' key), "" when the channel sends none
    payments: tuple[PaymentNotice, ...] = ()  # with `quarantine`: the payment it was (log keys only)
    group: str | None = None  # several sub-orders in one notification: the combine out_trade_no
    refund: Any = None  # a refund report (domain RefundNotice) for the refund inbox
    refund_headers: bool = False  # keep the verify headers with the refund row
    body_text: str | None = (
        None  # the body strictly UTF-8-decoded, when the channel decoded it (the raw row's)
    )


class ChannelVariable(NamedTuple):
    """An environment variable a channel package reads (its gateway's base URL, a CA file the tests trust),
    named there: settings.channel_values reads every channel's, MerchantDirectory.setting answers them."""

    name: str
    default: str = ""
    parse: Callable[[str], str] = str


class RefundClient(Protocol):
    """One merchant's refund calls (service/refunds.RefundChannel is the same shape, seen from the service)."""

    def create(self, refund: dict[str, Any]) -> ChannelAnswer: ...

    def query(self, refund: dict[str, Any]) -> ChannelAnswer: ...


class PullClient(Protocol):
    """One channel's order query and close (service/pull.PullChannels routes an order to it)."""

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult: ...

    def close(self, order: dict[str, Any]) -> CloseResult: ...


class MerchantDesk(Protocol):
    """One channel's merchants over a MerchantDirectory (channels/<name>/merchant.py `Desk`): what
    service/merchants.py asks every channel alike; the channel's own accessors come on top."""

    def expiries(self, merchant_id: str) -> dict[str, float]:
        """Every certificate's expiry (epoch seconds) by name; {} for an API key or a sub-merchant."""
        ...

    def check_expiry(self, merchant_id: str) -> list[str]:
        """The names of the certificates expiring within 7 days, each counted PlatformCertExpiring."""
        ...

    def local_check(
        self, merchant_id: str, add: Callable[[str, bool, str], None], expiry: Callable[[str, float], None]
    ) -> None:
        """`tally merchant check`: local proofs with the stored keys, each `add(check, ok, detail)`; each
        certificate's expiry through `expiry(name, when)`."""
        ...


class Synthetic(Protocol):
    """A channel's synthetic payment (channels/wechatpay_v3/heartbeat.py): the heartbeat's merchant and its
    signed callback, the way the channel would send it."""

    def configure(
        self, merchants: Any, merchant_id: str, notify_url: str, keep: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        """Generate the synthetic merchant's keys, `keep` the channel-side ones (Secrets Manager), configure
        the merchant in the directory; the kept keys."""
        ...

    def callback(
        self, keys: dict[str, str], merchant_id: str, out_trade_no: str, now: float
    ) -> tuple[dict[str, str], bytes]:
        """A signed paid callback for the 1-cent order: (headers, body)."""
        ...


class CombinePayments(Protocol):
    """A channel's combine payment (合单): several merchants' orders paid with one prepay (R11)."""

    def combine_merchant(self, merchants: Any, mchid: str, sub_mchids: Sequence[str]) -> Any:
        """The combine merchant `mchid`, once it may combine every sub-order's merchant (its own, or its
        sub-merchants as a service provider): else errors.NotFound (not configured, or not its sub-merchant:
        another tenant's merchant is simply not found) or errors.InvalidRequest (it cannot place one)."""
        ...

    def combine_prepay(
        self,
        merchants: Any,
        merchant: Any,
        combine_out_trade_no: str,
        sub_orders: list[dict[str, Any]],
        *,
        expire_s: float,
    ) -> dict[str, str]:
        """One prepay for all the sub-orders, with the combine merchant's credentials: {"code_url": …}."""
        ...


class Channel(Protocol):
    """What ingest, orders, pull, recon, merchants, bootstrap, the CLI and the console need from a channel."""

    name: str  # the one spelling: the package name
    label: str  # what people read: "WeChat Pay v3"
    stored: str  # rows' `channel` and the raw keys' prefix (never migrated)
    route: str  # /notify/<route>/{id}; also the metric dimension value and the CLI's word
    order_word: str  # POST /orders `"channel"`
    api: str | None  # the order row's `api` when the stored channel has several APIs (WeChat v2)
    merchant_kind: str  # the merchants table's channel and the secret path tally/merchants/<kind>/<id>
    merchant_param: str  # the route's path parameter naming the merchant: mchid or app_id
    currencies: tuple[str, ...] | None  # the currencies an order may have (None: any ISO code)
    reconciled: bool  # the recon function downloads this stored channel's bills
    replay_headers: tuple[str, ...]  # request headers a kept callback needs to be verified again (R40)
    environment: tuple[ChannelVariable, ...]  # the variables its package reads (settings.channel_values)
    own_route: bool  # template.yaml has its notify route; False: it is reached by NOTIFY_ANY_ROUTE
    ack_content_type: str

    @property
    def route_key(self) -> str: ...

    @property
    def metric(self) -> str: ...

    def outcome_of(self, state: str) -> Outcome | None: ...

    def refund_event_of(self, status: str) -> RefundEvent | None: ...

    def ack_success(self) -> tuple[int, str]: ...

    def ack_failure(self, status: int, message: str) -> tuple[int, str]: ...

    def read_notification(
        self,
        request: Any,
        merchant: Any,
        merchants: Any,
        *,
        clock: Callable[[], float],
        window_s: int,
        received_at: float | None = None,
    ) -> ReadNotification:
        """One callback on this channel's notify route for a configured `merchant` (the directory's, for a
        key refresh): verified over the raw bytes, decrypted, parsed (channels/<name>/notify.py). `clock` and
        `received_at` (a manual replay's first arrival) judge a timestamp window of `window_s` seconds."""
        ...

    def pull(self, merchants: Any, *, attempts: int, sleep: Callable[[float], None]) -> PullClient: ...

    def refund_client(
        self, merchants: Any, settings: Any, clock: Callable[[], float], merchant_id: str
    ) -> RefundClient:
        """The merchant's refund client (the directory's UnknownMerchant, an errors.NotFound, if this channel
        has no credentials for it: refund_clients then asks the next channel of the same stored value)."""
        ...

    def bill_source(self, merchants: Any) -> BillSource | None:
        """The daily bill download (None: this channel's payments are in another channel's bill)."""
        ...

    def open_bill(self, data: bytes) -> Bill | None:
        """A bill file of this channel opened for parsing (None: it has no bill of its own)."""
        ...

    def merchant(self, merchants: Any, merchant_id: str) -> Any:
        """The configured merchant (the directory's UnknownMerchant, an errors.NotFound, if none)."""
        ...

    def merchant_desk(self, merchants: Any) -> MerchantDesk:
        """What a merchant record of this channel holds, over the directory `merchants` (service/merchants.py):
        channels/<name>/merchant.py's `Desk` (its own accessors typed by `<name>_desk(directory)`)."""
        ...

    def order_refusal(self, merchant: Any, prepay: bool) -> str | None:
        """Why this configured merchant cannot take an order (POST /orders answers 400), None if it can."""
        ...

    def refresh_certificates(
        self, merchants: Any, merchant_ids: list[str], max_age_s: float
    ) -> dict[str, bool]:
        """The keys function's download of what the channel serves for rotation (WeChat v3 platform certificates,
        R3) for merchants whose stored set is older than `max_age_s`: {merchant id: downloaded}; {} when the
        channel has nothing to download (service/keys.py)."""
        ...

    def synthetic(self) -> Synthetic | None:
        """The channel's synthetic payment for the heartbeat (service/heartbeat.py), None if it has none."""
        ...

    def security_echo(self, merchants: Any, merchant_id: str, notify_url: str, message: str) -> str | None:
        """The channel's own connectivity check, which moves no money (the heartbeat's echo, service/heartbeat.py):
        ask the channel, with the merchant's credentials, to send a signed callback to `notify_url`. The message
        the signed answer echoed ("" when it echoed none); None when the channel has no such call. Raises
        errors.ChannelError (refused, unreachable, answer not verified) or errors.NotFound (not configured)."""
        ...

    def redact_body(self, text: str, hide: Callable[[str], str]) -> str:
        """A stored callback body that is not JSON, with what this channel encrypts for the merchant replaced
        by `hide(ciphertext)` (the console never shows it); unchanged if the channel encrypts nothing there."""
        ...

    def paid_by_transaction(
        self, merchants: Any, mchid: str, transaction_id: str
    ) -> tuple[PaymentNotice, bytes]:
        """The channel's answer about one of its transaction ids, as a source="recon" notice and the verified
        body (reconciliation's "channel has it, we don't", R36); errors.ChannelError / ParseError /
        NotFound when it cannot say."""
        ...

    def prepay(
        self, merchants: Any, merchant: Any, order: dict[str, Any], *, expire_minutes: int, expire_s: float
    ) -> dict[str, str]:
        """Ask the channel for the buyer's QR content: {"code_url": …} or {"qr_code": …} to store on the
        order (an errors.ChannelError if the channel says no)."""
        ...

    def fund_flow_terms(self) -> FundFlowTerms | None:
        """The channel's settlement lag and fund-flow accounts by default (R45), None if it has no fund flow."""
        ...

    def combine(self) -> CombinePayments | None:
        """The channel's combine payment (POST /orders/combine), None if it has none."""
        ...

    def fund_flow_source(self, merchants: Any) -> Any | None:
        """The channel's fund-flow bill download (R45), None if it has none wired."""
        ...

    def open_fund_flow(self, data: bytes, account: str) -> Any | None:
        """A kept fund-flow file of this channel opened for parsing (None: no fund-flow parser)."""
        ...

    def refund_from_basis(self, basis: Mapping[str, Any], payment: Settlement | None) -> Refund:
        """A refund's figures from the basis this channel's refund report kept (R43), with the booked payment's
        Settlement when known (channels/<name>/settlement.py; channels/settlement.py asks)."""
        ...

    def live_check(self, merchants: Any, merchant_id: str, *, download: bool = True) -> list[Finding]:
        """Harmless signed calls to the channel with the merchant's stored credentials (R47): each Finding
        passes, NAMES the wrong credential with its fix, or could not tell (channels/doctor.py). `download`:
        also download what the channel serves for rotation (WeChat v3 certificates in certificate mode)."""
        ...


@dataclass(frozen=True)
class ChannelNames:
    """The spellings of one channel (what `Channel` declares as data); channel.py classes extend it."""

    name: str
    label: str
    stored: str
    route: str
    order_word: str
    api: str | None
    merchant_kind: str
    merchant_param: str
    currencies: tuple[str, ...] | None
    reconciled: bool
    replay_headers: tuple[str, ...] = ()  # request headers its signature covers (none: signed in the body)
    environment: tuple[ChannelVariable, ...] = ()  # the variables its package reads
    own_route: bool = True  # False: a new channel's callbacks come by NOTIFY_ANY_ROUTE (no template edit)

    @property
    def route_key(self) -> str:
        """The API Gateway routeKey of the notify route, as in template.yaml (NOTIFY_ANY_ROUTE for a channel
        without a route of its own)."""
        return f"POST /notify/{self.route}/{{{self.merchant_param}}}" if self.own_route else NOTIFY_ANY_ROUTE

    @property
    def metric(self) -> str:
        """The `channel` metric dimension value (template alarms filter on it)."""
        return self.route

    def combine(self) -> CombinePayments | None:
        return None

    def fund_flow_terms(self) -> FundFlowTerms | None:
        return None

    def fund_flow_source(self, merchants: Any) -> Any | None:
        return None  # a channel whose fund flow is another's to give (WeChat v3's: v2's choice, R45)

    def open_fund_flow(self, data: bytes, account: str) -> Any | None:
        return None

    def merchant_desk(self, merchants: Any) -> MerchantDesk:
        """The channel package's merchant desk (channels/<name>/merchant.py, imported on first use)."""
        module = importlib.import_module(f"tally.channels.{self.name}.merchant")
        desk: MerchantDesk = module.Desk(merchants)
        return desk

    def order_refusal(self, merchant: Any, prepay: bool) -> str | None:
        return None

    def refresh_certificates(
        self, merchants: Any, merchant_ids: list[str], max_age_s: float
    ) -> dict[str, bool]:
        return {}  # nothing to download: the keys are configured (public keys, API keys)

    def synthetic(self) -> Synthetic | None:
        return None

    def security_echo(self, merchants: Any, merchant_id: str, notify_url: str, message: str) -> str | None:
        return None  # no echo call: WeChat Pay v3 documents one (channels/wechatpay_v3/echo.py)

    def redact_body(self, text: str, hide: Callable[[str], str]) -> str:
        return text

    def refund_from_basis(self, basis: Mapping[str, Any], payment: Settlement | None) -> Refund:
        """The channel package's refund builder (channels/<name>/settlement.py, imported on first use)."""
        module = importlib.import_module(f"tally.channels.{self.name}.settlement")
        refund: Refund = module.refund_from_basis(basis, payment)
        return refund

    def live_check(self, merchants: Any, merchant_id: str, *, download: bool = True) -> list[Finding]:
        """The channel package's doctor (channels/<name>/doctor.py, imported on first use)."""
        doctor = importlib.import_module(f"tally.channels.{self.name}.doctor")
        return doctor.live_check(merchants, merchant_id, download=download)

    def read_notification(
        self,
        request: Any,
        merchant: Any,
        merchants: Any,
        *,
        clock: Callable[[], float],
        window_s: int,
        received_at: float | None = None,
    ) -> ReadNotification:
        """The channel package's notify step (channels/<name>/notify.py, imported on first use)."""
        notify = _NOTIFY.get(self.name) or _NOTIFY.setdefault(
            self.name, importlib.import_module(f"tally.channels.{self.name}.notify")
        )
        return notify.read_notification(
            request, merchant, merchants, clock=clock, window_s=window_s, received_at=received_at
        )


_NOTIFY: dict[str, Any] = {}  # channel name -> its notify module, imported on the first callback
_BUILTIN = (
    "tally.channels.wechatpay_v3.channel",
    "tally.channels.wechatpay_v2.channel",
    "tally.channels.alipay.channel",
)
_CHANNELS: dict[str, Channel] = {}


def register(channel: Channel) -> Channel:
    """Add a channel; its spellings must not collide with another channel's (stored values may be shared)."""
    for other in _CHANNELS.values():
        clash = {channel.name, channel.route, channel.order_word} & {
            other.name,
            other.route,
            other.order_word,
        }
        if other.name != channel.name and clash:
            raise ValueError(f"channel {channel.name} spells {sorted(clash)} like {other.name}")
    _CHANNELS[channel.name] = channel
    _METRIC_OF.clear()
    _BY_STORED.clear()
    return channel


def all_channels() -> list[Channel]:
    """Every registered channel, in registration order (v3, v2, Alipay)."""
    if not _CHANNELS:
        for module in _BUILTIN:
            register(importlib.import_module(module).CHANNEL)
    return list(_CHANNELS.values())


def default() -> Channel:
    """The channel of a POST /orders without `"channel"`: the first registered (WeChat Pay v3)."""
    return all_channels()[0]


def names() -> list[str]:
    return [c.name for c in all_channels()]


def get(name: str) -> Channel:
    """The channel of this name (KeyError for one nobody registered)."""
    for channel in all_channels():
        if channel.name == name:
            return channel
    raise KeyError(f"no channel {name!r}: one of {', '.join(names())}")


def find(match: Callable[[Channel], bool]) -> Channel | None:
    return next((c for c in all_channels() if match(c)), None)


NOTIFY_ANY_ROUTE = "POST /notify/{channel}/{merchant}"  # template.yaml: a channel without a route of its own


def by_route_key(route_key: str) -> Channel | None:
    """The channel whose notify route API Gateway matched ("POST /notify/wechatpay/{mchid}")."""
    return find(lambda c: c.own_route and c.route_key == route_key)


def for_notify(route_key: str, path_params: dict[str, str]) -> Channel | None:
    """The channel a callback is for: by the route API Gateway matched, or for NOTIFY_ANY_ROUTE (the most
    specific route wins, so only a channel without its own route gets there) by the path's channel word."""
    if route_key == NOTIFY_ANY_ROUTE:
        word = path_params.get("channel", "")
        return find(lambda c: not c.own_route and c.route == word)
    return by_route_key(route_key)


def by_path(path: str) -> Channel | None:
    """The channel a notify path belongs to (/notify/wechatpay-v2/… is v2's, not v3's)."""
    return find(lambda c: path.startswith(f"/notify/{c.route}/"))


def by_order_word(word: str) -> Channel | None:
    """POST /orders `"channel"` → the channel (None: not one we take)."""
    return find(lambda c: c.order_word == word)


def by_route(route: str) -> Channel | None:
    """The CLI's and the metric's word (wechatpay, wechatpay-v2, alipay) → the channel."""
    return find(lambda c: c.route == route)


def by_merchant_kind(kind: str) -> Channel | None:
    """A merchants-table row's `channel` (wechatpay, wechatpay_v2, alipay) → the channel."""
    return find(lambda c: c.merchant_kind == kind)


def by_stored(stored: str) -> Channel | None:
    """A row's `channel` → the channel that owns the stored value's tables (for "wechatpay": v3, whose
    state and refund tables v2's words are translated into). Remembered: every callback asks (issue #20)."""
    owner = _BY_STORED.get(stored)
    if owner is None:
        owner = find(lambda c: c.stored == stored)
        if owner is not None:  # only the registered values: whatever else is asked never grows this
            _BY_STORED[stored] = owner
    return owner


_BY_STORED: dict[str, Channel] = {}  # stored value -> owner, emptied when a channel registers


def for_order(order: dict[str, Any]) -> Channel | None:
    """The channel whose API queries this order: its `api` when set (WeChat v2 orders), else its channel."""
    api = order.get("api")
    if api:
        return find(lambda c: c.api == api)
    return by_stored(str(order.get("channel") or ""))


def refund_clients(
    merchants: Any, settings: Any, clock: Callable[[], float]
) -> dict[str, Callable[[str], RefundClient]]:
    """stored channel -> (merchant id -> refund client). A stored value shared by several channels (WeChat v2
    and v3) asks them in registration order: v3 when the merchant has v3 credentials, else v2 (R26)."""
    from tally import errors

    def for_stored(stored: str) -> Callable[[str], RefundClient]:
        sharing = [c for c in all_channels() if c.stored == stored]

        def client(merchant_id: str) -> RefundClient:
            for channel in sharing[:-1]:
                try:
                    return channel.refund_client(merchants, settings, clock, merchant_id)
                except errors.NotFound:
                    continue
            return sharing[-1].refund_client(merchants, settings, clock, merchant_id)

        return client

    return {stored: for_stored(stored) for stored in stored_values()}


def stored_values() -> list[str]:
    """The distinct stored `channel` values (wechatpay, alipay)."""
    return list(dict.fromkeys(c.stored for c in all_channels()))


def reconciled() -> tuple[str, ...]:
    """The stored channels whose bills the recon function reads."""
    return tuple(dict.fromkeys(c.stored for c in all_channels() if c.reconciled))


def replay_header_names() -> tuple[str, ...]:
    """Every channel's `replay_headers`, once each: what a kept callback stores of its request's headers."""
    return tuple(dict.fromkeys(name for channel in all_channels() for name in channel.replay_headers))


def fund_flow_terms(spelling: str) -> FundFlowTerms | None:
    """A channel's fund-flow defaults by its stored value, route or name (a stored value shared by two channels:
    the first registered's); None for a word no channel owns or a channel without a fund flow."""
    channel = by_stored(spelling) or by_route(spelling) or find(lambda c: c.name == spelling)
    return channel.fund_flow_terms() if channel is not None else None


def environment() -> tuple[ChannelVariable, ...]:
    """Every channel's variables, once each by name (WeChat v2 reads v3's gateway)."""
    seen: dict[str, ChannelVariable] = {}
    for channel in all_channels():
        for variable in channel.environment:
            seen.setdefault(variable.name, variable)
    return tuple(seen.values())


def metric_values() -> tuple[str, ...]:
    """The `channel` metric dimension's values (plus observability.OTHER for anything else)."""
    return tuple(c.metric for c in all_channels())


def metric_of(spelling: str | None) -> str | None:
    """Any spelling of a channel (name, stored, route, order word, api) → its metric value; None if unknown.
    A stored value shared by two channels means the first registered (v3 for "wechatpay")."""
    if not _METRIC_OF:
        for channel in reversed(all_channels()):  # the first registered wins a shared stored value
            _METRIC_OF[channel.stored] = channel.metric
        for channel in all_channels():
            for word in (channel.name, channel.route, channel.order_word, channel.api):
                if word:
                    _METRIC_OF[word] = channel.metric
    return _METRIC_OF.get(spelling or "")


_METRIC_OF: dict[str, str] = {}  # filled on first use (count() calls this for every metric)


def _tell_the_metrics() -> None:
    """The metrics' `channel` dimension speaks the registry's words (observability imports no channel)."""
    from tally import observability

    observability.use_channels(metric_of, metric_values)


_tell_the_metrics()
