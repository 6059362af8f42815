"""One simulated AWS account per process: in-process moto, the tables and queues of template.yaml, the
real handlers, an injected clock, and an observer of everything the product logs and counts.

Nothing here patches product code: faults go in through botocore's event hooks (tests/sim/faults.py),
time through `tally.bootstrap.set_clock`, and logs/metrics are read from what Powertools writes.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
from typing import Any

import boto3
from moto import mock_aws
from tally import bootstrap
from tally.domain.callers import EVERY_MERCHANT
from tally.observability import logger as tally_logger
from tally.store.codec import from_item

from tally_local.lambda_io import emf_metrics, http_event
from tally_local.resources import (
    LOCAL_ACCOUNT_ID,
    LambdaContext,
    create_from_template,
    function_specs,
    load_handler,
    load_template,
)
from tally_local.sigv4 import LOCAL_BACKEND_ARN

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUSINESS_ENV = ("NOTIFY_RAW_TABLE", "ORDERS_TABLE", "LEDGER_TABLE", "TRANSITIONS_TABLE", "REFUND_TASKS_TABLE")
BASE_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    "POWERTOOLS_SERVICE_NAME": "tally",
}


class SimClock:
    """The clock every service reads (bootstrap.set_clock): moved only by the simulation."""

    def __init__(self, now: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


class Observer:
    """Captures what the product logs (Powertools Logger) and counts (EMF metrics on stdout)."""

    def __init__(self) -> None:
        self.logs = io.StringIO()
        self.metrics: dict[str, int] = {}
        self._handler = tally_logger.registered_handler

    @contextlib.contextmanager
    def watching(self):
        stream = self._handler.setStream(self.logs)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                yield
        finally:
            self._handler.setStream(stream)
            self._read_metrics(out.getvalue())

    def _read_metrics(self, text: str) -> None:
        for name, value in emf_metrics(text):
            self.metrics[name] = self.metrics.get(name, 0) + int(value)
        self.logs.write(
            "".join(
                line + "\n" for line in text.splitlines() if not (line.startswith("{") and '"_aws"' in line)
            )
        )

    def take_metrics(self) -> dict[str, int]:
        taken, self.metrics = self.metrics, {}
        return taken


class SimEnv:
    """Start with `SimEnv.start()`; `stop()` undoes everything (environment, moto, clock)."""

    def __init__(self) -> None:
        self._saved_env: dict[str, str | None] = {}
        self._mock: Any = None
        self.env: dict[str, str] = {}
        self.clock = SimClock()
        self.observer = Observer()
        self.handlers: dict[str, Any] = {}
        self._queue_urls: list[str] = []

    @classmethod
    def start(cls, parameter_overrides: dict[str, str] | None = None) -> SimEnv:
        self = cls()
        for var in [*BASE_ENV, "AWS_ENDPOINT_URL"]:
            self._saved_env[var] = os.environ.get(var)
        os.environ.pop("AWS_ENDPOINT_URL", None)
        os.environ.update(BASE_ENV)
        self._mock = mock_aws()
        self._mock.start()
        session = boto3.Session(region_name="us-east-1")
        self.env = create_from_template(
            ROOT / "template.yaml",
            session,
            parameter_overrides={"WechatPayApiBase": "http://127.0.0.1:9", **(parameter_overrides or {})},
        )
        for var in self.env:
            self._saved_env.setdefault(var, os.environ.get(var))
        os.environ.update(self.env)
        bootstrap.set_clock(self.clock)
        specs = function_specs(load_template(ROOT / "template.yaml"), ROOT)
        self.handlers = {lid: load_handler(spec) for lid, spec in specs.items()}
        # The checker's own clients: no fault hook is ever registered on them.
        self.ddb = boto3.client("dynamodb")
        self.sqs = boto3.client("sqs")
        bootstrap.callers().allow(LOCAL_BACKEND_ARN, [EVERY_MERCHANT], by="simulation")
        return self

    def stop(self) -> None:
        import time

        bootstrap.set_clock(time.time)
        if self._mock is not None:
            self._mock.stop()
        for var, value in self._saved_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        bootstrap.reset()

    # ------------------------------------------------------------------ the product's own clients

    @property
    def product_ddb(self) -> Any:
        return bootstrap.tables().ddb

    @property
    def product_sqs(self) -> Any:
        return bootstrap.ingest_service().queue.sqs

    # ------------------------------------------------------------------ driving the handlers

    def http_event(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        path_params: dict[str, str],
        base64_body: bool = True,
    ) -> dict[str, Any]:
        # the merchant backend's principal, registered for every merchant at start (R53)
        return http_event(
            method, path, body, headers, path_params, base64_body=base64_body, caller=LOCAL_BACKEND_ARN
        )

    def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        with self.observer.watching():
            return self.handlers[function](event, LambdaContext(function, timeout_s=900))

    # ------------------------------------------------------------------ reading state (checker's client)

    def scan(self, env_var: str) -> list[dict[str, Any]]:
        """Every item of a table, read from moto's backend (the fake, never the product): the checker
        reads the tables after every step, and the API's serialisation would cost more than the day."""
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[LOCAL_ACCOUNT_ID]["us-east-1"].tables[self.env[env_var]]
        out = []
        for value in list(table.items.values()):
            for item in value.values() if isinstance(value, dict) else (value,):
                out.append(from_item(item.to_json()["Attributes"]))
        return out

    def scan_api(self, env_var: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.env[env_var], "ConsistentRead": True}
        while True:
            page = self.ddb.scan(**kwargs)
            items += [from_item(i) for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, env_var: str, pk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(TableName=self.env[env_var], Key={"pk": {"S": pk}}, ConsistentRead=True)
        return from_item(answer.get("Item"))

    def clear_business_state(self) -> None:
        """Empty every table but merchants, and both queues: the next scenario starts from nothing.

        Reaches into moto's backend (the fake, never the product): deleting item by item through the
        API costs more than the scenario itself."""
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends[LOCAL_ACCOUNT_ID]["us-east-1"]
        for env_var, name in self.env.items():
            if env_var.endswith("_TABLE") and env_var != "MERCHANTS_TABLE":
                backend.tables[name].items.clear()
        for url in self.queue_urls():
            self.sqs.purge_queue(QueueUrl=url)

    def queue_urls(self) -> list[str]:
        if not self._queue_urls:
            self._queue_urls = self.sqs.list_queues().get("QueueUrls", [])
        return self._queue_urls

    def dlq_url(self) -> str:
        (url,) = [u for u in self.queue_urls() if u.endswith("-ApplyDLQ")]
        return url
