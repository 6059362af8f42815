"""The embedded stack: all of Tally in one process on 127.0.0.1, built from template.yaml.

    moto server  ← tables, queues, bucket created from template.yaml; AWS_ENDPOINT_URL points boto3 here
    simulator    ← the WeChat Pay look-alike; WECHATPAY_API_BASE points the code here
    front door   ← HTTP API routes from template.yaml → payload-2.0 events → functions/*/app.py
    pump         ← ApplyQueue → worker handler (SQS event, batchItemFailures honoured)
    ticker       ← Schedule events → their handlers (the poller every minute × schedule_scale)

Only environment variables differ from AWS. From tests::

    with EmbeddedStack(api_port=0) as stack:
        requests.post(stack.api_url + "/orders", ...)

From a shell: `python -m tally_local.stack` (or `make run`); TALLY_API_PORT picks the API port.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer
from tally.domain.callers import EVERY_MERCHANT

from tally_local import moto_fixes, statemachines
from tally_local.ackfirst import AckFirst
from tally_local.containers import CONTAINERS_VARIABLE, containers_setting
from tally_local.demo import seed_demo
from tally_local.frontdoor import (
    API_REFERENCE_ROUTE,
    FrontDoor,
    Target,
    api_reference,
    authorizers_from_template,
    routes_from_template,
)
from tally_local.lambda_io import INVOKE_ROUTE, invoke_route
from tally_local.moto_process import MotoProcess
from tally_local.pump import SqsPump
from tally_local.resources import (
    FunctionSpec,
    Resolver,
    create_with_resolver,
    function_specs,
    load_handler,
    load_template,
)
from tally_local.sigv4 import LOCAL_ACCESS_KEY, LOCAL_BACKEND_ARN, LOCAL_SECRET_KEY, local_authorizer
from tally_local.simulator import ChannelSimulator
from tally_local.streams import DownstreamPrinter, StreamPump

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
UNSET_FOR_LOCAL = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only


class PortInUse(RuntimeError):
    """A fixed port that the stack needs is taken."""


class EmbeddedStack:
    def __init__(
        self,
        api_port: int = 3000,
        moto_port: int = 0,
        sim_port: int = 0,
        time_scale: float = 0.01,
        state_dir: str | Path = ".tally",
        *,
        root: str | Path | None = None,
        region: str = "us-east-1",
        prefix: str = "tally-local",
        retry_visibility_s: int = 2,
        simulator_options: Mapping[str, Any] | None = None,
        schedule_scale: float = 1.0,
        moto_process: bool = False,
        containers: int = 0,
        ack_first: bool = False,
    ):
        self.api_port, self.moto_port, self.sim_port = api_port, moto_port, sim_port
        self.time_scale = time_scale
        self.state_dir = Path(state_dir)
        self.root = Path(root) if root is not None else REPO_ROOT
        self.region, self.prefix = region, prefix
        self.retry_visibility_s = retry_visibility_s
        self.simulator_options = dict(simulator_options or {})
        self.schedule_scale = schedule_scale  # 0 = no ticker (tests fire schedules themselves)
        # True: moto's server in a child process (its CPU off the functions' GIL; `make run`, bench.load);
        # False: in a thread of this one (starts faster: tests)
        self.moto_process = moto_process
        # 0: each HTTP function's handler in this process, one invocation at a time (tests); N: up to N warm
        # containers per HTTP function, each a process (`make run`, bench.load; tally_local/containers.py)
        self.containers = containers
        # True: the SQS and stream pumps give way to the HTTP requests in flight (tally_local/ackfirst.py,
        # `bench.load --ack-first`); False (the default, `make run`): they poll at their own pace. Measured
        # (docs/embedded-stack.md, session 9): it did not help, the backlog it builds slows moto's SQS
        self.ack_first: AckFirst | None = AckFirst() if ack_first else None
        self.ticker: Any = None
        self.seed_demo: Callable[[EmbeddedStack], Any] | None = None  # called once everything runs
        self.seeded: Any = None  # what seed_demo returned
        self.env: dict[str, str] = {}
        self.simulator: Any = None
        self.front_door: FrontDoor | None = None
        # API Gateway's IAM authorizer for the AWS_IAM routes: the fake credentials, and whatever a test adds
        self.iam = local_authorizer(region)
        self.state_machines: dict[str, str] = {}  # logical id → ARN (tally_local/statemachines.py)
        self.pumps: dict[str, SqsPump] = {}
        self.stream_pumps: dict[str, StreamPump] = {}
        self.downstream: DownstreamPrinter | None = None
        self.print_event: Callable[[str], Any] = lambda line: log.info("%s", line)
        self._moto: ThreadedMotoServer | MotoProcess | None = None
        self._endpoint_url: str | None = None
        self._saved_environ: dict[str, str | None] = {}
        self._undo: list[Callable[[], None]] = []  # run in reverse by stop()
        self._resolver: Resolver | None = None
        # the console's sign-ins (docs/console.md): {"operator": password, "viewer": password}, made per start
        self.console_logins: dict[str, str] = {}

    # ------------------------------------------------------------------ public

    @property
    def api_url(self) -> str:
        return self._started(self.front_door).url

    @property
    def endpoint_url(self) -> str:
        return self._started(self._endpoint_url)

    @property
    def moto_pid(self) -> int | None:
        """The moto server's process id when it runs in a process of its own (moto_process=True)."""
        return self._moto.pid if isinstance(self._moto, MotoProcess) else None

    @property
    def simulator_url(self) -> str:
        return self._started(self.simulator).url

    @property
    def template_path(self) -> Path:
        return self.root / "template.yaml"

    def start(self) -> EmbeddedStack:
        if self._undo:
            raise RuntimeError("the embedded stack is already started")
        _check_free(self.api_port, "TALLY_API_PORT")
        _check_free(self.moto_port, "moto_port")
        try:
            self._start_moto()
            self._start_simulator()
            self._create_resources()
            self._create_console_logins()
            self._start_functions()
            self._allow_local_backend()
            if self.seed_demo is not None:
                self.seeded = self.seed_demo(self)
            self._started(self.front_door).serve()  # ready: what reached the port meanwhile is answered now
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything in the reverse order of start; restore os.environ."""
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # noqa: BLE001 - keep stopping the rest, but say what failed
                log.exception("embedded stack: %s failed while stopping", getattr(undo, "__name__", undo))

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every pumped queue is empty and no batch is in flight."""
        return all(pump.drain(timeout) for pump in self.pumps.values())

    def write_state(self) -> Path:
        """Write `<state_dir>/local.json` (relative to the current directory) for `tally --local`;
        removed again by stop()."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "local.json"
        path.write_text(json.dumps(self.state(), indent=2) + "\n", encoding="utf-8")
        self._undo.append(lambda: path.unlink(missing_ok=True))
        return path

    def state(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "api_url": self.api_url,
            "simulator_url": self.simulator_url,
            "env": self.env,
        }

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ steps

    def _start_moto(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call otherwise
        if self.moto_process:
            self._moto = MotoProcess(HOST, self.moto_port).start()  # installs moto_fixes in the child
            self._undo.append(self._stop_moto)
            self._endpoint_url = self._moto.endpoint_url
        else:
            moto_fixes.install()  # what moto lacks of DynamoDB (atomic requests, cheap rollback); see the module
            self._moto = ThreadedMotoServer(ip_address=HOST, port=self.moto_port, verbose=False)
            self._moto.start()
            self._undo.append(self._stop_moto)
            host, port = self._moto.get_host_and_port()
            self._endpoint_url = f"http://{host}:{port}"
        # moto's backends are per process: a new stack starts from an empty account.
        reset = urllib.request.Request(self._endpoint_url + "/moto-api/reset", method="POST")
        _NO_PROXY_OPENER.open(reset, timeout=10).close()
        self._execute_state_machines()
        self._set_environ(
            {
                "AWS_ENDPOINT_URL": self._endpoint_url,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_REGION": self.region,
                **FAKE_CREDENTIALS,
            }
            | dict.fromkeys(UNSET_FOR_LOCAL)
        )

    def _execute_state_machines(self) -> None:
        """moto's Step Functions interpreter on (the template's state machines run: tally_local/statemachines.py);
        it calls its own server back on MOTO_PORT. Undone on stop (moto's config is per process)."""

        def config(value: dict[str, Any]) -> None:
            body = json.dumps({"stepfunctions": value}).encode()
            request = urllib.request.Request(
                self._endpoint_url + "/moto-api/config", data=body, method="POST"
            )
            _NO_PROXY_OPENER.open(request, timeout=10).close()

        config({"execute_state_machine": True})
        self._undo.append(lambda: config({"execute_state_machine": False}) if self._endpoint_url else None)
        self._set_environ({"MOTO_PORT": self._endpoint_url.rsplit(":", 1)[1]})

    def _stop_moto(self) -> None:
        if self._moto is not None:
            self._moto.stop()
            server = getattr(self._moto, "_server", None)  # moto's stop() leaves the socket open
            if server is not None:
                server.server_close()
        self._moto = None
        self._endpoint_url = None

    def _start_simulator(self) -> None:
        options = {
            "host": HOST,
            "port": self.sim_port,
            "time_scale": self.time_scale,
        } | self.simulator_options
        self.simulator = ChannelSimulator(**options).start()
        self._undo.append(self._stop_simulator)

    def _stop_simulator(self) -> None:
        self.simulator.stop()
        self.simulator = None

    def _create_resources(self) -> None:
        session = boto3.session.Session(region_name=self.region)
        overrides = {
            "WechatPayApiBase": self.simulator.url,
            "AlipayGateway": self.simulator.url + "/gateway.do",
            "WebhookPrivateAddresses": "allow",  # the merchant receivers of the embedded stack are on 127.0.0.1
        }
        self.env, self._resolver = create_with_resolver(self.template_path, session, self.prefix, overrides)
        self._set_environ(self.env)

    def _create_console_logins(self) -> None:
        """One operator and one viewer in the console's pool, with fresh passwords (printed by `make run`)."""
        if not self.env.get("CONSOLE_USER_POOL_ID"):
            return
        from tally.store.users import ConsoleUsers

        users = ConsoleUsers(
            boto3.client("cognito-idp", region_name=self.region),
            self.env["CONSOLE_USER_POOL_ID"],
            self.env["CONSOLE_CLIENT_ID"],
        )
        self.console_logins = {
            "operator": users.add("operator", "operators"),
            "viewer": users.add("viewer", "viewers"),
        }

    def _allow_local_backend(self) -> None:
        """R53 on the local stack: the fake credentials' principal acts for every merchant (one backend, as a
        single-merchant deployment registers its own); tests add principals of their own through `self.iam`."""
        from tally import bootstrap

        bootstrap.reset()
        bootstrap.callers().allow(LOCAL_BACKEND_ARN, [EVERY_MERCHANT], by="tally_local")

    def _start_functions(self) -> None:
        """Import the handlers only now: a module may read its settings at import time."""
        _cold_start()
        self._undo.append(_cold_start)
        template = load_template(self.template_path)
        authorizers = authorizers_from_template(
            template, self._started(self._resolver).resolve, self.endpoint_url, iam=self.iam
        )
        routes = routes_from_template(
            template, self.root, containers=self.containers, resolve=self._started(self._resolver).resolve
        )
        routes[INVOKE_ROUTE] = self._invoke_target(template)  # Lambda Invoke for the state machines' tasks
        routes[API_REFERENCE_ROUTE] = api_reference  # the merchant API's OpenAPI document (docs/openapi.json)
        self.front_door = FrontDoor(
            routes, HOST, self.api_port, authorizers=authorizers, ack_first=self.ack_first
        )
        try:
            self.front_door.start(serve=False)  # bound now, answering once start() is done
        except OSError as error:
            raise _port_error(error, self.api_port, "TALLY_API_PORT") from error
        self._undo.append(self._stop_front_door)
        self._set_environ({"HEARTBEAT_API_URL": self.api_url})  # the heartbeat posts to the front door
        self._set_environ({"TALLY_API_URL": self.api_url})  # the webhooks' link to the full object
        self.env["CONSOLE_URL"] = self.api_url + "/console"  # a chat card's link (docs/alerts.md), CLI too
        self._set_environ({"CONSOLE_URL": self.env["CONSOLE_URL"]})
        session = boto3.session.Session(region_name=self.region)
        self.state_machines = statemachines.create(
            template, self._resolver, session, self.prefix, self.api_url
        )
        for spec in function_specs(template, self.root).values():
            for queue_id in spec.sqs_queues:
                self._start_pump(spec, queue_id)
            for table_id in spec.stream_tables:
                self._start_stream_pump(spec, table_id)
        if self.env.get("EVENT_BUS_NAME"):
            self.downstream = DownstreamPrinter(
                boto3.client("events", region_name=self.region),
                boto3.client("sqs", region_name=self.region),
                self.env["EVENT_BUS_NAME"],
                out=self.print_event,
                gate=self.ack_first,
            ).start()
            self._undo.append(self.downstream.stop)
        from tally_local.ticker import ScheduleTicker

        self.ticker = ScheduleTicker.from_template(
            template, self.root, scale=self.schedule_scale, region=self.region
        )
        if self.schedule_scale > 0:
            self.ticker.start()
            self._undo.append(self.ticker.stop)
        self.front_door.warm()  # one container per HTTP function, now that the environment is complete

    def _invoke_target(self, template: dict[str, Any]) -> Target:
        specs = function_specs(template, self.root)
        invoke = {}
        for lid in statemachines.task_functions(template):
            spec = specs[lid]
            invoke[lid] = Target(load_handler(spec), spec.logical_id, spec.timeout_s, spec.memory_mb).invoke
        return Target(invoke_route(invoke), "local-lambda-invoke", 900)

    def _start_stream_pump(self, spec: FunctionSpec, table_id: str) -> None:
        retries, queue_id = next(((n, q) for t, n, q in spec.stream_on_failure if t == table_id), (-1, ""))
        on_failure: Callable[[dict[str, Any]], Any] | None = None
        if (
            queue_id
        ):  # Lambda's on-failure destination: where the batch was, after its retries (docs/webhooks.md)
            url = self._started(self._resolver).resolve({"Ref": queue_id})
            on_failure = _sqs_sender(boto3.client("sqs", region_name=self.region), url)

        pump = StreamPump(
            boto3.client("dynamodb", region_name=self.region),
            boto3.client("dynamodbstreams", region_name=self.region),
            f"{self.prefix}-{table_id}",
            load_handler(spec),
            function_name=spec.logical_id,
            timeout_s=spec.timeout_s,
            gate=self.ack_first,
            max_retries=retries,
            on_failure=on_failure,
        )
        self.stream_pumps[table_id] = pump.start()
        self._undo.append(lambda: self.stream_pumps.pop(table_id).stop())

    def _stop_front_door(self) -> None:
        if self.front_door is not None:
            self.front_door.stop()
        self.front_door = None

    def _start_pump(self, spec: FunctionSpec, queue_id: str) -> None:
        sqs = boto3.client("sqs", region_name=self.region)
        queue_url = self._started(self._resolver).resolve({"Ref": queue_id})  # a FIFO queue: name ends .fifo
        pump = SqsPump(
            sqs,
            queue_url,
            load_handler(spec),
            function_name=spec.logical_id,
            timeout_s=spec.timeout_s,
            memory_mb=spec.memory_mb,
            # a FIFO queue's handler sets each kept message's visibility itself (the webhooks' backoff)
            retry_visibility_s=None if queue_url.endswith(".fifo") else self.retry_visibility_s,
            gate=self.ack_first,
        )
        self.pumps[queue_id] = pump.start()
        self._undo.append(lambda: self.pumps.pop(queue_id).stop())

    def _set_environ(self, values: Mapping[str, str | None]) -> None:
        """Set (or, for None, unset) variables; stop() puts the old values back."""
        for name, value in values.items():
            if name not in self._saved_environ:
                self._saved_environ[name] = os.environ.get(name)
                self._undo.append(lambda name=name: _restore(name, self._saved_environ.pop(name)))
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @staticmethod
    def _started(value: Any) -> Any:
        if value is None:
            raise RuntimeError("the embedded stack is not started")
        return value

    # ------------------------------------------------------------------ display

    def describe(self) -> str:
        template = load_template(self.template_path)
        specs = function_specs(template, self.root)
        rows = [("HTTP API (front door)", self.api_url)]
        if self.containers > 0:
            rows += [
                ("  containers", f"up to {self.containers} processes per function ({CONTAINERS_VARIABLE})")
            ]
        rows += [(f"  {key}", f"→ {spec.logical_id}") for spec in specs.values() for key in spec.http_routes]
        rows += [("AWS (moto server)", f"{self.endpoint_url}   AWS_ENDPOINT_URL, region {self.region}")]
        rows += [
            (f"  SQS {queue} pump", f"→ {spec.logical_id}")
            for spec in specs.values()
            for queue in spec.sqs_queues
        ]
        rows += [("Channel simulator", f"{self.simulator_url}   WECHATPAY_API_BASE")]
        rows += [
            ("  merchant webhook receiver", f"{self.simulator_url}/merchant/_deliveries   (docs/webhooks.md)")
        ]
        rows += [("State file", str(self.state_dir / "local.json"))]
        rows += [
            (
                "Signed API (SigV4, execute-api)",
                f"key {LOCAL_ACCESS_KEY} / secret {LOCAL_SECRET_KEY}, region {self.region}",
            ),
            ("  as", f"{LOCAL_BACKEND_ARN} (every merchant)"),
        ]
        if self.console_logins:
            rows += [("Console", f"{self.api_url}/console/login")]
            rows += [(f"  sign in as {name}", password) for name, password in self.console_logins.items()]
        if isinstance(self.seeded, dict):
            rows += [("Demo data", ", ".join(f"{key}={value}" for key, value in self.seeded.items()))]
        width = max(len(name) for name, _ in rows) + 3
        lines = [
            "Tally embedded stack: everything on 127.0.0.1, only environment variables differ from AWS",
            "",
        ]
        lines += [f"  {name.ljust(width)}{where}" for name, where in rows]
        lines += ["", "  Environment of every function:"]
        lines += [f"    {name}={value}" for name, value in self.env.items()]
        return "\n".join(lines)


def _cold_start() -> None:
    """Forget what the product code cached per container (clients, settings): a new stack is a new
    container, with a new endpoint and environment. Handler modules are re-imported by load_handler."""
    bootstrap = sys.modules.get("tally.bootstrap")
    if bootstrap is not None and hasattr(bootstrap, "reset"):
        bootstrap.reset()


def _sqs_sender(sqs: Any, url: str) -> Callable[[dict[str, Any]], Any]:
    return lambda message: sqs.send_message(QueueUrl=url, MessageBody=json.dumps(message))


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _check_free(port: int, knob: str) -> None:
    """Fail before starting anything if a fixed port is taken (moto would hang on it)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise _port_error(error, port, knob) from error


def _port_error(error: OSError, port: int, knob: str) -> Exception:
    if error.errno == errno.EADDRINUSE:
        return PortInUse(f"port {port} on {HOST} is already in use: set {knob} to a free port")
    return error


# ---------------------------------------------------------------------- python -m tally_local.stack


def _configure_logging() -> None:
    """Our own handler for `tally_local.*`: Powertools' Logger(service="tally") puts a substring
    filter ("tally" in name) on the root handlers, which would hide the front door's access log and
    the tracebacks of failing handlers."""
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(log_format))
    local = logging.getLogger("tally_local")
    local.addHandler(handler)
    local.setLevel(logging.INFO)
    local.propagate = False
    logging.basicConfig(level=logging.WARNING, format=log_format)


def containers_for(demo: str, environ: Mapping[str, str]) -> int:
    """Warm containers per HTTP function: `TALLY_LOCAL_CONTAINERS`, except with the demo day loaded. The demo
    plays yesterday by moving the product's clock back in this process (tally_local/day.py `yesterday`); a
    container is a process of its own on the real clock, so its prepay calls would be signed a day after the
    simulated channel's clock and refused. So the demo's stack serves its functions in-thread."""
    return 0 if demo else containers_setting(environ)


def main() -> int:
    _configure_logging()
    demo = os.environ.get("TALLY_DEMO", "")  # TALLY_DEMO=1 (or a number of payments): load the demo day
    stack = EmbeddedStack(
        api_port=int(os.environ.get("TALLY_API_PORT", "3000")),
        schedule_scale=float(os.environ.get("TALLY_SCHEDULE_SCALE", "1")),
        moto_process=True,
        containers=containers_for(demo, os.environ),
        simulator_options={"fixed_keys": True} if demo else None,
    )
    stack.seed_demo = seed_demo
    stack.print_event = lambda line: print(line, flush=True)  # what a downstream consumer receives
    try:
        stack.start()
    except PortInUse as error:
        print(f"tally: {error} (e.g. TALLY_API_PORT=3001 make run)", file=sys.stderr)
        return 1
    try:
        stack.write_state()
        print(stack.describe(), "", "Ctrl-C to stop", sep="\n", flush=True)
        if demo:
            from tally_local.day import play_into

            play_into(stack, int(demo) if demo.isdigit() and int(demo) >= 8 else 200)
        _wait_for_signal()
        print("stopping ...", flush=True)
    finally:
        stack.stop()
    return 0


def _wait_for_signal() -> None:
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    while not stopping.wait(0.5):
        continue


if __name__ == "__main__":
    sys.exit(main())
