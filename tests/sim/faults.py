"""AWS faults through botocore's event hooks: nothing in the product is patched.

A fault names one call: service, operation, the table (DynamoDB) and which occurrence (the nth such
call in the scenario). `phase` says whether it fails *before* the call takes effect (`before-call`:
the request never reaches AWS) or *after* (`after-call`: AWS did the write, the caller sees an error
anyway, as with a timeout on the response). Kinds:

- throttle: the service's throttling error (what botocore raises once its own retries gave up);
- timeout:  botocore's ReadTimeoutError;
- error500: InternalServerError;
- crash:    the Lambda process dies there (SimulatedCrash is a BaseException: no `except Exception`
            in the product can catch it, as no code survives a killed container).

Calls to the merchants table and Secrets Manager are never targeted: the merchant cache is warm or
cold depending on the previous scenario, and counting them would make a replay differ from the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ReadTimeoutError

KINDS = ("throttle", "timeout", "error500", "crash")
THROTTLE_CODE = {"dynamodb": "ProvisionedThroughputExceededException", "sqs": "RequestThrottled"}


class SimulatedCrash(BaseException):
    """The container died mid-invocation (no answer to the caller, nothing after this point runs)."""


@dataclass(frozen=True)
class AwsFault:
    service: str  # "dynamodb" | "sqs"
    operation: str  # botocore operation name, e.g. "PutItem"
    table_env: str | None  # e.g. "NOTIFY_RAW_TABLE"; None = any table / not DynamoDB
    nth: int  # fire on the nth matching call (1-based)
    phase: str  # "before" | "after"
    kind: str  # one of KINDS

    @property
    def label(self) -> str:
        where = (
            f"{self.operation}[{self.table_env.removesuffix('_TABLE').lower()}]"
            if self.table_env
            else self.operation
        )
        return f"aws {self.service}.{where} {self.kind} {self.phase}"


@dataclass
class FaultInjector:
    """Registered once per process on the product's clients; armed with each scenario's faults."""

    tables: dict[str, str] = field(default_factory=dict)  # env var -> table name
    planned: list[AwsFault] = field(default_factory=list)
    fired: list[AwsFault] = field(default_factory=list)
    counts: dict[tuple[str, str, str | None], int] = field(default_factory=dict)
    _attached: set[int] = field(default_factory=set)
    _crash_next: tuple[str, str] | None = None  # (service, label): the next call of that service dies

    def attach(self, client: Any) -> None:
        if id(client) in self._attached:
            return
        self._attached.add(id(client))
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-call.{service}", self._before)
        client.meta.events.register(f"after-call.{service}", self._after)

    def arm(self, faults: list[AwsFault]) -> None:
        self.planned = list(faults)
        self.fired = []
        self.counts = {}

    def disarm(self) -> None:
        self.planned = []
        self._crash_next = None

    def crash_next(self, service: str, label: str) -> None:
        """The next call of `service` the product makes crashes before it takes effect (e.g. right after
        a channel call returned: the step that would record what the channel did never runs)."""
        self._crash_next = (service, label)

    # ------------------------------------------------------------------ hooks

    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if self._crash_next and self._crash_next[0] == model.service_model.service_id.hyphenize():
            label = self._crash_next[1]
            self._crash_next = None
            fault = AwsFault(self._crash_next_service(model), model.name, None, 0, "before", "crash")
            self.fired.append(fault)
            raise SimulatedCrash(label)
        fault = self._match(model, params)
        if fault is not None:
            context["sim_fault"] = fault
        if fault is not None and fault.phase == "before":
            self._fire(fault, model)

    @staticmethod
    def _crash_next_service(model: Any) -> str:
        return str(model.service_model.service_id.hyphenize())

    def _after(self, model: Any, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        fault = context.get("sim_fault")
        if fault is not None and fault.phase == "after" and http_response.status_code < 300:
            self._fire(fault, model)

    def _match(self, model: Any, params: dict[str, Any]) -> AwsFault | None:
        service = model.service_model.service_id.hyphenize()
        table = self._table_env(params.get("body"))
        key = (service, model.name, table)
        self.counts[key] = n = self.counts.get(key, 0) + 1
        for fault in self.planned:
            if (fault.service, fault.operation, fault.table_env) == key and fault.nth == n:
                return fault
        return None

    def _table_env(self, body: Any) -> str | None:
        if not isinstance(body, (bytes, str)) or not self.tables:
            return None
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        # TransactWriteItems spans tables: it is matched on the operation alone (table None).
        if '"TransactItems"' in text:
            return None
        for env_var, name in self.tables.items():
            if f'"TableName": "{name}"' in text or f'"TableName":"{name}"' in text:
                return env_var
        return None

    def _fire(self, fault: AwsFault, model: Any) -> None:
        self.planned.remove(fault)
        self.fired.append(fault)
        service = model.service_model.service_id.hyphenize()
        if fault.kind == "crash":
            raise SimulatedCrash(fault.label)
        if fault.kind == "timeout":
            raise ReadTimeoutError(endpoint_url=f"https://{service}.us-east-1.amazonaws.com/")
        from botocore.exceptions import ClientError

        code = THROTTLE_CODE[service] if fault.kind == "throttle" else "InternalServerError"
        raise ClientError(
            {
                "Error": {"Code": code, "Message": f"injected: {fault.label}"},
                "ResponseMetadata": {"HTTPStatusCode": 400 if fault.kind == "throttle" else 500},
            },
            model.name,
        )
