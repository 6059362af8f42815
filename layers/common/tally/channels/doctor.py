"""The live credential doctor's vocabulary (R47): what one harmless signed call to a channel proved.

Each channel's `doctor.py` makes its calls (an order query of a number that cannot exist; WeChat v3 in
certificate mode also downloads the platform certificates) and answers a list of `Finding`s:

- `PASS`: the channel accepted our signature and we verified its signed answer with the configured keys;
- `FAIL`: a credential is wrong; `item` NAMES it, `fix` says what to do (service/merchants.py then marks the
  merchant not ready: POST /orders answers 409 until a check passes);
- `UNKNOWN`: the channel or the network failed (5xx, timeout, rate limit): NOT a credential failure, the
  merchant's readiness is left as it was ("could not check").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"

PROBE_PREFIX = "TALLYDOCTOR"  # + 16 random hex characters: a number no order of ours has


@dataclass(frozen=True)
class Finding:
    verdict: str  # PASS | FAIL | UNKNOWN
    check: str  # what was asked of the channel
    item: str = ""  # FAIL: the wrong item, named; UNKNOWN: why we could not tell
    fix: str = ""  # FAIL: what a person does about it
    detail: str = ""  # the channel's own answer (code, message), never a secret

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict_of(findings: list[Finding]) -> str:
    """FAIL if any call proved a credential wrong; else UNKNOWN if any could not tell; else PASS."""
    verdicts = {f.verdict for f in findings}
    if FAIL in verdicts:
        return FAIL
    if UNKNOWN in verdicts or not findings:
        return UNKNOWN
    return PASS


def probe_number(token: str) -> str:
    """An out_trade_no no order can have: the doctor's prefix + 16 hex characters (27 characters)."""
    return f"{PROBE_PREFIX}{token[:16].upper()}"
