"""Upgrade under fault: a simulated day during which the product's version changes (docs/proof.md).

The previous release (the commit in tests/sim/PREVIOUS_RELEASE) is taken from git (`git archive`, no network)
into a temporary tree and runs as a warm container of its own: a process whose `sys.path` puts that release's
`layers/common` and root first (tests/sim/old_container.py), talking through a moto server to the very tables
and queues the current release uses in this process (moto's server thread shares the in-process backends).

A day is an ordinary seeded day (tests/sim/day.py: its orders, channel faults, AWS faults, hostile tenants)
plus a deploy drawn from the seed:

    upgrade   the previous release alone until `begin_s`; between `begin_s` and `end_s` both, each invocation
              (callback, SQS batch, poller run) going to the new release with a probability that grows from
              0 to 1 (new containers start, old ones stay warm and keep taking work); from `end_s` on the
              current release alone, through the night's recovery and the next morning's reconciliation;
    rollback  the same from the current release back to the previous one.

Orders, rows and messages written by one release are read by the other, in both directions; the day's
invariants (scenario.check, the refund bounds at every step, recon's I6) are checked at the end as for any day.
What the old container does not get: the AWS fault hooks (they are botocore hooks of this process), so the
AWS faults of a day fire only on calls the current release makes.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tally_local.lambda_io import emf_metrics
from tests.sim import day as d
from tests.sim.scenario import M_APPLY_FAILED, Recovery, Result, Scenario, World

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RELEASE_FILE = HERE / "PREVIOUS_RELEASE"
UPGRADE, ROLLBACK = "upgrade", "rollback"
OLD, NEW = "previous", "current"


class ReleaseMissing(RuntimeError):
    """The previous release's commit is not in this clone: the upgrade days cannot run (never skipped)."""


def previous_release() -> str:
    """The commit of the previous release: the first word of tests/sim/PREVIOUS_RELEASE."""
    return RELEASE_FILE.read_text().split()[0]


def release_tree(commit: str, into: Path) -> Path:
    """The release's files (git archive of the commit) under `into`; ReleaseMissing if git does not have it."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False
    )
    if found.returncode != 0:
        raise ReleaseMissing(
            f"the previous release {commit} (tests/sim/PREVIOUS_RELEASE) is not in this clone's history; "
            f"the upgrade days need it: `git fetch --unshallow` (or clone without --depth) and run again"
        )
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


class OldContainer:
    """The previous release's warm container (tests/sim/old_container.py), one request at a time."""

    def __init__(self, tree: Path, endpoint_url: str, log: Path):
        self._log = log.open("ab")
        self._child = subprocess.Popen(
            [sys.executable, str(HERE / "old_container.py"), str(tree)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=str(tree),
            env={**os.environ, "AWS_ENDPOINT_URL": endpoint_url},
            text=True,
        )
        self.busy = (
            False  # inside a call: a nested invocation (the channel calling back) needs another container
        )
        ready = self._read()
        if "ready" not in ready:
            raise RuntimeError(f"the previous release's container did not start: {ready} (log: {log})")

    def _read(self) -> dict[str, Any]:
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the previous release's container ended (exit {self._child.poll()})")
        return json.loads(line)

    def call(self, request: dict[str, Any]) -> tuple[Any, str | None, dict[str, int]]:
        """(result, error, metrics) of one request."""
        assert self._child.stdin is not None
        self.busy = True
        try:
            self._child.stdin.write(json.dumps(request) + "\n")
            self._child.stdin.flush()
            answer = self._read()
        finally:
            self.busy = False
        metrics: dict[str, int] = {}
        for name, value in emf_metrics(answer.get("out", "")):
            metrics[name] = metrics.get(name, 0) + int(value)
        return answer.get("result"), answer.get("error"), metrics

    def stop(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        try:
            self._child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        if self._child.stdout is not None:
            self._child.stdout.close()
        self._log.close()


@dataclass(frozen=True)
class Deploy:
    """When the version changes in a day (seconds after its start), and in which direction."""

    direction: str  # UPGRADE | ROLLBACK
    begin_s: float
    end_s: float

    @property
    def source(self) -> str:
        return OLD if self.direction == UPGRADE else NEW

    @property
    def target(self) -> str:
        return NEW if self.direction == UPGRADE else OLD


def draw_deploy(seed: int, direction: str) -> Deploy:
    """The deploy of a seed's day (its own random stream: the day's other draws stay what they were). The
    window falls inside the first minutes of a day, where its orders, callbacks and refunds are."""
    rng = random.Random(f"deploy#{direction}#{seed}")
    begin = rng.uniform(10.0, 120.0)
    return Deploy(direction, begin, begin + rng.uniform(300.0, 900.0))


class UpgradeScenario(Scenario):
    """A day whose invocations go to the release the deploy says at that instant (see the module doc)."""

    def __init__(self, world: UpgradeWorld, day: d.Day, deploy: Deploy, **options: Any):
        super().__init__(world, day, **options)
        self.releases = world  # the World, with the previous release's containers
        self.deploy = deploy
        self.route = random.Random(f"route#{deploy.direction}#{day.seed}")
        self.served: Counter = Counter()  # (release, what): NotifyFunction, WorkerFunction, poll, ...
        self.mixed: Counter = Counter()  # the same, inside the window where both releases serve

    def version(self, what: str) -> str:
        """The release that serves this invocation (and count it)."""
        t = self.env.clock.now - self.start
        if t < self.deploy.begin_s:
            release = self.deploy.source
        elif t >= self.deploy.end_s:
            release = self.deploy.target
        else:
            share = (t - self.deploy.begin_s) / (self.deploy.end_s - self.deploy.begin_s)
            release = self.deploy.target if self.route.random() < share else self.deploy.source
            self.mixed[(release, what)] += 1
        self.served[(release, what)] += 1
        return release

    def _old(self, what: str, request: dict[str, Any]) -> tuple[Any, str | None]:
        self.result.invocations += 1
        container = self.releases.old_container()
        result, error, metrics = container.call({**request, "now": self.env.clock.now})
        self.result.metrics.update(metrics)
        status = result.get("statusCode", 0) if isinstance(result, dict) else 0
        if error or status >= 500:  # no fault is ever injected into the old container
            self.result.unhandled.append(f"{what} ({OLD} release): {error or status}")
        if metrics.get(M_APPLY_FAILED):
            self.result.unhandled.append(f"{what} ({OLD} release): ApplyFailed")
        return result, error

    def _invoke(self, function: str, event: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        if self.version(function) == NEW:
            return super()._invoke(function, event)
        result, error = self._old(function, {"op": "invoke", "function": function, "event": event})
        return result, error

    def poll_work(self) -> dict[str, Any]:
        if self.version("poll") == NEW:
            return super().poll_work()
        self.result.invocations -= 1  # poll_tick counted it already
        result, _ = self._old("poller", {"op": "poll"})
        return result or {}

    def recon_run(self, channel: str, mchid: str, bill_date: str) -> dict[str, Any]:
        if self.version("recon") == NEW:
            return super().recon_run(channel, mchid, bill_date)
        request = {"op": "recon", "channel": channel, "mchid": mchid, "bill_date": bill_date}
        result, error = self._old(f"recon {mchid}", request)
        if error:
            raise RuntimeError(error)
        return result

    def run(self) -> Result:
        result = super().run()
        releases = {release for release, _ in self.served}
        if releases != {OLD, NEW}:
            result.violations.append(f"U1 the deploy day ran on one release only: {dict(self.served)}")
        result.faults[f"deploy: {self.deploy.direction}"] += 1
        for (release, what), n in self.served.items():
            result.faults[f"deploy: {what} on the {release} release"] += n
        for (release, what), n in self.mixed.items():
            result.faults[f"deploy: {what} on the {release} release while both serve"] += n
        result.timeline.insert(
            0,
            f"deploy {self.deploy.direction}: {self.deploy.source} alone until t+{self.deploy.begin_s:.0f}s, "
            f"both until t+{self.deploy.end_s:.0f}s, then {self.deploy.target} alone",
        )
        return result


class UpgradeWorld(World):
    """A World whose moto is also served over HTTP, with the previous release's warm container on it."""

    def __init__(self, commit: str | None = None, tree: Path | None = None) -> None:
        """`tree`: the release's files extracted already (a soak extracts them once for its workers; the
        caller removes them), else the commit (default: PREVIOUS_RELEASE) is extracted here."""
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(
            logging.ERROR
        )  # one access line per request of the old release
        commit = commit or previous_release()
        self._tmp = Path(tempfile.mkdtemp(prefix="tally-previous-release-"))
        try:
            tree = self.old_tree = tree or release_tree(commit, self._tmp / "tree")
            super().__init__()
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            host, port = self._server.get_host_and_port()
            self._endpoint = f"http://{host}:{port}"
            self.old = OldContainer(tree, self._endpoint, self._tmp / "old-container.log")
            self._spares: list[OldContainer] = []
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    def old_container(self) -> OldContainer:
        """A warm container of the previous release that is not inside a call. The channel simulator calls back
        while a container waits for its answer (a refund settled before the API returns: its notification is
        delivered from inside the create call); Lambda serves that with another container, so do we."""
        for container in [self.old, *self._spares]:
            if not container.busy:
                return container
        spare = OldContainer(
            self.old_tree, self._endpoint, self._tmp / f"old-container-{len(self._spares) + 1}.log"
        )
        self._spares.append(spare)
        return spare

    def run_deploy(
        self,
        seed: int,
        direction: str = UPGRADE,
        shape: d.DayShape = d.TINY,
        recoveries: list[Recovery] | None = None,
    ) -> Result:
        self.env.clock.now = self.day_start
        day = d.generate(seed, shape)
        day.attacks = []  # issue #38's attacks (tests/sim/actors.py): the previous release predates their fixes
        return UpgradeScenario(self, day, draw_deploy(seed, direction), recoveries=recoveries).run()

    def close(self) -> None:
        for container in [self.old, *self._spares]:
            container.stop()
        self._server.stop()
        super().close()
        shutil.rmtree(self._tmp, ignore_errors=True)
