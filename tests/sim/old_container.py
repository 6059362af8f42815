"""A warm container of another release: `python tests/sim/old_container.py <release tree>`.

Started by tests/sim/upgrade.py with the simulation's environment (table names, queue URLs, the channel
simulator's URL) and `AWS_ENDPOINT_URL` pointing at the moto server that shares the simulation's backends. The
release tree's `layers/common` and root come first on `sys.path`, so `tally` (and `tally_local.resources`, which
loads the handlers) are that release's code; nothing of the current tree is imported.

One request per stdin line, one answer per line on the answer pipe (the process's original stdout; everything
the code prints, logs and EMF metrics, goes to a buffer and then to stderr, never on the answer pipe):

    {"op": "invoke", "function": "NotifyFunction", "event": {...}, "now": 1767225600.0}
    {"op": "poll", "now": ...}       the poller λ's order and refund work (as Scenario.poll_tick)
    {"op": "recon", "channel": "wechatpay", "mchid": "...", "bill_date": "2026-01-01", "now": ...}
    {"op": "release", "now": ...}    where its `tally` package was imported from

and the answer: {"result": ..., "out": "what it printed"} or {"error": "Type: message", "out": "..."}.
Each handler is imported on its first invocation (a cold start) and stays warm until stdin closes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def main() -> None:
    tree = Path(sys.argv[1]).resolve()
    sys.path[:1] = [str(tree / "layers" / "common"), str(tree)]  # not this file's directory: no current code
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever writes to fd 1 directly lands on stderr, never on the answer pipe

    from tally import bootstrap
    from tally.observability import metrics as product_metrics

    from tally_local.resources import LambdaContext, function_specs, load_handler, load_template

    now = [0.0]
    bootstrap.set_clock(lambda: now[0])
    specs = function_specs(load_template(tree / "template.yaml"), tree)
    handlers: dict[str, Any] = {}

    def run(request: dict[str, Any]) -> Any:
        op = request["op"]
        if op == "invoke":
            name = request["function"]
            if name not in handlers:
                handlers[name] = load_handler(specs[name])
            return handlers[name](request["event"], LambdaContext(name, timeout_s=900))
        if op == "release":  # which code answers: the meta-test's proof that this is the other release
            import tally

            return {"tally": tally.__file__, "handlers": sorted(specs)}
        try:
            if op == "poll":
                refunds = bootstrap.refund_service()
                return {
                    "outcomes": bootstrap.poll_service().run().outcomes,
                    "refunds": refunds.poll_due(50),
                    "refund_tasks": refunds.work_tasks(50),
                }
            if op == "recon":
                return bootstrap.recon_service().run(
                    request["channel"], request["mchid"], request["bill_date"]
                )
        finally:
            product_metrics.flush_metrics()
        raise ValueError(f"unknown op {op!r}")

    print(json.dumps({"ready": os.getpid()}), file=answers)
    for line in iter(sys.stdin.readline, ""):
        request = json.loads(line)
        now[0] = float(request["now"])
        out = io.StringIO()
        answer: dict[str, Any]
        with contextlib.redirect_stdout(out):
            try:
                answer = {"result": run(request)}
            except Exception as error:  # noqa: BLE001 - what the Lambda runtime reports: an error answer
                traceback.print_exc(file=sys.stderr)
                answer = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        answer["out"] = out.getvalue()  # logs and EMF lines: the parent counts the metrics
        print(json.dumps(answer, default=str), file=answers)


if __name__ == "__main__":
    main()
