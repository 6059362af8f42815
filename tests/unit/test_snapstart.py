"""tally/snapstart.py: every function registers SnapStart's hooks through bootstrap; after a restore the random
state is re-seeded (two containers resumed from one snapshot do not draw the same numbers) and kept HTTP
connections are dropped; before the snapshot the shared clients are built. Outside Lambda the hooks land in
the module's own registry, which these tests call as the runtime would."""

from __future__ import annotations

import random

from tally import bootstrap, httpclient, snapstart


def test_bootstrap_registers_both_hooks_once():
    assert bootstrap.snapstart is snapstart
    assert snapstart.HOOKS["before_snapshot"].count(snapstart.prime) == 1
    assert snapstart.HOOKS["after_restore"].count(snapstart.reseed) == 1
    snapstart.register()
    assert snapstart.HOOKS["after_restore"].count(snapstart.reseed) == 1


def test_after_restore_reseeds_random():
    """Two containers resumed from one snapshot hold the same generator state: without the hook they would draw
    the same jitter; with it each draws its own."""
    random.seed(1234)  # the state the snapshot holds
    snapshot = random.getstate()
    without_hook = [random.random() for _ in range(4)]
    random.setstate(snapshot)
    assert [random.random() for _ in range(4)] == without_hook  # what a second container would draw
    drawn = []
    for _ in range(2):  # two restores of the same snapshot
        random.setstate(snapshot)
        snapstart.run_local("after_restore")
        drawn.append([random.random() for _ in range(4)])
    assert drawn[0] != without_hook and drawn[1] != without_hook and drawn[0] != drawn[1]


def test_after_restore_drops_kept_connections(monkeypatch):
    dropped = []
    monkeypatch.setattr(httpclient, "reset", lambda: dropped.append(True))
    snapstart.run_local("after_restore")
    assert dropped == [True]


def test_before_snapshot_builds_the_shared_clients(monkeypatch):
    built = []
    monkeypatch.setattr(bootstrap, "settings", lambda: built.append("settings"))
    monkeypatch.setattr(bootstrap, "tables", lambda: built.append("tables"))
    snapstart.run_local("before_snapshot")
    assert built == ["settings", "tables"]


def test_priming_never_fails_the_init(monkeypatch):
    def broken():
        raise RuntimeError("no settings here")

    monkeypatch.setattr(bootstrap, "settings", broken)
    snapstart.prime()  # the first request meets the error instead, as without SnapStart
