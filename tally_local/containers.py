"""Lambda's scale-out for the embedded stack: several warm containers per function, each a process.

Lambda serves concurrent invocations of one function with more containers, never with threads in one: each
container imports the handler once (its module state, caches and clients are its own) and runs one invocation
at a time. `ContainerPool` does the same on 127.0.0.1: when an invocation arrives and every warm container of
the function is busy, it starts another one, up to `limit` (`TALLY_LOCAL_CONTAINERS`, default 4, or the
function's ReservedConcurrentExecutions if the template sets a smaller one); at the limit the invocation waits
for the first container that frees up.

    pool = ContainerPool(ContainerSpec.of(function_spec), limit=4)
    pool.invoke(event)          # → the handler's return value, from a child process
    pool.stop()                 # every child gone

A container is `python -m tally_local.containers`, started with the stack's environment (moto's endpoint, the
table names) and the stack's working directory. The protocol is lines on its pipes: the parent writes the
function's spec, then one JSON event per invocation on the child's stdin; the child rebuilds a LambdaContext,
runs the handler and prints the answer as the last line of what the invocation wrote to stdout, after a marker.
Everything else the handler writes (the JSON log lines, the EMF metric lines) is copied to the parent's
`sys.stdout` before the invocation returns, so a caller that reads the metrics after an answer (the demo day,
tests under `redirect_stdout`) sees them as with the in-thread handler; stderr (tracebacks) goes to the
parent's `sys.stderr`. A child exits when its stdin closes, so it never outlives the stack, not even one
killed with SIGKILL; it ignores SIGINT (Ctrl-C in `make run` reaches the whole process group: the parent stops
the children itself). A child that dies in an invocation raises `ContainerCrashed` (the front door answers
502) and is replaced by a new one on the next invocation; a handler that raises raises `FunctionError`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tally_local.moto_process import stop_child

CONTAINERS_VARIABLE = "TALLY_LOCAL_CONTAINERS"
DEFAULT_CONTAINERS = 4
START_TIMEOUT_S = 60.0
_MARK = "\x1etally-container\x1e"  # starts the answer line; never in a JSON log line (it would be escaped)


class ContainerCrashed(Exception):
    """The container's process ended (or could not start) before it answered."""


class FunctionError(Exception):
    """The handler raised in its container: what Lambda reports as an unhandled function error."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


def containers_setting(environ: Mapping[str, str] | None = None) -> int:
    """`TALLY_LOCAL_CONTAINERS` (default 4): the most warm containers per function; 0 = one in-thread handler."""
    value = (environ if environ is not None else os.environ).get(CONTAINERS_VARIABLE, "")
    try:
        return max(0, int(value)) if value.strip() else DEFAULT_CONTAINERS
    except ValueError:
        raise ValueError(f"{CONTAINERS_VARIABLE}={value!r}: expected a whole number of containers") from None


@dataclass(frozen=True)
class ContainerSpec:
    """What a container needs to import the handler and build its LambdaContext (a FunctionSpec's fields)."""

    function_name: str
    code_dir: str
    handler: str
    timeout_s: int = 30
    memory_mb: int = 128

    @classmethod
    def of(cls, spec: Any) -> ContainerSpec:
        return cls(spec.logical_id, str(spec.code_dir), spec.handler, spec.timeout_s, spec.memory_mb)


class ProcessContainer:
    """One warm container: a child process that imported the handler once and serves one invocation at a time."""

    def __init__(self, spec: ContainerSpec, *, cwd: str | Path | None = None):
        self.spec = spec
        self.cwd = str(cwd) if cwd is not None else str(Path(__file__).resolve().parent.parent)
        self.invocations = 0
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr_relay: threading.Thread | None = None
        self._stderr_marks = 0  # one per answer: what the child wrote to stderr before it is relayed
        self._stderr_seen = threading.Condition()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> ProcessContainer:
        """Start the child and wait until it imported the handler (a cold start): ContainerCrashed if it dies."""
        self._child = subprocess.Popen(
            [sys.executable, "-m", "tally_local.containers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.cwd,
            env=dict(os.environ),  # the stack's environment of this moment: endpoint, tables, queue
        )
        self._stderr_relay = threading.Thread(
            target=self._relay_stderr,
            args=(self._child.stderr,),
            name=f"container-{self.spec.function_name}-{self._child.pid}-stderr",
            daemon=True,
        )
        self._stderr_relay.start()
        try:
            self._send(self.spec.__dict__)
            ready = _read_answer(self._child.stdout, START_TIMEOUT_S)
            self._wait_for_stderr(1)
        except ContainerCrashed:
            self.stop()
            raise
        if ready.get("ready") != self._child.pid:
            self.stop()
            raise ContainerCrashed(f"{self.spec.function_name}: unexpected first answer {ready!r}")
        return self

    def invoke(self, event: dict[str, Any]) -> Any:
        child = self._child
        if child is None:
            raise ContainerCrashed(f"{self.spec.function_name}: container stopped")
        self.invocations += 1
        self._send({"event": event})
        answer = _read_answer(child.stdout, None)
        self._wait_for_stderr(self.invocations + 1)
        if "error" in answer:
            raise FunctionError(str(answer["error"]["type"]), str(answer["error"]["message"]))
        return answer["result"]

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        stop_child(child, timeout_s=5)
        if self._stderr_relay is not None:
            self._stderr_relay.join(timeout=5)

    def _relay_stderr(self, stderr: IO[bytes] | None) -> None:
        """Copy the child's stderr to sys.stderr; a mark line (one per answer) is counted, not copied."""
        if stderr is None:
            return
        with stderr:
            for raw in iter(stderr.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                at = line.find(_MARK)
                if at < 0:
                    sys.stderr.write(line)
                    sys.stderr.flush()
                    continue
                if at > 0:
                    sys.stderr.write(line[:at] + "\n")
                    sys.stderr.flush()
                with self._stderr_seen:
                    self._stderr_marks += 1
                    self._stderr_seen.notify_all()
        with self._stderr_seen:
            self._stderr_marks = sys.maxsize  # the pipe closed: nothing more will come
            self._stderr_seen.notify_all()

    def _wait_for_stderr(self, marks: int) -> None:
        """Until what the child wrote to stderr before its answer has been copied (bounded: a few seconds)."""
        with self._stderr_seen:
            self._stderr_seen.wait_for(lambda: self._stderr_marks >= marks, timeout=5)

    def _send(self, message: dict[str, Any]) -> None:
        child = self._child
        if child is None or child.stdin is None:
            raise ContainerCrashed(f"{self.spec.function_name}: container stopped")
        try:
            child.stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            child.stdin.flush()
        except (BrokenPipeError, ValueError) as error:  # ValueError: the pipe was closed by stop()
            raise ContainerCrashed(f"{self.spec.function_name}: container gone ({error})") from error


def _read_answer(stdout: IO[bytes] | None, timeout_s: float | None) -> dict[str, Any]:
    """Copy the child's output lines to sys.stdout until the answer line; its JSON. EOF: ContainerCrashed."""
    if stdout is None:
        raise ContainerCrashed("no pipe from the container")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    relayed = False
    try:
        while True:
            raw = stdout.readline()
            if not raw:
                raise ContainerCrashed("the container's process ended before it answered")
            line = raw.decode("utf-8", errors="replace")
            at = line.find(_MARK)
            if at < 0:
                sys.stdout.write(line)
                relayed = True
                if deadline is not None and time.monotonic() > deadline:
                    raise ContainerCrashed("the container did not start in time")
                continue
            if at > 0:  # the handler's last write had no newline
                sys.stdout.write(line[:at] + "\n")
                relayed = True
            answer: dict[str, Any] = json.loads(line[at + len(_MARK) :])
            return answer
    finally:
        if relayed:
            sys.stdout.flush()


class ContainerPool:
    """The warm containers of one function: up to `limit` processes, started when every one is busy."""

    def __init__(
        self, spec: ContainerSpec, limit: int = DEFAULT_CONTAINERS, *, cwd: str | Path | None = None
    ):
        if limit < 1:
            raise ValueError("a container pool needs at least one container")
        self.spec, self.limit, self.cwd = spec, limit, cwd
        self.started = 0  # containers started so far (crashed ones replaced included)
        self._condition = threading.Condition()
        self._idle: list[ProcessContainer] = []
        self._live: set[ProcessContainer] = set()
        self._starting = 0
        self._stopped = False
        self._failures = 0  # containers that could not start, and the last reason
        self._failure: Exception | None = None

    @property
    def pids(self) -> list[int]:
        """The process ids of the live containers (idle or busy), lowest first."""
        with self._condition:
            return sorted(c.pid for c in self._live if c.pid is not None)

    def invoke(self, event: dict[str, Any]) -> Any:
        container = self._acquire()
        try:
            result = container.invoke(event)
        except FunctionError:
            self._release(container)  # the handler raised; the container lives on, as on Lambda
            raise
        except BaseException:
            self._discard(container)  # crashed, or its state is unknown: the next invocation gets a new one
            raise
        self._release(container)
        return result

    def handler(self, event: dict[str, Any], context: Any) -> Any:
        """The pool as a handler (the context is rebuilt in the container)."""
        return self.invoke(event)

    def stop(self) -> None:
        """Stop every container; one still starting is stopped as soon as it is up."""
        with self._condition:
            self._stopped = True
            containers, self._live, self._idle = list(self._live), set(), []
            self._condition.notify_all()
        for container in containers:
            container.stop()

    def warm(self) -> None:
        """Start one container in the background unless one runs or starts (the handler imported ahead of
        the first invocation, as the in-thread handler is when the stack starts)."""
        with self._condition:
            if not self._stopped and not self._live and not self._starting:
                self._start_one()

    def _acquire(self) -> ProcessContainer:
        """An idle container; if none and the limit allows, one more starts in the background, and this
        invocation takes whichever container is free first (the new one, or one that finished)."""
        with self._condition:
            failures = self._failures
            while True:
                if self._stopped:
                    raise ContainerCrashed(f"{self.spec.function_name}: the stack is stopping")
                if self._idle:
                    return self._idle.pop()  # the most recently used: the warmest
                if self._failures != failures and not self._live:
                    raise ContainerCrashed(f"{self.spec.function_name}: {self._failure}")
                if len(self._live) + self._starting < self.limit:
                    self._start_one()
                self._condition.wait()

    def _start_one(self) -> None:
        """(Holding the condition.) A container starts in a thread of its own; it joins the idle ones."""
        self._starting += 1
        self.started += 1
        threading.Thread(
            target=self._started, name=f"container-{self.spec.function_name}-start", daemon=True
        ).start()

    def _started(self) -> None:
        try:
            container = ProcessContainer(self.spec, cwd=self.cwd).start()
        except Exception as error:  # noqa: BLE001 - the waiters raise it as ContainerCrashed
            with self._condition:
                self._starting -= 1
                self._failures += 1
                self._failure = error
                self._condition.notify_all()
            return
        with self._condition:
            self._starting -= 1
            if not self._stopped:
                self._live.add(container)
                self._idle.append(container)
                self._condition.notify()
                return
        container.stop()

    def _release(self, container: ProcessContainer) -> None:
        with self._condition:
            if container in self._live:
                self._idle.append(container)
                self._condition.notify()

    def _discard(self, container: ProcessContainer) -> None:
        with self._condition:
            self._live.discard(container)
            self._condition.notify()
        container.stop()


# ---------------------------------------------------------------------- the child: python -m tally_local.containers


def serve() -> None:
    """Import the handler once, then answer one invocation per stdin line until stdin closes."""
    from tally_local.resources import FunctionSpec, LambdaContext, load_handler

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its children (Ctrl-C reaches the group)
    stdin, out = sys.stdin.buffer, sys.stdout
    first = stdin.readline()
    if not first:
        return
    spec = ContainerSpec(**json.loads(first))
    _preload()
    handler = load_handler(
        FunctionSpec(
            spec.function_name, Path(spec.code_dir), spec.handler, spec.timeout_s, spec.memory_mb, (), ()
        )
    )
    _answer(out, json.dumps({"ready": os.getpid()}))
    for line in iter(stdin.readline, b""):
        event = json.loads(line)["event"]
        context = LambdaContext(spec.function_name, spec.timeout_s, spec.memory_mb)
        try:
            answer: dict[str, Any] = {"result": handler(event, context)}
            text = json.dumps(answer)
        except Exception as error:  # noqa: BLE001 - Lambda reports it as an unhandled error; the process lives on
            traceback.print_exc()
            text = json.dumps({"error": {"type": type(error).__name__, "message": str(error)}})
        _answer(out, text)


def _preload() -> None:
    """The container's init: boto3 and botocore imported before the first invocation (the product imports them
    lazily, on first use: ~1 s of CPU that would land on the first invocation in every new container).
    Module imports only: no client, no session, nothing the handler's module state holds."""
    import boto3  # noqa: F401 - imported for sys.modules
    import botocore.client  # noqa: F401


def _answer(out: IO[str], text: str) -> None:
    """The answer line on stdout, after a mark line on stderr (the parent relays stderr up to it first)."""
    sys.stderr.write(_MARK + "\n")
    sys.stderr.flush()
    out.write(_MARK + text + "\n")
    out.flush()


if __name__ == "__main__":
    serve()
