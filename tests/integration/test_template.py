"""template.yaml is valid SAM/CloudFormation and keeps the promises of docs/contracts.md.

cfn-lint misses some SAM mistakes, so the template is also put through a strict samtranslator
transform (what CloudFormation runs on deploy), for an AWS and a China region.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from samtranslator.model.exceptions import InvalidDocumentException

from tally_local.resources import load_template
from tests.integration.template_helpers import ROOT, TEMPLATE, sam_transform

TABLES = {
    "NotifyRawTable": (
        "NOTIFY_RAW_TABLE",
        ["pk"],
        {
            "by_pending": ["pending_pk", "pending_at"],
            "by_order": ["order_pk", "notified_at"],
            "by_merchant": ["mchid", "notified_at"],  # the console's last callback seen (docs/console.md)
        },
    ),
    "NotifyEventTable": (
        "NOTIFY_EVENT_TABLE",
        ["pk"],
        {"manual": ["manual_kind", "created_at"], "by_order": ["order_pk", "created_at"]},
    ),
    "OrdersTable": (
        "ORDERS_TABLE",
        ["pk"],
        {
            "by_poll": ["poll_pk", "poll_due"],
            "by_hold": ["hold_pk", "hold_due"],
            "by_updated": ["upd_shard", "updated_at"],  # --since (store/changes.py), never a Scan (R21)
        },
    ),
    "TransitionsTable": ("TRANSITIONS_TABLE", ["pk", "sk"], {}),
    "LedgerTable": (
        "LEDGER_TABLE",
        ["pk"],
        {"by_bill_shard": ["bill_shard", "pk"]},
    ),
    "RefundTasksTable": ("REFUND_TASKS_TABLE", ["pk"], {"by_status": ["status", "created_at"]}),
    "MerchantsTable": ("MERCHANTS_TABLE", ["pk"], {}),
    "RefundsTable": (
        "REFUNDS_TABLE",
        ["pk"],
        {
            "by_poll": ["poll_pk", "poll_due"],
            "refunds_of_order": ["order_pk", "created_at"],
            "by_refund_no": ["refund_no"],  # the operator's lookup: refund numbers are per merchant (R39)
            "by_refund_id": ["refund_id"],  # support's search by the channel's refund id (tally find)
            "by_updated": ["upd_shard", "updated_at"],  # --since (store/changes.py), never a Scan (R21)
        },
    ),
    "RefundRawTable": (
        "REFUND_RAW_TABLE",
        ["pk", "sk"],
        {"by_manual": ["manual_pk", "notified_at"], "by_pending": ["pending_pk", "notified_at"]},
    ),
    "WebhooksTable": (  # docs/webhooks.md
        "WEBHOOKS_TABLE",
        ["pk", "sk"],
        {
            "endpoints_of_merchant": ["endpoint_mchid", "created_at"],
            "by_feed": ["feed_pk", "seq"],
            "events_of_order": ["order_pk", "seq"],
            "by_endpoint": ["log_endpoint", "at"],
        },
    ),
    "ReconRunsTable": ("RECON_RUNS_TABLE", ["pk", "sk"], {"by_blocked": ["blocked_pk", "pk"]}),
    "ReconDiffTable": ("RECON_DIFF_TABLE", ["pk", "sk"], {"by_open": ["open_pk", "opened_at"]}),
    "AlertsTable": ("ALERTS_TABLE", ["pk", "sk"], {}),  # incidents and the alert log (docs/alerts.md)
    "JournalTable": ("JOURNAL_TABLE", ["pk", "sk"], {"by_day": ["head_day", "pk"]}),  # docs/audit.md
}
NARROW_PROJECTIONS = {
    "by_order",
    "manual",
    "by_merchant",
}  # history / queue / console views: INCLUDE; every other index projects ALL
KEYS_ONLY = {"by_refund_no", "by_refund_id", "by_updated"}  # lookups that read the row after
CUSTOM_METRIC_ALARMS = [
    "NotifyRejected",
    "NotifyQuarantined",
    "EnqueueFailed",
    "ApplyManual",
    "ApplyFailed",
    "RefundFailed",
    "RefundManual",
    "RefundTaskManual",
    "ReconBlocked",
    "ReconParseFailed",
    "ReconDownloadFailed",
    "ReconDiffOpened",
    "ReconRecoverFailed",
    "ReconFailed",
    "EventGenerationFailed",  # R20: a change with no event, or one not published after its retries (#35)
]


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


def of_type(resources: dict[str, Any], type_name: str) -> dict[str, Any]:
    return {lid: res for lid, res in resources.items() if res["Type"] == type_name}


# ------------------------------------------------------------------------------------ validators


def test_cfn_lint_finds_nothing():
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(TEMPLATE, ManualArgs(regions=["us-east-1", "cn-north-1"], include_checks=["I"]))
    assert [str(match) for match in matches] == []


@pytest.mark.parametrize("region", ["us-east-1", "cn-north-1"])
def test_strict_sam_transform(template, region):
    transformed = sam_transform(template, region)
    types = {res["Type"] for res in transformed["Resources"].values()}
    assert {"AWS::Lambda::Function", "AWS::ApiGatewayV2::Api", "AWS::Lambda::EventSourceMapping"} <= types
    assert not any(t.startswith("AWS::Serverless::") for t in types)
    if region.startswith("cn-"):
        assert "arn:aws:" not in json.dumps(transformed)


def test_sam_transform_is_strict(template):
    """The transform above rejects a SAM mistake: an open route without a default authorizer."""
    broken = copy.deepcopy(template)
    del broken["Resources"]["HttpApi"]["Properties"]["Auth"]["DefaultAuthorizer"]
    with pytest.raises(InvalidDocumentException):
        sam_transform(broken, "us-east-1")


# ------------------------------------------------------------------------------------ contracts


def test_tables_match_contracts(resources):
    tables = of_type(resources, "AWS::DynamoDB::Table")
    assert set(tables) == set(TABLES)
    for lid, (_, key, indexes) in TABLES.items():
        props = tables[lid]["Properties"]
        assert [k["AttributeName"] for k in props["KeySchema"]] == key, lid
        gsis = {g["IndexName"]: g for g in props.get("GlobalSecondaryIndexes", [])}
        assert {name: [k["AttributeName"] for k in g["KeySchema"]] for name, g in gsis.items()} == indexes, (
            lid
        )
        for name, gsi in gsis.items():
            expected = (
                "INCLUDE" if name in NARROW_PROJECTIONS else "KEYS_ONLY" if name in KEYS_ONLY else "ALL"
            )
            assert gsi["Projection"]["ProjectionType"] == expected, (lid, name)
        declared = {a["AttributeName"] for a in props["AttributeDefinitions"]}
        assert all(a["AttributeType"] == "S" for a in props["AttributeDefinitions"]), lid
        assert declared == set(key) | {k for ks in indexes.values() for k in ks}, lid
    ttl = tables["NotifyEventTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}


def test_every_table_has_pitr_on_demand_and_encryption(resources):
    for lid, table in of_type(resources, "AWS::DynamoDB::Table").items():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST", lid
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, lid
        assert props["SSESpecification"]["SSEEnabled"] is True, lid
        assert table["DeletionPolicy"] == "Retain", lid


def test_environment_matches_contracts(template):
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    for lid, (env_name, _, _) in TABLES.items():
        assert variables[env_name] == {"Ref": lid}
    assert variables["APPLY_QUEUE_URL"] == {"Ref": "ApplyQueue"}
    assert variables["BILLS_BUCKET"] == {"Ref": "BillsBucket"}
    assert variables["WECHATPAY_API_BASE"] == {"Ref": "WechatPayApiBase"}
    assert template["Parameters"]["WechatPayApiBase"]["Default"] == "https://api.mch.weixin.qq.com"
    assert variables["MERCHANT_SECRET_PREFIX"] == {"Fn::Sub": "tally/${AWS::StackName}/merchants/"}
    assert variables["POWERTOOLS_SERVICE_NAME"] == "tally"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Tally"


def test_functions_match_contracts(template, resources):
    functions = of_type(resources, "AWS::Serverless::Function")
    assert {"NotifyFunction", "WorkerFunction", "OrdersFunction"} <= set(functions)
    defaults = template["Globals"]["Function"]
    assert defaults["Runtime"] == "python3.12"
    assert defaults["Architectures"] == ["arm64"]
    assert defaults["Handler"] == "app.handler"
    assert defaults["Layers"] == [{"Ref": "CommonLayer"}]
    for lid, function in functions.items():
        code = function["Properties"]["CodeUri"]
        assert code == f"functions/{lid.removesuffix('Function').lower()}/"
        assert (ROOT / code).is_dir()
    layer = resources["CommonLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/common"
    assert (
        layer["Metadata"]["BuildMethod"] == "makefile"
    )  # layers/common/Makefile ships .pyc (tests/unit/test_build.py)


def http_events(function: dict[str, Any]) -> dict[str, Any]:
    events = function["Properties"]["Events"].values()
    return {
        f"{e['Properties']['Method']} {e['Properties']['Path']}": e["Properties"]
        for e in events
        if e["Type"] == "HttpApi"
    }


def test_notify_is_open_and_orders_need_iam(resources):
    api_auth = dict(resources["HttpApi"]["Properties"]["Auth"])
    assert set(api_auth.pop("Authorizers")) == {
        "ConsoleJwt"
    }  # the console's (tests/integration/test_console*.py)
    assert api_auth == {"EnableIamAuthorizer": True, "DefaultAuthorizer": "AWS_IAM"}
    notify = http_events(resources["NotifyFunction"])
    assert {k: v["Auth"]["Authorizer"] for k, v in notify.items()} == {
        "POST /notify/wechatpay/{mchid}": "NONE",
        "POST /notify/alipay/{app_id}": "NONE",
        "POST /notify/wechatpay-v2/{mchid}": "NONE",
        "POST /notify/{channel}/{merchant}": "NONE",  # a channel without its own route (registry)
    }
    orders = http_events(resources["OrdersFunction"])
    assert {k: v["Auth"]["Authorizer"] for k, v in orders.items()} == {
        "POST /orders": "AWS_IAM",
        "GET /orders/{mchid}/{out_trade_no}": "AWS_IAM",
    }
    refunds = http_events(resources["RefundsFunction"])
    assert {k: v["Auth"]["Authorizer"] for k, v in refunds.items()} == {
        "POST /refunds": "AWS_IAM",
        "GET /refunds/{refund_no}": "AWS_IAM",
    }


def test_worker_reports_batch_item_failures(resources):
    worker = resources["WorkerFunction"]["Properties"]
    (event,) = worker["Events"].values()
    assert event["Type"] == "SQS"
    assert event["Properties"]["Queue"] == {"Fn::GetAtt": ["ApplyQueue", "Arn"]}
    assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_apply_queue_redrives_to_dlq_and_outlasts_the_worker(resources):
    queue = resources["ApplyQueue"]["Properties"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["ApplyDLQ", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert queue["VisibilityTimeout"] == 6 * resources["WorkerFunction"]["Properties"]["Timeout"]


def test_bills_bucket_is_private_versioned_encrypted(resources):
    props = resources["BillsBucket"]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def alarms(resources: dict[str, Any]) -> list[dict[str, Any]]:
    return [res["Properties"] for res in of_type(resources, "AWS::CloudWatch::Alarm").values()]


def test_every_dlq_has_an_alarm(resources):
    dlqs = [lid for lid in of_type(resources, "AWS::SQS::Queue") if lid.endswith("DLQ")]
    assert "ApplyDLQ" in dlqs
    for lid in dlqs:
        (dlq,) = [
            a
            for a in alarms(resources)
            if a["Namespace"] == "AWS/SQS"
            and a["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [lid, "QueueName"]}}]
        ]
        consumed = [
            fid
            for fid, f in of_type(resources, "AWS::Serverless::Function").items()
            for e in f["Properties"].get("Events", {}).values()
            if e["Type"] == "SQS" and e["Properties"]["Queue"] == {"Fn::GetAtt": [lid, "Arn"]}
        ]
        if (
            consumed
        ):  # R20: the OutboxDLQ is worked at once (a case per parked record): alarm on a message stuck
            assert dlq["MetricName"] == "ApproximateAgeOfOldestMessage"
            assert (dlq["ComparisonOperator"], dlq["Threshold"]) == ("GreaterThanThreshold", 900)
        else:
            assert dlq["MetricName"] == "ApproximateNumberOfMessagesVisible"
            assert (dlq["ComparisonOperator"], dlq["Threshold"]) == ("GreaterThanThreshold", 0)
        assert dlq["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_R20_the_outboxs_oldest_pending_change_and_its_parked_records_are_alarmed(resources):
    """Issue #35 item 6: the outbox's oldest pending age (the stream's IteratorAge, ms) alarms past 5 minutes, and a
    stream batch given up on goes to a consumer that turns it into events and cases (EventGenerationFailed)."""
    (age,) = [a for a in alarms(resources) if a["MetricName"] == "IteratorAge"]
    assert age["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "OutboxFunction"}}]
    assert (age["Statistic"], age["ComparisonOperator"], age["Threshold"]) == (
        "Maximum",
        "GreaterThanThreshold",
        300000,
    )
    outbox = resources["OutboxFunction"]["Properties"]["Events"]
    for source in outbox.values():
        assert source["Properties"]["DestinationConfig"]["OnFailure"]["Destination"] == {
            "Fn::GetAtt": ["OutboxDLQ", "Arn"]
        }
    parked = resources["OutboxParkedFunction"]["Properties"]["Events"]["Parked"]["Properties"]
    assert parked["Queue"] == {"Fn::GetAtt": ["OutboxDLQ", "Arn"]}  # its metric: test_custom_metric_alarm


@pytest.mark.parametrize("metric", CUSTOM_METRIC_ALARMS)
def test_custom_metric_alarm(resources, metric):
    (alarm,) = [a for a in alarms(resources) if a["MetricName"] == metric]
    assert alarm["Namespace"] == "Tally"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "tally"}]
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Sum", 300, 1)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanOrEqualToThreshold", 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_alarm_email_is_required_and_always_subscribed(template, resources):
    """A plain `sam deploy` must not create alarms that notify nobody: no default, an e-mail pattern, and the
    subscription is unconditional. samconfig.toml's placeholder fails the pattern on purpose."""
    import tomllib

    subscription = resources["AlarmEmailSubscription"]
    assert "Condition" not in subscription
    assert subscription["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}
    param = template["Parameters"]["AlarmEmail"]
    assert "Default" not in param
    pattern = re.compile(param["AllowedPattern"])
    assert pattern.match("ops@example.com") and pattern.match("finance+tally@shop.example.cn")
    for bad in ("", "ops", "ops@", "@example.com", "ops@example", "a b@example.com", "SET-ME"):
        assert not pattern.match(bad), bad
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    overrides = config["default"]["deploy"]["parameters"]["parameter_overrides"]
    placeholder = re.search(r"AlarmEmail=(\S+)", overrides).group(1)
    assert not pattern.match(placeholder)


def test_stack_secrets_are_per_stack(template, resources):
    """`tally merchant add … --stack staging` must not overwrite prod's keys, nor may staging read them: the
    prefix, every grant and the stack output the CLI reads all carry the stack name."""
    from tally_cli.env import OUTPUT_ENV

    grants = [s for s in strings(resources) if ":secret:" in s]
    per_stack = (":secret:tally/${AWS::StackName}/merchants/", ":secret:tally/${AWS::StackName}/alerts/")
    assert grants and all(any(prefix in s for prefix in per_stack) for s in grants)
    assert template["Outputs"]["MerchantSecretPrefix"]["Value"] == {
        "Fn::Sub": "tally/${AWS::StackName}/merchants/"
    }
    assert OUTPUT_ENV["MerchantSecretPrefix"] == "MERCHANT_SECRET_PREFIX"


def test_outputs(template):
    expected = {"ApiUrl", "ApplyQueueUrl", "BillsBucketName"} | {f"{lid}Name" for lid in TABLES}
    assert expected <= set(template["Outputs"])


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in strings(key) + strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return []


def test_every_arn_uses_the_partition(template):
    """China regions are `arn:aws-cn:`: no ARN may hard-code `arn:aws:`."""
    arns = [s for s in strings(template) if "arn:" in s]
    assert arns, "expected some ARNs built with !Sub"
    assert [s for s in arns if not s.startswith("arn:${AWS::Partition}:")] == []
    assert not re.search(r"arn:aws[:-]", TEMPLATE.read_text())


def _statements(resources):
    """(owner, statement) of every function's SAM Policies and every explicit IAM role."""
    for lid, function in of_type(resources, "AWS::Serverless::Function").items():
        for policy in function["Properties"].get("Policies", []):
            for statement in policy["Statement"]:
                yield lid, statement
    for lid, role in of_type(resources, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield lid, statement


def test_least_privilege_has_no_wildcards(resources):
    found = list(_statements(resources))
    assert {"WorkerRole", "OutboxRole", "NotifyFunction"} <= {lid for lid, _ in found}
    for lid, statement in found:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert all("*" not in action for action in actions), lid
        resources_ = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        assert "*" not in resources_, lid


def test_event_source_functions_have_their_own_roles_without_managed_policies(resources):
    """SAM attaches AWSLambdaSQSQueueExecutionRole / AWSLambdaDynamoDBExecutionRole (every queue, every stream
    of the account) to a generated role with an SQS or DynamoDB event: those functions bring their own."""
    for lid, function in of_type(resources, "AWS::Serverless::Function").items():
        kinds = {e["Type"] for e in function["Properties"].get("Events", {}).values()}
        if kinds & {"SQS", "DynamoDB", "Kinesis"}:
            assert "Policies" not in function["Properties"], lid
            role = function["Properties"]["Role"]["Fn::GetAtt"][0]
            assert "ManagedPolicyArns" not in resources[role]["Properties"], lid


def test_every_function_logs_to_its_own_group_with_a_retention(template, resources):
    for lid, function in of_type(resources, "AWS::Serverless::Function").items():
        group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        props = resources[group]["Properties"]
        assert props["RetentionInDays"] == {"Ref": "LogRetentionDays"}, lid
    assert template["Parameters"]["LogRetentionDays"]["Default"] >= 180


def test_bills_bucket_expires_noncurrent_versions(resources):
    rules = resources["BillsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    (rule,) = [r for r in rules if "NoncurrentVersionExpiration" in r]
    assert rule["Status"] == "Enabled" and rule["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 30


def test_samconfig():
    import tomllib

    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    deploy = config["default"]["deploy"]["parameters"]
    assert config["version"] == 0.1
    assert deploy["stack_name"] == "tally"
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True
    assert deploy["confirm_changeset"] is True
    assert deploy["region"] and "AlarmEmail=" in deploy["parameter_overrides"]
    assert config["default"]["build"]["parameters"] == {"cached": True, "parallel": True}


def test_recon_runs_daily_at_1030_shanghai_and_on_bills_dropped_in_s3_R34(resources):
    """cron in UTC: 02:30 UTC is 10:30 Asia/Shanghai (UTC+8, no DST); hourly retries until 16:30."""
    events = resources["ReconFunction"]["Properties"]["Events"]
    assert events["Daily"]["Properties"]["Schedule"] == "cron(30 2-8 * * ? *)"
    pattern = events["BillDroppedByHand"]["Properties"]["Pattern"]
    assert pattern["source"] == ["aws.s3"] and pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["object"]["key"] == [{"prefix": "bills/"}]
    bucket = resources["BillsBucket"]["Properties"]
    assert bucket["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}


def test_money_path_deploys_by_canary_with_rollback_on_its_alarms(template):
    """Notify and worker shift 10 % for 5 minutes and roll back on their Errors, NotifyRejected and
    EnqueueFailed (notify) / ApplyFailed (worker) alarms; callbacks and SQS reach the alias, not $LATEST."""
    transformed = sam_transform(template, "us-east-1")["Resources"]
    groups = {
        lid: r["Properties"]
        for lid, r in transformed.items()
        if r["Type"] == "AWS::CodeDeploy::DeploymentGroup"
    }
    alarms = {
        lid: {a["Name"]["Ref"] for a in props["AlarmConfiguration"]["Alarms"]}
        for lid, props in groups.items()
    }
    assert alarms == {
        "NotifyFunctionDeploymentGroup": {"NotifyErrorsAlarm", "NotifyRejectedAlarm", "EnqueueFailedAlarm"},
        "WorkerFunctionDeploymentGroup": {"WorkerErrorsAlarm", "ApplyFailedAlarm"},
    }
    for props in groups.values():
        assert props["AutoRollbackConfiguration"]["Enabled"] is True
        assert "DEPLOYMENT_STOP_ON_ALARM" in props["AutoRollbackConfiguration"]["Events"]
    mapping = next(
        r["Properties"]
        for r in transformed.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": "WorkerFunctionAliaslive"}
    )
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["ApplyQueue", "Arn"]}
    notify_permissions = [
        r["Properties"]["FunctionName"]
        for r in transformed.values()
        if r["Type"] == "AWS::Lambda::Permission" and "Notify" in json.dumps(r["Properties"]["FunctionName"])
    ]
    assert notify_permissions and all(p == {"Ref": "NotifyFunctionAliaslive"} for p in notify_permissions)


# ------------------------------------------------------------------------------------ SnapStart


def _condition(template: dict[str, Any], node: Any, region: str) -> Any:
    """The value CloudFormation gives a condition in `region` (the intrinsics the Conditions section uses)."""
    partition = "aws-cn" if region.startswith("cn-") else "aws"
    if isinstance(node, dict) and len(node) == 1:
        (name, args), *_ = node.items()
        if name == "Condition":
            return _condition(template, template["Conditions"][args], region)
        if name == "Ref":
            return {"AWS::Region": region, "AWS::Partition": partition}[args]
        if name == "Fn::Not":
            return not _condition(template, args[0], region)
        if name == "Fn::Or":
            return any(_condition(template, a, region) for a in args)
        if name == "Fn::And":
            return all(_condition(template, a, region) for a in args)
        if name == "Fn::Equals":
            return _condition(template, args[0], region) == _condition(template, args[1], region)
    return node


@pytest.mark.parametrize(
    ("region", "offered"),
    [
        ("us-east-1", True),
        ("eu-west-1", True),
        ("ap-southeast-1", True),
        ("cn-north-1", False),
        ("cn-northwest-1", False),
    ],
)
def test_snapstart_is_conditioned_on_the_partition(template, region, offered):
    """Lambda offers SnapStart for Python outside the China partition (and not in the regions its guide names):
    HasSnapStart is what each function's SnapStart hangs on. cfn-lint's E2530 does not follow the condition
    (template.yaml's Metadata), so the condition is evaluated here for a standard and a China region."""
    assert _condition(template, template["Conditions"]["IsChinaPartition"], region) is (not offered)
    assert _condition(template, template["Conditions"]["HasSnapStart"], region) is offered


def test_every_function_resumes_from_a_snapshot_of_its_published_version(template, resources):
    """SnapStart on every function, through the partition condition, on the version AutoPublishAlias publishes
    (SnapStart snapshots published versions only). SnapStart refuses provisioned concurrency, EFS and ephemeral
    storage over 512 MB: recon keeps 10 GB of /tmp for the big bills (docs/recon.md), so it starts as before."""
    runtime = template["Globals"]["Function"]["Runtime"]
    assert runtime == "python3.12"  # SnapStart's Python runtimes: 3.12 and later
    snapstart = {"Fn::If": ["HasSnapStart", {"ApplyOn": "PublishedVersions"}, {"Ref": "AWS::NoValue"}]}
    functions = of_type(resources, "AWS::Serverless::Function")
    for lid, function in functions.items():
        props = function["Properties"]
        assert "ProvisionedConcurrencyConfig" not in props and "FileSystemConfigs" not in props, lid
        if lid == "ReconFunction":
            assert "SnapStart" not in props and props["EphemeralStorage"]["Size"] > 512
            continue
        assert props.get("SnapStart") == snapstart, lid
        assert props.get("AutoPublishAlias") == "live", lid
        assert props.get("EphemeralStorage", {"Size": 512})["Size"] <= 512, lid
    transformed = sam_transform(template, "us-east-1")["Resources"]
    for lid in set(functions) - {"ReconFunction"}:
        assert transformed[lid]["Properties"]["SnapStart"] == snapstart
        alias = transformed[f"{lid}Aliaslive"]
        assert alias["Type"] == "AWS::Lambda::Alias" and alias["Properties"]["FunctionName"] == {"Ref": lid}
        versions = [
            r
            for r in transformed.values()
            if r["Type"] == "AWS::Lambda::Version" and r["Properties"]["FunctionName"] == {"Ref": lid}
        ]
        assert len(versions) == 1, lid
    qualified = json.dumps(
        [
            r["Properties"]["FunctionName"]
            for r in transformed.values()
            if r["Type"] in ("AWS::Lambda::EventSourceMapping", "AWS::Lambda::Permission")
        ]
    )
    for lid in set(functions) - {"ReconFunction"}:
        assert f'{{"Ref": "{lid}"}}' not in qualified, (
            f"{lid}: an event invokes $LATEST, not the snapshotted alias"
        )
