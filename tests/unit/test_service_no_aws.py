"""store/ owns every AWS call (issue #19 item 3, docs/gates.md): no module of tally/service builds a DynamoDB
expression or calls an AWS client. .importlinter's `service-no-aws` contract forbids importing boto3; this
test reads the code itself (a client can be passed in without importing boto3), with the ast module:

* a call of a client method (put_item, transact_write_items, get_secret_value, put_events, send_message …);
* a DynamoDB request parameter as a keyword or dict key (ConditionExpression, TransactItems, Key …);
* an expression in a string (attribute_exists(…), list_append(…), "SET x = :x" …);
* reaching a client through `.ddb` / `.exceptions`, or encoding items (tally.store.codec).

PENDING names the files still carrying calls, each with who moves them; an entry that no longer finds
anything fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "layers" / "common" / "tally" / "service"

PENDING: dict[
    str, str
] = {}  # empty: every service module is clean (the queue's conditions are store.queue.Expect)

CLIENT_METHODS = {
    # DynamoDB
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "transact_write_items",
    "transact_get_items",
    "batch_write_item",
    "batch_get_item",
    "scan",
    "execute_statement",
    # SQS
    "send_message",
    "send_message_batch",
    "receive_message",
    "delete_message",
    # S3
    "get_object",
    "put_object",
    "list_objects_v2",
    "head_object",
    # Secrets Manager
    "get_secret_value",
    "put_secret_value",
    "create_secret",
    # EventBridge
    "put_events",
    "start_replay",
    "describe_replay",
    "describe_event_bus",
    # Cognito, CloudWatch
    "admin_get_user",
    "put_metric_data",
}

REQUEST_PARAMS = {
    "TransactItems",
    "TableName",
    "IndexName",
    "Key",
    "Item",
    "ConditionExpression",
    "UpdateExpression",
    "KeyConditionExpression",
    "FilterExpression",
    "ProjectionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ReturnValues",
    "ReturnValuesOnConditionCheckFailure",
    "ExclusiveStartKey",
    "ConsistentRead",
    "QueueUrl",
    "MessageBody",
    "SecretId",
    "SecretString",
    "Entries",
    "EventBusName",
}

EXPRESSION = re.compile(
    r"\b(attribute_exists|attribute_not_exists|attribute_type|begins_with|list_append|if_not_exists)\s*\("
    r"|^\s*(SET|REMOVE|ADD|DELETE)\s+#?\w+\s*(=|:|,|$)"
    r"|\w\s*(=|<=?|>=?|<>)\s*:\w"
)
CLIENT_ATTRS = {"ddb", "exceptions"}


def violations(source: str) -> list[str]:
    """Every AWS call or DynamoDB expression in one module's source, as `line: what`."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in CLIENT_METHODS:
                found.append(f"{line}: client call .{node.func.attr}()")
            found += [f"{line}: request parameter {k.arg}=" for k in node.keywords if k.arg in REQUEST_PARAMS]
        elif isinstance(node, ast.Dict):
            found += [
                f"{line}: request parameter {k.value!r}"
                for k in node.keys
                if isinstance(k, ast.Constant) and k.value in REQUEST_PARAMS
            ]
        elif isinstance(node, ast.Attribute) and node.attr in CLIENT_ATTRS:
            found.append(f"{line}: client reached through .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if EXPRESSION.search(node.value):
                found.append(f"{line}: expression {node.value[:60]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module == "tally.store.codec":
            found.append(f"{line}: encodes DynamoDB items (tally.store.codec)")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SERVICE.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_service_module_makes_no_aws_call(path: Path) -> None:
    found = violations(path.read_text(encoding="utf-8"))
    if path.name in PENDING:
        assert found, f"service/{path.name} is clean now: take it off PENDING ({PENDING[path.name]})"
        return
    assert not found, (
        f"service/{path.name} talks to AWS itself; move it behind a store/ class:\n" + "\n".join(found)
    )


def test_pending_names_existing_files() -> None:
    assert set(PENDING) <= {p.name for p in _modules()}


@pytest.mark.parametrize(
    "snippet",
    [
        "self.t.ddb.update_item(Key=k)",
        "client.put_events(Entries=[])",
        "x = {'TransactItems': items}",
        "cond = 'handled = :two AND attribute_exists(pending_pk)'",
        "update = 'SET resolution = :entry'",
        "secrets.get_secret_value(SecretId=name)",
        "from tally.store.codec import to_item",
        "try:\n    pass\nexcept store.exceptions.ConditionalCheckFailedException:\n    pass",
    ],
)
def test_scanner_finds_a_planted_call(snippet: str) -> None:
    assert violations(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        '"""One TransactWriteItems with ConditionExpression handled = :zero (a docstring)."""',
        "result = self.channels.query(order)",
        "logger.info('payment booked', extra={'raw_key': key})",
        "text = f'amount {a} = {b}'",
    ],
)
def test_scanner_leaves_ordinary_code_alone(snippet: str) -> None:
    assert not violations(snippet), snippet
