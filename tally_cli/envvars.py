"""`tally env-vars --stack NAME > env.json`: the functions' environment on a deployed stack, for
`sam local invoke NotifyFunction --env-vars env.json -e events/notify_wechatpay.json` (docs/deploy.md).

Every variable of template.yaml's Globals comes from a stack output or parameter (a test keeps the two
lists equal), so a local invoke talks to the deployed stack's own tables, queue, bus and secrets.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tally_cli.env import OUTPUT_ENV, describe_stack
from tally_cli.speak import _

PARAMETER_ENV = {
    "WechatPayApiBase": "WECHATPAY_API_BASE",
    "AlipayGateway": "ALIPAY_GATEWAY",
    "RefundTaskPolicy": "REFUND_TASK_POLICY",
    "MetricMerchants": "TALLY_METRIC_MERCHANTS",
    "PollMerchantQps": "TALLY_POLL_MERCHANT_QPS",
    "AuditRetentionDays": "AUDIT_RETENTION_DAYS",
    "WebhookPrivateAddresses": "TALLY_WEBHOOK_PRIVATE",
}
CONSTANT_ENV = {
    "POWERTOOLS_SERVICE_NAME": "tally",
    "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    "POWERTOOLS_LOG_LEVEL": "INFO",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "env-vars", help=_("the functions' environment on a stack, as sam local invoke --env-vars")
    )
    p.add_argument("--stack", default="tally", help=_("deployed CloudFormation stack name (default: tally)"))
    p.set_defaults(run=env_vars)


def env_vars_of(stack: dict[str, Any]) -> dict[str, dict[str, str]]:
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    env = dict(CONSTANT_ENV)
    env.update({var: outputs[key] for key, var in OUTPUT_ENV.items() if key in outputs})
    env.update({var: parameters[key] for key, var in PARAMETER_ENV.items() if key in parameters})
    # "Parameters" applies to every function (sam local invoke's --env-vars format)
    return {"Parameters": dict(sorted(env.items()))}


def env_vars(args: argparse.Namespace) -> int:
    json.dump(env_vars_of(describe_stack(args.stack)), sys.stdout, indent=2)
    print()
    return 0
