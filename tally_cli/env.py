"""Where the CLI finds the stack: `--local` (the stack `make run` started) or a deployed CloudFormation stack."""

from __future__ import annotations

import json
import os
import pathlib

from tally_cli.speak import _

# CloudFormation output → environment variable the product reads (docs/contracts.md).
OUTPUT_ENV = {
    "NotifyRawTableName": "NOTIFY_RAW_TABLE",
    "NotifyEventTableName": "NOTIFY_EVENT_TABLE",
    "OrdersTableName": "ORDERS_TABLE",
    "TransitionsTableName": "TRANSITIONS_TABLE",
    "LedgerTableName": "LEDGER_TABLE",
    "RefundTasksTableName": "REFUND_TASKS_TABLE",
    "MerchantsTableName": "MERCHANTS_TABLE",
    "RefundsTableName": "REFUNDS_TABLE",
    "RefundRawTableName": "REFUND_RAW_TABLE",
    "ApplyQueueUrl": "APPLY_QUEUE_URL",
    "BillsBucketName": "BILLS_BUCKET",
    "ReconRunsTableName": "RECON_RUNS_TABLE",
    "ReconDiffTableName": "RECON_DIFF_TABLE",
    "MerchantSecretPrefix": "MERCHANT_SECRET_PREFIX",  # per stack (docs/deploy.md)
    "EventBusName": "EVENT_BUS_NAME",
    "EventArchiveArn": "EVENT_ARCHIVE_ARN",
    "OutboxDLQUrl": "OUTBOX_DLQ_URL",  # an event-generation-failed case's `replay` (docs/webhooks.md)
    "ReconStateMachineArn": "RECON_STATE_MACHINE_ARN",
    "ConsoleUserPoolId": "CONSOLE_USER_POOL_ID",  # the console's sign-in (docs/console.md; absent in China)
    "ConsoleUserPoolClientId": "CONSOLE_CLIENT_ID",
    "WebhooksTableName": "WEBHOOKS_TABLE",  # docs/webhooks.md
    "WebhookQueueUrl": "WEBHOOK_QUEUE_URL",
    "AlertsTableName": "ALERTS_TABLE",  # incidents and the alert log (docs/alerts.md)
    "JournalTableName": "JOURNAL_TABLE",  # the decision journal (docs/audit.md)
    "AuditBucketName": "AUDIT_BUCKET",  # seals and evidence (docs/audit.md)
    "AuditKeyId": "AUDIT_KEY_ID",
}


class StackNotFound(RuntimeError):
    pass


def state_file() -> pathlib.Path:
    """`$TALLY_STATE_DIR/local.json`, else `.tally/local.json` here, else the checkout's own (the editable
    install's project folder), so `tally … --local` works from any folder once `tally` is on PATH."""
    if "TALLY_STATE_DIR" in os.environ:
        return pathlib.Path(os.environ["TALLY_STATE_DIR"]) / "local.json"
    here = pathlib.Path(".tally") / "local.json"
    checkout = checkout_state_file()
    return here if here.exists() or not checkout.exists() else checkout


def checkout_state_file() -> pathlib.Path:
    """The project folder's `.tally/local.json` (this file is `<project>/tally_cli/env.py`)."""
    return pathlib.Path(__file__).resolve().parents[1] / ".tally" / "local.json"


def use_local() -> dict:
    path = state_file()
    if not path.exists():
        raise StackNotFound(
            _("%(path)s not found: start the local stack with `make run` (in the project folder)")
            % {"path": path}
        )
    state = json.loads(path.read_text())
    os.environ.update(state["env"])
    os.environ["AWS_ENDPOINT_URL"] = state["endpoint_url"]
    os.environ.setdefault("AWS_DEFAULT_REGION", state.get("region", "us-east-1"))
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    return state


def describe_stack(stack_name: str) -> dict:
    """The deployed stack's description (outputs, parameters), or StackNotFound saying why not."""
    import boto3

    try:
        return boto3.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    except Exception as exc:  # noqa: BLE001 - any failure here is reported to the person, verbatim
        hint = ""
        if state_file().exists():  # a local stack is running: the person most likely forgot --local
            hint = _("; the embedded stack is running here: add --local")
        raise StackNotFound(
            _("cannot read stack %(stack)r: %(why)s") % {"stack": stack_name, "why": exc} + hint
        ) from None


def use_deployed(stack_name: str) -> dict:
    stack = describe_stack(stack_name)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    for key, var in OUTPUT_ENV.items():
        if key in outputs:
            os.environ[var] = outputs[key]
    return {"api_url": outputs.get("ApiUrl", ""), "env": dict(os.environ)}
