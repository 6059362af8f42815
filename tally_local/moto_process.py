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
import subprocess
import sys
import threading
from pathlib import Path


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
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()  # the child's signal to stop
        try:
            child.wait(timeout=10)
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
    server = make_server(host, port, DomainDispatcherApplication(create_backend_app), threaded=True)
    os.environ["MOTO_PORT"] = str(
        server.server_port
    )  # moto's Step Functions interpreter calls its own server
    threading.Thread(target=server.serve_forever, name="moto-server", daemon=True).start()
    print(f"PORT {server.server_port}", flush=True)
    sys.stdin.read()  # until the parent closes the pipe (or dies)
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="moto's server for the embedded stack (stops when stdin closes)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    arguments = parser.parse_args()
    serve(arguments.host, arguments.port)
