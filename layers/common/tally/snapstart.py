"""Lambda SnapStart (docs/deploy.md "SnapStart"): what runs before Lambda snapshots an initialised container and
after it resumes one from the snapshot. tally/bootstrap.py imports this module, and every handler imports
bootstrap, so each function registers the hooks once, at init.

Before the snapshot (`prime`): the settings and the table clients are built (boto3's session, endpoint and
service-model loading: the bulk of a cold start's CPU), so a resumed container starts with them. Nothing is
called over the network and no key or TLS context is made: connections and secrets do not belong in a snapshot
that many containers resume from.

After a restore (`reseed`): every container resumed from one snapshot starts with the same memory, so whatever
holds per-process randomness is made unique again:
- `random`'s global generator (the retry jitter of tally and botocore) is re-seeded from os.urandom; the code
  keeps no `random.Random` instance of its own and no nonce made at import (nonces, ids and secrets come from
  `secrets`/`os.urandom`/uuid4, which read the kernel's generator at each call);
- fresh entropy is mixed into OpenSSL's generator (`ssl.RAND_add`), which TLS handshakes draw from;
- every kept HTTP connection is dropped (tally/httpclient.py): a socket from before the snapshot is dead.

`snapshot_restore_py` exists only in Lambda's managed Python runtimes; elsewhere (tests, the embedded stack,
the CLI) the hooks go to a local registry, `HOOKS`, and nothing calls them unless a test does.
"""

from __future__ import annotations

import os
import random
import ssl
from collections.abc import Callable
from typing import Any

HOOKS: dict[str, list[Callable[[], Any]]] = {"before_snapshot": [], "after_restore": []}

try:  # Lambda's Python runtime (SnapStart's runtime hooks)
    import snapshot_restore_py as _runtime  # type: ignore[import-not-found]

    _before_snapshot = _runtime.register_before_snapshot
    _after_restore = _runtime.register_after_restore
except ImportError:  # anywhere else: the local registry

    def _before_snapshot(func: Callable[[], Any]) -> Callable[[], Any]:
        HOOKS["before_snapshot"].append(func)
        return func

    def _after_restore(func: Callable[[], Any]) -> Callable[[], Any]:
        HOOKS["after_restore"].append(func)
        return func


def prime() -> None:
    """Build what every function uses before the snapshot is taken; a failure leaves it to the first request
    (a missing setting there is the same error it always was)."""
    from tally import bootstrap

    try:
        bootstrap.settings()
        bootstrap.tables()
    except Exception:  # noqa: BLE001, S110 - priming is an optimisation: init must not fail because of it
        pass


def reseed() -> None:
    random.seed()  # from os.urandom
    ssl.RAND_add(os.urandom(64), 64.0)
    from tally import httpclient

    httpclient.reset()


_registered = False


def register() -> None:
    """Register both hooks once per process (the runtime calls before-snapshot hooks in reverse order of
    registration and after-restore hooks in order)."""
    global _registered
    if not _registered:
        _registered = True
        _before_snapshot(prime)
        _after_restore(reseed)


def run_local(stage: str) -> None:
    """Call the hooks of `stage` ("before_snapshot" or "after_restore") registered locally (tests)."""
    hooks = HOOKS[stage]
    for hook in reversed(hooks) if stage == "before_snapshot" else list(hooks):
        hook()


register()
