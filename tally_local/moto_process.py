"""moto's server in a process of its own, for the embedded stack.

In one process the fake AWS and the functions share one GIL: under load the moto server's Python
(routing, the DynamoDB expression parser, response serialisation) is over half of the CPU, and the
front door waits for it to ACK. On AWS the services are not on the caller's CPU; here, in a child
process, they are at least not on its GIL. Same moto, same `moto_fixes`, same HTTP on 127.0.0.1.

    server = MotoProcess("127.0.0.1", 0).start()   # → server.endpoint_url
    server.stop()

The child prints its port on its first line and exits when its stdin closes, so it never outlives
the stack (not even one killed with SIGKILL).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


class MotoProcess:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, start_timeout_s: float = 60.0):
        self.host, self.port = host, port
        self.start_timeout_s = start_timeout_s
        self._child: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> MotoProcess:
        root = str(Path(__file__).resolve().parent.parent)
        self._child = subprocess.Popen(
            [sys.executable, "-m", "tally_local.moto_process", "--host", self.host, "--port", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._child.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.start_timeout_s)
        if not line or not line[0].startswith("PORT "):
            self.stop()
            raise RuntimeError(
                f"moto server process did not start: {line[0].strip() if line else 'no answer'}"
            )
        self.port = int(line[0].split()[1])
        return self

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            stop_child(child, timeout_s=10)


def stop_child(child: subprocess.Popen[Any], timeout_s: float) -> None:
    """A child that serves until its stdin closes: closed, waited for (killed after `timeout_s`), its stdout
    closed. The moto process and the front door's containers (tally_local/containers.py) stop this way."""
    try:
        if child.stdin is not None:
            child.stdin.close()  # the child's signal to stop
    except OSError:
        pass  # already gone: its end of the pipe is closed
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    if child.stdout is not None:
        child.stdout.close()


def serve(host: str, port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from tally_local import moto_fixes

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call otherwise
    moto_fixes.install()
    app: Any = DomainDispatcherApplication(create_backend_app)
    profile_path = os.environ.get(PROFILE_VARIABLE)
    if profile_path:
        app = _Profiled(app, profile_path)
        signal.signal(signal.SIGUSR1, lambda *_: app.reset())  # bench.load: from the first send on
    server = make_server(host, port, app, threaded=True)
    os.environ["MOTO_PORT"] = str(
        server.server_port
    )  # moto's Step Functions interpreter calls its own server
    threading.Thread(target=server.serve_forever, name="moto-server", daemon=True).start()
    print(f"PORT {server.server_port}", flush=True)
    sys.stdin.read()  # until the parent closes the pipe (or dies)
    server.shutdown()
    server.server_close()
    if isinstance(app, _Profiled):
        app.dump()


PROFILE_VARIABLE = "TALLY_MOTO_PROFILE"


class _Profiled:
    """Measurement only (`TALLY_MOTO_PROFILE=/tmp/moto.pstats`, or `cpu:/tmp/moto` for the counts alone):
    each request runs under cProfile in the werkzeug thread that serves it (cProfile sees one thread);
    the stats are summed and written, with a count of AWS calls and their CPU by operation
    (`<path>.calls.json`), when the server stops. SIGUSR1 starts them afresh (bench.load sends it
    before its first callback, so the set-up is not counted)."""

    def __init__(self, app: Any, path: str):
        self.cpu_only = path.startswith("cpu:")  # the CPU per operation only, without cProfile's overhead
        self.app, self.path = app, path.removeprefix("cpu:")
        self.lock = threading.Lock()
        self.stats: Any = None
        self.calls: dict[str, list[float]] = {}  # operation → [calls, CPU ms in the app (profiled)]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        import cProfile
        import pstats
        import time

        cpu = time.thread_time()
        if self.cpu_only:
            body, profiler = list(self.app(environ, start_response)), None
        else:
            profiler = cProfile.Profile(time.thread_time)  # CPU, not the wall time spent waiting for a lock
            body = profiler.runcall(lambda: list(self.app(environ, start_response)))
        cpu = time.thread_time() - cpu
        with self.lock:
            operation = self.calls.setdefault(_operation(environ), [0, 0.0])
            operation[0] += 1
            operation[1] += cpu * 1000
            if profiler is None:
                pass
            elif self.stats is None:
                self.stats = pstats.Stats(profiler)
            else:
                self.stats.add(profiler)
        return body

    def reset(self) -> None:
        with self.lock:
            self.stats = None
            self.calls.clear()

    def dump(self) -> None:
        import json

        with self.lock:
            if self.stats is not None:
                self.stats.dump_stats(self.path)
            with open(self.path + ".calls.json", "w", encoding="utf-8") as out:
                ranked = sorted(self.calls.items(), key=lambda item: -item[1][1])
                json.dump({name: [int(n), round(ms)] for name, (n, ms) in ranked}, out, indent=1)


def _operation(environ: dict[str, Any]) -> str:
    """`DynamoDB_20120810.PutItem`, `AmazonSQS.SendMessage`, or the method and path for the rest."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return str(target)
    return f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO', '').split('/')[1][:30]}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="moto's server for the embedded stack (stops when stdin closes)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    arguments = parser.parse_args()
    serve(arguments.host, arguments.port)
