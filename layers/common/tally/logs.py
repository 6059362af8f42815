"""The product's structured log lines: one JSON object per line on stdout, from the stdlib `logging` and `json`.

It replaces Powertools' Logger (issue #20 item 4, docs/cost.md "Cold start"): Powertools' import (its logger
pulls jmespath, its formatter, buffering, the tracer's helpers) was the largest part of the notify function's
cold start after boto3, for lines this module prints the same. The fields and their order are Powertools'
(docs/observability.md): `level`, `location`, `message`, `timestamp`, `service`, the invocation's keys
(`cold_start`, `function_name`, `function_memory_size`, `function_arn`, `function_request_id`), the keys
appended for the invocation (`raw_key` …), the line's `extra`, then `exception`, `exception_name`,
`exception_notes`, `stack_trace` and `xray_trace_id` when there are; a key whose value is None is left out.

What is printed is only what the code passes: nothing here reads a body, a secret or an event (the event is
never logged), which is how no secret reaches a log (tests/security/test_security.py::test_no_secret_in_logs).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tally.settings import log_level, xray_trace_header

# LogRecord attributes that are not a line's `extra` (Powertools' RESERVED_LOG_ATTRS, plus Python 3.12's
# taskName and the message a Formatter may have cached on the record)
_RECORD_ATTRS = frozenset(
    (
        "name msg args level levelname levelno pathname filename module exc_info exc_text stack_info lineno "
        "funcName created msecs relativeCreated thread threadName processName process asctime location "
        "timestamp taskName message"
    ).split()
)


class JsonFormatter(logging.Formatter):
    """A LogRecord as one compact JSON line (ensure_ascii off: Chinese reasons stay readable; str() for
    anything json cannot encode, as Powertools' json_default)."""

    def __init__(self, service: str):
        super().__init__()
        self.service = service
        self.keys: dict[str, Any] = {}  # the invocation's keys (inject_lambda_context) and append_keys

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "level": record.levelname,
            "location": f"{record.funcName}:{record.lineno}",
            "message": _message(record),
            "timestamp": self.formatTime(record),
            "service": self.service,
        }
        line.update(self.keys)
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS:
                line[key] = value
        exc_info = record.exc_info
        if isinstance(exc_info, tuple) and hasattr(exc_info[0], "__name__"):
            kind, error, tb = exc_info
            line.setdefault("exception", self.formatException(exc_info))
            line.setdefault("exception_name", kind.__name__)  # type: ignore[union-attr]
            line.setdefault("exception_notes", getattr(error, "__notes__", None))
            line["stack_trace"] = {
                "type": kind.__name__,  # type: ignore[union-attr]
                "value": error,
                "module": error.__class__.__module__,
                "frames": [
                    {"file": f.filename, "line": f.lineno, "function": f.name, "statement": f.line}
                    for f in traceback.extract_tb(tb)
                ],
            }
        trace = xray_trace_header()
        line["xray_trace_id"] = trace.split(";")[0].replace("Root=", "") if trace else None
        return json.dumps(
            {k: v for k, v in line.items() if v is not None},
            default=str,
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """2026-12-01 18:19:57,656+0000: local time (UTC on Lambda), milliseconds, offset (Powertools' default)."""
        return time.strftime(f"%Y-%m-%d %H:%M:%S,{int(record.msecs):03d}%z", time.localtime(record.created))


def _message(record: logging.LogRecord) -> Any:
    if isinstance(record.msg, dict):
        return record.msg
    return record.getMessage() if record.args else record.msg


class StructuredLogger:
    """The `logging.Logger` named after the service, with one JSON handler on stdout and no propagation (on
    Lambda the runtime's root handler would print every line a second time). The interface the product and
    its tests use: the level methods with `extra=` (or keyword arguments), `append_keys`, `remove_keys`,
    `inject_lambda_context(clear_state=True)`, `registered_handler`, `log_level`, `setLevel`, `addHandler`."""

    def __init__(self, service: str, level: str | int | None = None):
        self.service = service
        self._logger = logging.getLogger(service)
        self._logger.propagate = False
        self.formatter = JsonFormatter(service)
        self.handler = logging.StreamHandler(sys.stdout)  # the stdout of this moment, as Powertools did
        self.handler.setFormatter(self.formatter)
        self._logger.addHandler(self.handler)
        self._logger.setLevel(level if level is not None else log_level())
        self._cold = True

    # ---- the level methods (stacklevel=2: `location` is the caller's line)
    def debug(self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any) -> None:
        self._log(logging.DEBUG, msg, args, extra, kw)

    def info(self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any) -> None:
        self._log(logging.INFO, msg, args, extra, kw)

    def warning(
        self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any
    ) -> None:
        self._log(logging.WARNING, msg, args, extra, kw)

    def error(self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any) -> None:
        self._log(logging.ERROR, msg, args, extra, kw)

    def critical(
        self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any
    ) -> None:
        self._log(logging.CRITICAL, msg, args, extra, kw)

    def exception(
        self, msg: object, *args: object, extra: Mapping[str, object] | None = None, **kw: Any
    ) -> None:
        kw.setdefault("exc_info", True)
        self._log(logging.ERROR, msg, args, extra, kw)

    def _log(
        self, level: int, msg: object, args: tuple[object, ...], extra: Mapping[str, object] | None, kw: Any
    ) -> None:
        if not self._logger.isEnabledFor(level):
            return
        exc_info = kw.pop("exc_info", None)
        stack_info = kw.pop("stack_info", False)
        self._logger.log(
            level,
            msg,
            *args,
            exc_info=exc_info,
            stack_info=stack_info,
            stacklevel=kw.pop("stacklevel", 2) + 1,  # as Powertools counts (2: the caller), plus this _log
            extra={**(extra or {}), **kw},
        )

    # ---- keys on every line
    def append_keys(self, **keys: Any) -> None:
        self.formatter.keys.update(keys)

    def remove_keys(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.formatter.keys.pop(key, None)

    def inject_lambda_context(
        self, handler: Callable[..., Any] | None = None, *, clear_state: bool = False
    ) -> Any:
        """A handler decorator: every line of the invocation names it (cold_start, function_*); with
        `clear_state` the keys an earlier invocation appended are dropped first."""
        if handler is None:
            return functools.partial(self.inject_lambda_context, clear_state=clear_state)

        @functools.wraps(handler)
        def decorate(event: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
            keys = {
                "cold_start": self._cold,
                "function_name": getattr(context, "function_name", None),
                "function_memory_size": getattr(context, "memory_limit_in_mb", None),
                "function_arn": getattr(context, "invoked_function_arn", None),
                "function_request_id": getattr(context, "aws_request_id", None),
            }
            self._cold = False
            if clear_state:
                self.formatter.keys = keys
            else:
                self.formatter.keys.update(keys)
            return handler(event, context, *args, **kwargs)

        return decorate

    # ---- the stdlib logger underneath (the CLI and tests point its handler elsewhere)
    @property
    def registered_handler(self) -> logging.StreamHandler:  # type: ignore[type-arg]
        return self.handler

    @property
    def log_level(self) -> int:
        return self._logger.level

    def setLevel(self, level: str | int) -> None:  # noqa: N802 - logging's spelling
        self._logger.setLevel(level)

    def addHandler(self, handler: logging.Handler) -> None:  # noqa: N802
        self._logger.addHandler(handler)

    def removeHandler(self, handler: logging.Handler) -> None:  # noqa: N802
        self._logger.removeHandler(handler)
