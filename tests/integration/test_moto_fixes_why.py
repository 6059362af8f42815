"""Why each correctness patch of tally_local.moto_fixes is there: moto's own code (`moto_fixes.moto_own`, put
back for the length of a test) gives the wrong outcome, the patch gives AWS's. And the guard: install() refuses a
moto outside the range the patches were checked against, and a patch whose moto attribute is gone."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from botocore.exceptions import ClientError

from tally_local import moto_fixes

# ---- the version range ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["5.2.1", "5.2.1+local"])
def test_a_moto_in_the_checked_range_is_accepted(version):
    moto_fixes.check_moto_version(version)


@pytest.mark.parametrize("version", ["5.2.0", "5.2.2", "5.3.0", "6.0.1", "4.2.14", "5.2.1.dev3"])
def test_a_moto_outside_the_checked_range_is_refused_with_the_range(version):
    with pytest.raises(moto_fixes.MotoFixError, match=r"==5\.2\.1") as refused:
        moto_fixes.check_moto_version(version)
    assert version in str(refused.value)


def test_install_checks_the_installed_moto_before_patching_anything(monkeypatch):
    import moto

    monkeypatch.setattr(moto_fixes, "_installed", False)
    monkeypatch.setattr(moto, "__version__", "5.3.0")
    patched = []
    monkeypatch.setattr(moto_fixes, "PATCHES", (lambda: patched.append(1),))
    with pytest.raises(moto_fixes.MotoFixError, match="this is moto 5.3.0"):
        moto_fixes.install()
    assert patched == [] and moto_fixes._installed is False


def test_a_patch_whose_moto_attribute_is_gone_fails_at_install(monkeypatch):
    import moto.dynamodb.responses

    class DynamoResult:  # a moto whose DynamoResult no longer has execute_result
        pass

    monkeypatch.setattr(moto.dynamodb.responses, "DynamoResult", DynamoResult)
    with pytest.raises(moto_fixes.MotoFixError, match=r"DynamoResult\.execute_result"):
        moto_fixes.items_as_json()


def test_a_hook_moto_grew_itself_is_not_overwritten():
    class MotoGrewIt:
        def __deepcopy__(self, memo):
            return self

    with pytest.raises(moto_fixes.MotoFixError, match="now defines __deepcopy__"):
        moto_fixes._add(MotoGrewIt, "__deepcopy__", lambda self, memo: None)


def test_every_patch_keeps_moto_s_own_function_for_its_test():
    from moto.dynamodb.responses import DynamoHandler

    moto_fixes.install()
    assert moto_fixes.moto_own(DynamoHandler, "call_action") is not DynamoHandler.call_action
    assert moto_fixes.moto_own(DynamoHandler, "call_action").__module__ == "moto.dynamodb.responses"


# ---- atomic_requests -----------------------------------------------------------------------------------------


def test_two_conditional_puts_of_one_key_at_once_one_wins_as_on_dynamodb(patched_moto, monkeypatch):
    """Two `attribute_not_exists(pk)` puts of one key at the same moment: DynamoDB takes one, refuses the other.
    moto's own handler runs both in their werkzeug threads at once, so both see no item and both succeed (a
    payment booked twice); atomic_requests applies them one at a time."""
    import moto.dynamodb.models.table as table_module
    from moto.dynamodb.responses import DynamoHandler

    ddb = patched_moto.client("dynamodb")
    ddb.create_table(
        TableName="race",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    real = table_module.get_filter_expression

    def slow_condition(*args, **kwargs):  # the window between moto's condition check and its write, widened
        op = real(*args, **kwargs)
        check = op.expr

        def expr(item):
            found = check(item)
            time.sleep(0.3)
            return found

        op.expr = expr
        return op

    monkeypatch.setattr(table_module, "get_filter_expression", slow_condition)

    def race(key: str) -> list[str]:
        outcomes: list[str] = []

        def put() -> None:
            try:
                ddb.put_item(
                    TableName="race", Item={"pk": {"S": key}}, ConditionExpression="attribute_not_exists(pk)"
                )
                outcomes.append("written")
            except ClientError as error:
                outcomes.append(error.response["Error"]["Code"])

        threads = [threading.Thread(target=put) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(outcomes)

    assert race("patched") == ["ConditionalCheckFailedException", "written"]
    monkeypatch.setattr(DynamoHandler, "call_action", moto_fixes.moto_own(DynamoHandler, "call_action"))
    assert race("moto") == ["written", "written"]


# ---- local_lambda_invoke -------------------------------------------------------------------------------------


@pytest.fixture
def handler_url():
    """A stand-in for the front door's /_local/lambda/X: answers {"doubled": n * 2}, or a handler error."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            event = json.loads(self.rfile.read(int(self.headers["content-length"])))
            failed = "fail" in event
            body = json.dumps(
                {"errorMessage": "boom", "errorType": "RuntimeError"}
                if failed
                else {"doubled": event["n"] * 2}
            ).encode()
            self.send_response(200)
            if failed:
                self.send_header("x-amz-function-error", "Unhandled")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/_local/lambda/Doubler"
    server.shutdown()
    server.server_close()


def _function(patched_moto, name: str, environment: dict[str, str]) -> str:
    iam = patched_moto.client("iam")
    try:
        role = iam.create_role(RoleName="why", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName="why")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("app.py", "def handler(event, context):\n    return {'doubled': event['n'] * 2}\n")
    return patched_moto.client("lambda").create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
        Environment={"Variables": environment},
    )["FunctionArn"]


def test_a_lambda_invoke_runs_the_function_s_own_handler(patched_moto, handler_url):
    """With the patch an Invoke is answered by the handler behind TALLY_LOCAL_INVOKE_URL, a raised error as
    Lambda reports it. moto's documented Docker-less Lambda (`config={"lambda": {"use_docker": False}}`,
    LambdaSimpleBackend) answers every Invoke with the payload itself, whatever the function: a state machine
    would go on with its own input as each task's result."""
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.core import DEFAULT_ACCOUNT_ID

    _function(patched_moto, "doubler", {moto_fixes.INVOKE_URL_VARIABLE: handler_url})
    lam = patched_moto.client("lambda")
    answer = lam.invoke(FunctionName="doubler", Payload=json.dumps({"n": 21}))
    assert json.loads(answer["Payload"].read()) == {"doubled": 42} and "FunctionError" not in answer
    failed = lam.invoke(FunctionName="doubler", Payload=json.dumps({"n": 1, "fail": True}))
    assert failed["FunctionError"] == "Unhandled"
    assert json.loads(failed["Payload"].read())["errorMessage"] == "boom"

    simple = LambdaSimpleBackend("us-east-1", DEFAULT_ACCOUNT_ID)
    assert json.loads(simple.invoke("doubler", None, json.dumps({"n": 21}), {}, {})) == {"n": 21}


# ---- state_machine_copy_without_executions, map_run_tolerated_failures ---------------------------------------


@pytest.fixture
def sfn(patched_moto, monkeypatch):
    """moto's Step Functions interpreter on (as tally_local/stack.py turns it on), calling this server back."""
    import urllib.request

    def config(on: bool) -> None:
        body = json.dumps({"stepfunctions": {"execute_state_machine": on}}).encode()
        urllib.request.urlopen(
            urllib.request.Request(patched_moto.endpoint + "/moto-api/config", data=body, method="POST"),
            timeout=10,
        ).close()

    monkeypatch.setenv("MOTO_PORT", patched_moto.endpoint.rsplit(":", 1)[1])
    config(True)
    yield patched_moto.client("stepfunctions")
    config(False)


def _machine(sfn, name: str, definition: dict) -> str:
    return sfn.create_state_machine(
        name=name, definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/why"
    )["stateMachineArn"]


def _start(sfn, arn: str, input: str) -> dict:
    return sfn.start_execution(stateMachineArn=arn, name=f"run-{time.monotonic_ns()}", input=input)


def _finished(sfn, arn: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = sfn.describe_execution(executionArn=arn)
        if found["status"] != "RUNNING":
            return found
        time.sleep(0.05)
    raise AssertionError(f"{arn} still running")


def _output(done: dict) -> object:
    try:
        return json.loads(done["output"])
    except ValueError:
        return done["output"]  # moto hands a Pass state's plain string Result back unquoted


PASS = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}


def test_a_state_machine_runs_a_second_time(sfn, monkeypatch):
    """The recon machine runs once a day per merchant: the second StartExecution must start. moto deep-copies
    the machine with its executions (their worker's locks): the second start fails."""
    from moto.stepfunctions.models import StateMachineInstance

    arn = _machine(sfn, "twice", PASS)
    for n in range(2):
        started = _start(sfn, arn, input=json.dumps({"n": n}))
        assert _finished(sfn, started["executionArn"])["status"] == "SUCCEEDED"

    monkeypatch.delattr(StateMachineInstance, "__deepcopy__")  # moto's own copy
    with pytest.raises(ClientError, match="500"):  # moto: "cannot pickle '_thread.RLock' object"
        _start(sfn, arn, input="{}")


MAP = {
    "StartAt": "Map",
    "States": {
        "Map": {
            "Type": "Map",
            "ItemsPath": "$.items",
            "ItemProcessor": {
                "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                "StartAt": "Child",
                "States": {
                    "Child": {
                        "Type": "Choice",
                        "Choices": [{"Variable": "$.ok", "BooleanEquals": True, "Next": "Done"}],
                        "Default": "Broken",
                    },
                    "Done": {"Type": "Succeed"},
                    "Broken": {"Type": "Fail", "Error": "PartitionFailed", "Cause": "unreadable"},
                },
            },
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Blocked"}],
            "Next": "Concluded",
        },
        "Concluded": {"Type": "Pass", "Result": "concluded", "End": True},
        "Blocked": {"Type": "Pass", "Parameters": {"blocked.$": "$.error.Error"}, "End": True},
    },
}


def test_a_distributed_map_whose_child_fails_fails_as_on_aws(sfn, monkeypatch):
    """ToleratedFailureCount 0 (the default): one failed child fails the Map with
    States.ExceedToleratedFailureThreshold, which its Catch routes (recon blocks the run). moto counts the
    failure and concludes the Map with a null result: the run would conclude on the partitions that finished."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (  # noqa: E501
        DistributedIterationComponent,
    )

    arn = _machine(sfn, "map", MAP)
    items = {"items": [{"ok": True}, {"ok": False}, {"ok": True}]}

    def outcome() -> object:
        done = _finished(sfn, _start(sfn, arn, input=json.dumps(items))["executionArn"])
        return _output(done)

    assert outcome() == {"blocked": "States.ExceedToleratedFailureThreshold"}
    all_ok = {"items": [{"ok": True}, {"ok": True}]}
    done = _finished(sfn, _start(sfn, arn, input=json.dumps(all_ok))["executionArn"])
    assert done["status"] == "SUCCEEDED", done
    assert _output(done) == "concluded"

    own = moto_fixes.moto_own(DistributedIterationComponent, "_map_run")
    monkeypatch.setattr(DistributedIterationComponent, "_map_run", own)
    assert outcome() == "concluded"


# ---- the cost patches without a test of their own elsewhere: the same answer as moto's own code -------------


def test_cached_module_list_is_moto_s_list():
    import moto.backends as backends

    moto_fixes.install()
    assert list(backends.list_of_moto_modules()) == list(
        moto_fixes.moto_own(backends, "list_of_moto_modules")()
    )
    assert "dynamodb" in backends.list_of_moto_modules()


def test_cached_jsonpath_finds_what_moto_s_parser_finds():
    import jsonpath_ng.ext

    moto_fixes.install()
    event = {"detail": {"order": "o1", "amount": [1, 2]}, "source": "tally", "time": "2026-12-06T10:00:00Z"}
    for path in ("$.detail", "$.detail.amount[1]", "$.source", "$.time", "$.missing"):
        ours = [m.value for m in jsonpath_ng.ext.parse(path).find(event)]
        theirs = [m.value for m in moto_fixes.moto_own(jsonpath_ng.ext, "parse")(path).find(event)]
        assert ours == theirs
        assert jsonpath_ng.ext.parse(path) is jsonpath_ng.ext.parse(path)  # parsed once


def test_one_queue_attribute_answers_as_moto_s_all_attributes(patched_moto):
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import SQSBackend, sqs_backends

    sqs = patched_moto.client("sqs")
    url = sqs.create_queue(QueueName="attrs", Attributes={"DelaySeconds": "0"})["QueueUrl"]
    try:
        for n in range(5):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{n}", DelaySeconds=600 if n == 4 else 0)
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=600)
        backend = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        own = moto_fixes.moto_own(SQSBackend, "get_queue_attributes")
        names = sorted(moto_fixes._PLAIN_QUEUE_ATTRIBUTES)
        assert backend.get_queue_attributes("attrs", names) == own(backend, "attrs", names)
        for name in names:
            assert backend.get_queue_attributes("attrs", [name]) == own(backend, "attrs", [name])
        counts = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        assert counts == {
            "ApproximateNumberOfMessages": "2",
            "ApproximateNumberOfMessagesNotVisible": "2",
            "ApproximateNumberOfMessagesDelayed": "1",
        }
        message = backend.get_queue("attrs")._messages[0]
        own_retention = moto_fixes.moto_own(SQSBackend, "is_message_valid_based_on_retention_period")
        assert backend.is_message_valid_based_on_retention_period("attrs", message) is own_retention(
            backend, "attrs", message
        )
    finally:
        sqs.delete_queue(QueueUrl=url)
