"""Merchant configuration: a row in the merchants table, credentials in Secrets Manager.

The directory is channel-blind: what a merchant record of a channel holds (its credential schema, how a secret
is parsed and refused, its accessors such as `add_alipay(...)`) lives in that channel's package,
channels/<name>/merchant.py, reached through the registry (`Channel.merchant_desk`) and typed by the package's
`<name>_desk(directory)`. Here: the cache, the secret store, readiness (R47),
expiry warnings, the local and live checks and the merchant list, for every channel alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.domain.clock import CHINA
from tally.observability import M, count, logger
from tally.store.keys import PlatformCertStore
from tally.store.secrets import SecretStore
from tally.store.tables import MerchantStore, iso_now

if TYPE_CHECKING:  # the notify cold start never imports the journal: only a change of a merchant writes it
    from tally.service.journal import DecisionJournal


class UnknownMerchant(errors.NotFound, LookupError):
    pass


EXPIRY_WARNING_S = 7 * 86400  # a certificate expiring sooner raises PlatformCertExpiring


KEPT_ON_UPDATE = ("settlement_lag", "fund_accounts")  # R45: a re-add keeps the fund-flow figures


class MerchantDirectory:
    """Credentials parsed once per container (loading a PEM key costs ~30 ms), cached for `ttl_s`.

    A channel's accessors are its merchant desk's methods (channels/<name>/merchant.py `Desk`, reached typed
    through `<name>_desk(directory)`); the desk keeps its records here (`cached`/`keep`) and stores through
    `save`/`put_row`."""

    def __init__(
        self,
        store: MerchantStore,
        secrets: SecretStore,
        secret_prefix: str,
        channel_values: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        ttl_s: float = 300,
        refresh_every_s: float = 60,
        http_timeout_s: float = 3.0,
        certs: PlatformCertStore | None = None,
        journal: Callable[[], DecisionJournal | None] | None = None,
    ):
        self.store = store
        self._journal = (
            journal  # built on a merchant's first change (docs/audit.md), never on the notify path
        )
        self.actor = "system"  # who changes merchants through this directory (the CLI sets its caller)
        self.certs = (
            certs  # store/keys.PlatformCertStore: certificates the schedule downloaded, for every container
        )
        self.secrets = secrets
        self.secret_prefix = secret_prefix
        self.channel_values = dict(channel_values or {})  # settings.channel_values: the channels' gateways
        self.clock = clock
        self.ttl_s = ttl_s
        self.refresh_every_s = refresh_every_s
        self.http_timeout_s = http_timeout_s
        self._cache: dict[str, Any] = {}  # "<merchant kind>#<merchant id>" -> the channel's merchant record
        self._desks: dict[str, Any] = {}  # channel name -> its merchant desk
        self._lock = threading.Lock()

    # ------------------------------------------------------------ the channels' desks
    def desk(self, channel: channel_registry.Channel) -> channel_registry.MerchantDesk:
        """The channel's merchant desk over this directory (channels/<name>/merchant.py); a caller of the
        channel's own accessors asks the package's typed `<name>_desk(directory)`, which asks here."""
        found = self._desks.get(channel.name)
        if found is None:
            found = self._desks.setdefault(channel.name, channel.merchant_desk(self))
        return found

    # ------------------------------------------------------------ what a desk uses
    def setting(self, variable: channel_registry.ChannelVariable) -> str:
        """A channel's own variable (its gateway's base URL, …) as settings read it, else its default."""
        value = self.channel_values.get(variable.name)
        return value if value is not None else variable.parse(variable.default)

    def cached(self, kind: str, merchant_id: str) -> Any:
        """The record loaded earlier in this container (the desk judges its age against `ttl_s`), or None."""
        return self._cache.get(f"{kind}#{merchant_id}")

    def keep(self, kind: str, merchant_id: str, record: Any) -> None:
        with self._lock:
            self._cache[f"{kind}#{merchant_id}"] = record

    def row(self, kind: str, merchant_id: str, missing: str) -> dict[str, Any]:
        """The merchant's row; UnknownMerchant(`missing`) if it is not configured."""
        row = self.store.get(kind, merchant_id)
        if row is None:
            raise UnknownMerchant(missing)
        return row

    def unknown(self, message: str) -> UnknownMerchant:
        """The error a desk raises for a merchant it cannot serve (channels/ may not import service/)."""
        return UnknownMerchant(message)

    def now_iso(self) -> str:
        return iso_now(self.clock())

    def secret(self, row: dict[str, Any]) -> dict[str, Any]:
        return self.secrets.get(row["secret_name"])

    def refreshed(self) -> None:
        count(M.CERT_REFRESHED)

    def refresh_failed(self) -> None:
        count(M.CERT_REFRESH_FAILED)  # alarmed

    def log_warning(self, message: str, **extra: Any) -> None:
        logger.warning(message, extra=extra)

    def warn_expiring(self, who: str, expires: dict[str, float]) -> list[str]:
        """Count PlatformCertExpiring for every certificate that expires within 7 days (alarmed)."""
        now = self.clock()
        soon = [name for name, when in expires.items() if when - now < EXPIRY_WARNING_S]
        for name in soon:
            count(M.CERT_EXPIRING)
            logger.warning(
                "certificate expires within 7 days",
                extra={
                    "merchant": who,
                    "certificate": name,
                    "days_left": round((expires[name] - now) / 86400, 1),
                },
            )
        return soon

    def save(
        self, kind: str, merchant_id: str, secret: dict[str, Any], row: dict[str, Any]
    ) -> dict[str, Any]:
        """Store a merchant's secret and row (its readiness kept, R47) and drop this container's record."""
        name = f"{self.secret_prefix}{kind}/{merchant_id}"
        from tally.service.key_facts import key_change

        before = self.secrets.find(name) if self._journal is not None else None
        self.secrets.put(name, secret)
        row["secret_name"] = name
        self._keep_readiness(kind, merchant_id, row)
        self._put(kind, merchant_id, row, key_change(before, secret))
        self.forget(kind, merchant_id)
        return row

    def put_row(self, kind: str, merchant_id: str, row: dict[str, Any]) -> dict[str, Any]:
        """Store a row without a secret of its own (a sub-merchant: its provider's keys act, R11)."""
        self._put(kind, merchant_id, row, None)
        self.forget(kind, merchant_id)
        return row

    def _put(self, kind: str, merchant_id: str, row: dict[str, Any], keys: dict[str, Any] | None) -> None:
        """The merchant row; with a journal, its `merchant.configured` record (who, which row fields, what of the
        keys may be said: key_facts.py) in the same transaction, on the merchant's own chain. The secret went
        to Secrets Manager just before (no DynamoDB transaction reaches it): its versions are kept there."""
        journal = self._journal() if self._journal is not None else None
        if journal is None:
            self.store.put(row)
            return
        facts = {
            "merchant_kind": kind,
            "merchant_id": merchant_id,
            "by": self.actor,
            "row": {k: v for k, v in sorted(row.items()) if k not in ("pk", "updated_at") and _plain(v)},
            "keys": keys,
        }
        # imported here, not at the top: the notify cold start never writes the journal
        from tally.domain.journal import OWN_LANE

        journal.commit(
            merchant_id,
            f"merchant#{kind}#{merchant_id}",
            kind="merchant.configured",
            at=self.now_iso(),
            facts=facts,
            items=[self.store.row_put(row)],
            transact=self.store.transact,
            lane=OWN_LANE,  # the merchant's own chain of the day: never contends with its payments
        )

    def _keep_readiness(self, kind: str, merchant_id: str, row: dict[str, Any]) -> None:
        """R47: new credentials do not make a not-ready merchant ready: only a passing live check does."""
        before = self.store.get(kind, merchant_id) or {}
        for name in ("ready", "ready_reason", "checked_at", *KEPT_ON_UPDATE):
            if name in before:
                row.setdefault(name, before[name])

    def forget(self, kind: str, merchant_id: str) -> None:
        """Drop this container's cached merchant (its row changed: readiness, R47)."""
        with self._lock:
            self._cache.pop(f"{kind}#{merchant_id}", None)

    # ------------------------------------------------------------ key rotation, off the hot path
    def check_expiry(self, kind: str, merchant_id: str) -> list[str]:
        """Count PlatformCertExpiring for every certificate of a merchant that expires within 7 days, whether or
        not a callback loaded it lately (the schedule calls this daily-ish): whatever certificates its channel's
        record holds (a sub-merchant's are its provider's; an API key has none)."""
        found = channel_registry.by_merchant_kind(kind)
        return list(self.desk(found).check_expiry(merchant_id)) if found else []


def _plain(value: Any) -> bool:
    """A row value a journal record may hold as it is (strings, integers, booleans, lists of them)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, bool, int))


def check_merchant(directory: MerchantDirectory, channel: str, merchant_id: str) -> list[dict[str, Any]]:
    """Prove a stored configuration works before it takes payments (`tally merchant check`).

    Each check: {"check", "ok", "detail"}. Only local proofs with the stored keys (the channel's desk,
    channels/<name>/merchant.py `local_check`): a test resource is encrypted and decrypted, test signatures
    made and verified where the channel's key material allows, and every certificate's expiry is reported
    (fails within 7 days). Secrets never appear in details."""
    checks: list[dict[str, Any]] = []
    now = directory.clock()
    # the CLI's word (wechatpay, alipay, wechatpay-v2) or a merchants-table channel → the channel
    found = channel_registry.by_route(channel) or channel_registry.by_merchant_kind(channel)
    if found is None:
        raise ValueError(f"unknown channel {channel!r}: {_cli_words()}")

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    def expiry(name: str, when: float) -> None:
        days = (when - now) / 86400
        add(f"expiry {name}", when - now >= EXPIRY_WARNING_S, f"{days:.1f} days left")

    directory.desk(found).local_check(merchant_id, add, expiry)
    return checks


def _cli_words() -> str:
    return ", ".join(c.route for c in channel_registry.all_channels())


# ------------------------------------------------------------------ the merchant list (CLI and console)


def cli_word(merchant_kind: str) -> str:
    """A merchants row's channel as the CLI spells it (`tally merchant add wechatpay-v2`): the channel's route."""
    channel = channel_registry.by_merchant_kind(merchant_kind)
    return channel.route if channel else merchant_kind


def list_merchants(directory: MerchantDirectory) -> list[dict[str, Any]]:
    """One line per configured merchant. Certificate expiry comes from the loaded credentials (the secret is
    read to learn which certificates it holds; nothing of it is returned)."""
    out = []
    for channel, merchant_id in directory.store.configured():
        row = directory.store.get(channel, merchant_id) or {}
        item = {
            "channel": cli_word(channel),
            "id": merchant_id,
            "mode": row.get("mode", "direct"),
            "provider": row.get("sp_mchid") or row.get("sp_app_id"),
            "key_mode": row.get("key_mode") or ("public_key" if row.get("public_key_id") else None),
            "tenant": row.get("tenant"),
            "appid": row.get("appid") or None,
            "notify_url": row.get("notify_url"),
            "updated_at": row.get("updated_at"),
            "certificates": [],
            "cert_expiry": None,
        }
        try:
            expires = _expiries(directory, channel, merchant_id, item["mode"])
        except Exception as exc:  # noqa: BLE001 - the list still shows the merchant, with why expiry is unknown
            item["cert_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            expires = {}
        item["certificates"] = [
            {"name": name, "not_after": _china(when)}
            for name, when in sorted(expires.items(), key=lambda kv: kv[1])
        ]
        item["cert_expiry"] = item["certificates"][0]["not_after"] if item["certificates"] else None
        out.append(item)
    return out


def _expiries(directory: MerchantDirectory, channel: str, merchant_id: str, mode: str) -> dict[str, float]:
    if mode == "partner":
        return {}  # the provider's certificates act: see the provider's line
    found = channel_registry.by_merchant_kind(channel)
    return dict(directory.desk(found).expiries(merchant_id)) if found else {}


def _china(epoch_s: float) -> str:
    return datetime.fromtimestamp(float(epoch_s), CHINA).isoformat(timespec="seconds")


# ------------------------------------------------------------ the live doctor and readiness (R47)


class MerchantNotReady(errors.Conflict):
    """R47: the merchant's credentials failed the live check with its channel: POST /orders answers 409."""

    code = "merchant_not_ready"


def not_ready_reason(row: dict[str, Any]) -> str | None:
    """The reason a merchant row may not take an order (None: it may). A row never checked may (R47 marks a
    merchant not ready only on a failed check)."""
    if row.get("ready") is False:
        return str(row.get("ready_reason") or "the live credential check failed")
    return None


def live_check(
    directory: MerchantDirectory, channel: str, merchant_id: str, *, download: bool = True
) -> dict[str, Any]:
    """`tally merchant check --live`, `merchant add` and the hourly keys run: harmless signed calls to the channel
    with the stored credentials (channels/<name>/doctor.py), then the merchant's readiness (R47):

    - a FAIL marks it not ready with the named item and its fix (POST /orders answers 409 with it); a ready
      (or never checked) merchant turning not ready counts MerchantNotReady once, on that transition (alarmed);
    - every call PASS marks it ready;
    - UNKNOWN (5xx, timeout, rate limit) leaves readiness as it was: "could not check", not a credential fault.
    """
    from tally.channels.doctor import FAIL, PASS, UNKNOWN, Finding, verdict_of

    found = channel_registry.by_route(channel) or channel_registry.by_merchant_kind(channel)
    if found is None:
        raise ValueError(f"unknown channel {channel!r}: {_cli_words()}")
    try:
        findings = found.live_check(directory, merchant_id, download=download)
    except UnknownMerchant:
        raise
    except Exception as exc:  # noqa: BLE001 - an unexpected failure is "could not check", never a verdict
        findings = [
            Finding(UNKNOWN, "live check", "could not check: the check itself failed", detail=str(exc)[:200])
        ]
    verdict = verdict_of(findings)
    kind, who = found.merchant_kind, f"{found.route}/{merchant_id}"
    report: dict[str, Any] = {
        "channel": found.route,
        "merchant": merchant_id,
        "verdict": verdict,
        "findings": [f.as_dict() for f in findings],
        "ready": None,
        "turned_not_ready": False,
    }
    if verdict == UNKNOWN:
        row = directory.store.get(kind, merchant_id) or {}
        report["ready"] = row.get("ready")
        logger.warning(
            "live credential check could not check", extra={"merchant": who, "findings": report["findings"]}
        )
        return report
    failed = next((f for f in findings if f.verdict == FAIL), None)
    reason = f"{failed.item}: {failed.fix}" if failed else ""
    before = directory.store.set_readiness(
        kind, merchant_id, ready=verdict == PASS, reason=reason[:500], checked_at=iso_now(directory.clock())
    )
    directory.forget(kind, merchant_id)
    report["ready"] = verdict == PASS
    if verdict == FAIL and before is not False:
        report["turned_not_ready"] = True
        count(M.MERCHANT_NOT_READY)
        logger.error(
            "merchant turned not ready: its credentials fail the live check",
            extra={"merchant": who, "reason": reason[:300]},
        )
    return report
