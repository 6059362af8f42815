"""template.yaml, made local.

Everything the embedded stack runs is read from the one template that is deployed, so there is no
second definition to drift:

- `load_template` reads it with the CloudFormation short tags (`!Ref`, `!GetAtt`, `!Sub` ...).
- `create_from_template` creates its DynamoDB tables, SQS queues and S3 buckets against a boto3
  session (pointed at moto) and returns `Globals.Function.Environment.Variables` resolved to plain
  strings: the environment every function gets, as on AWS.
- `function_specs` / `load_handler` / `LambdaContext` describe and load the functions themselves.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from botocore.exceptions import ClientError

log = logging.getLogger(__name__)

LOCAL_ACCOUNT_ID = "123456789012"  # moto's default account
_NO_VALUE = object()  # AWS::NoValue: the key it sits under disappears


class UnresolvedReference(LookupError):
    """The template refers to something the embedded stack does not create."""


# ---------------------------------------------------------------------------------------------
# Loading the template


class _CfnLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A YAML loader that turns CloudFormation short tags into their long JSON form. libyaml's parser (PyYAML's
    wheels ship it) when there: the same documents, ~10x less CPU than the pure-Python one (template.yaml:
    ~13 ms instead of ~125 ms, and the tests load it ~50 times per run)."""


def _construct_intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "Condition":
        return {"Condition": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_intrinsic)


def load_template(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - a SafeLoader subclass


# ---------------------------------------------------------------------------------------------
# Resolving intrinsic functions


@dataclass
class Resolver:
    """Resolves Ref / GetAtt / Sub / Join / Select / If against the resources created locally."""

    parameters: dict[str, str]
    conditions: Mapping[str, Any] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = (self.resolve(item) for item in value)
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key.startswith("Fn::"):
                return self._function(key[4:], arg)
        resolved = {key: self.resolve(item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not _NO_VALUE}

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        for table in (self.parameters, self.refs):
            if name in table:
                return table[name]
        raise UnresolvedReference(f"!Ref {name}: not a parameter or a resource created locally")

    def get_att(self, name: str, attribute: str) -> str:
        try:
            return self.attrs[(name, attribute)]
        except KeyError:
            raise UnresolvedReference(f"!GetAtt {name}.{attribute}: not created locally") from None

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.conditions[name]))

    def _function(self, name: str, arg: Any) -> Any:
        handlers: dict[str, Callable[[Any], Any]] = {
            "GetAtt": lambda a: self.get_att(*self.resolve(a)),
            "Sub": self._sub,
            "Join": lambda a: self.resolve(a[0]).join(str(x) for x in self.resolve(a[1])),
            "Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Split": lambda a: self.resolve(a[1]).split(self.resolve(a[0])),
            "If": lambda a: self.resolve(a[1] if self.condition(a[0]) else a[2]),
            "Equals": lambda a: self.resolve(a[0]) == self.resolve(a[1]),
            "Not": lambda a: not self.resolve(a[0]),
            "And": lambda a: all(self.resolve(x) for x in a),
            "Or": lambda a: any(self.resolve(x) for x in a),
        }
        if name not in handlers:
            raise UnresolvedReference(f"Fn::{name} is not supported by the embedded stack")
        return handlers[name](arg)

    def _sub(self, arg: str | list[Any]) -> str:
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in local:
                return str(local[name])
            if "." in name and not name.startswith("AWS::"):
                return self.get_att(*name.split(".", 1))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", replace, text)


def pseudo_parameters(region: str, stack_name: str) -> dict[str, str]:
    return {
        "AWS::Region": region,
        "AWS::AccountId": LOCAL_ACCOUNT_ID,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": stack_name,
        "AWS::StackId": f"arn:aws:cloudformation:{region}:{LOCAL_ACCOUNT_ID}:stack/{stack_name}/local",
    }


# ---------------------------------------------------------------------------------------------
# Creating the resources


def create_from_template(
    template_path: str | Path,
    session: Any,
    prefix: str = "tally-local",
    parameter_overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Create the template's tables, queues and buckets; return the functions' environment. The console's
    Cognito pool is left out (its ids are empty): it costs moto an RSA key import per pool, and only the
    embedded stack signs people in (create_with_resolver(console=True))."""
    return create_with_resolver(template_path, session, prefix, parameter_overrides, console=False)[0]


def create_with_resolver(
    template_path: str | Path,
    session: Any,
    prefix: str = "tally-local",
    parameter_overrides: Mapping[str, str] | None = None,
    *,
    console: bool = True,
) -> tuple[dict[str, str], Resolver]:
    """create_from_template, and the Resolver that knows what was created (for the HttpApi authorizers)."""
    template = load_template(template_path)
    session = _OneClientEach(session)
    resolver = _resolver_for(template, session.region_name, prefix, parameter_overrides or {})
    resources = template.get("Resources", {})
    for logical_id in _creation_order(resources):
        resource = resources[logical_id]
        creator = _CREATORS.get(resource["Type"])
        if not console and resource["Type"].startswith("AWS::Cognito::"):
            resolver.refs[logical_id] = ""  # not created: CONSOLE_USER_POOL_ID / CONSOLE_CLIENT_ID are empty
            continue
        if creator is not None:
            props = resolver.resolve(resource.get("Properties", {}))
            creator(session, resolver, logical_id, props, prefix)
    variables = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    return {name: str(value) for name, value in resolver.resolve(variables).items()}, resolver


class _OneClientEach:
    """The session the creators see: one client per service for the whole template, where each resource built
    its own (~30 resources; a client costs ~2-10 ms of CPU to build, more than most of the calls it makes)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.region_name = session.region_name
        self.clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = self.session.client(service)
        return self.clients[service]


def _resolver_for(
    template: dict[str, Any], region: str, prefix: str, overrides: Mapping[str, str]
) -> Resolver:
    defaults = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise UnresolvedReference(f"parameter overrides for undeclared parameters: {sorted(unknown)}")
    parameters = pseudo_parameters(region, prefix) | defaults | dict(overrides)
    return Resolver(parameters=parameters, conditions=template.get("Conditions", {}))


def _creation_order(resources: Mapping[str, Any]) -> list[str]:
    """Creatable resources, each after the ones it refers to (a DLQ before its source queue)."""
    creatable = [lid for lid, res in resources.items() if res.get("Type") in _CREATORS]
    ordered: list[str] = []
    pending = list(creatable)
    while pending:
        waiting = set(pending)
        ready = [
            lid for lid in pending if not _references(resources[lid].get("Properties", {}), waiting - {lid})
        ]
        if not ready:
            raise UnresolvedReference(f"circular references between {sorted(pending)}")
        ordered.extend(ready)
        pending = [lid for lid in pending if lid not in ready]
    return ordered


def _references(node: Any, candidates: set[str]) -> set[str]:
    """The candidates that `node` refers to through Ref, GetAtt or Sub."""
    found: set[str] = set()
    if isinstance(node, list):
        for item in node:
            found |= _references(item, candidates)
    elif isinstance(node, dict):
        for key, arg in node.items():
            if key == "Ref":
                found.add(arg)
            elif key == "Fn::GetAtt":
                found.add(arg[0] if isinstance(arg, list) else arg.split(".", 1)[0])
            elif key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                found |= {name.split(".", 1)[0] for name in re.findall(r"\$\{([^!}][^}]*)\}", text)}
            found |= _references(arg, candidates)
    return found & candidates


def _create_table(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = session.client("dynamodb")
    name = f"{prefix}-{logical_id}"
    try:
        client.create_table(**_table_request(name, props))
    except client.exceptions.ResourceInUseException:
        log.info("table %s already exists", name)
    description = client.describe_table(TableName=name)["Table"]
    _configure_table(client, name, props)
    resolver.refs[logical_id] = name
    resolver.attrs[(logical_id, "Arn")] = description["TableArn"]
    if "LatestStreamArn" in description:
        resolver.attrs[(logical_id, "StreamArn")] = description["LatestStreamArn"]


def _table_request(name: str, props: dict[str, Any]) -> dict[str, Any]:
    billing = props.get("BillingMode", "PROVISIONED")
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": billing,
    }
    throughput = props.get("ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5})
    if billing == "PROVISIONED":
        request["ProvisionedThroughput"] = throughput
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if props.get(kind):
            request[kind] = [_index_request(index, billing, kind) for index in props[kind]]
    if "StreamSpecification" in props:
        request["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    if "SSESpecification" in props:
        sse = props["SSESpecification"]
        request["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled"))} | {
            key: sse[key] for key in ("SSEType", "KMSMasterKeyId") if key in sse
        }
    return request


def _index_request(index: dict[str, Any], billing: str, kind: str) -> dict[str, Any]:
    request = {key: index[key] for key in ("IndexName", "KeySchema", "Projection")}
    if billing == "PROVISIONED" and kind == "GlobalSecondaryIndexes":
        request["ProvisionedThroughput"] = index.get(
            "ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
        )
    return request


def _configure_table(client: Any, name: str, props: dict[str, Any]) -> None:
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True}
        )
    pitr = props.get("PointInTimeRecoverySpecification", {})
    if pitr.get("PointInTimeRecoveryEnabled"):
        try:
            client.update_continuous_backups(
                TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
            )
        except ClientError as error:  # best effort: PITR changes nothing the code can observe
            log.warning("could not enable PITR on %s locally: %s", name, error)


_QUEUE_JSON_ATTRIBUTES = ("RedrivePolicy", "RedriveAllowPolicy")


def _create_queue(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = session.client("sqs")
    fifo = bool(props.get("FifoQueue"))
    name = f"{prefix}-{logical_id}" + (".fifo" if fifo else "")
    attributes = {}
    for key, value in props.items():
        if key in ("QueueName", "Tags"):
            continue
        if key in _QUEUE_JSON_ATTRIBUTES:
            attributes[key] = json.dumps(value)
        else:
            attributes[key] = str(value).lower() if isinstance(value, bool) else str(value)
    url = client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    resolver.refs[logical_id] = url
    resolver.attrs.update(
        {(logical_id, "Arn"): arn, (logical_id, "QueueUrl"): url, (logical_id, "QueueName"): name}
    )


def _create_bucket(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = session.client("s3")
    name = f"{prefix}-{logical_id}".lower()
    request: dict[str, Any] = {"Bucket": name}
    if session.region_name != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": session.region_name}
    if str(props.get("ObjectLockEnabled", "")).lower() == "true":
        request["ObjectLockEnabledForBucket"] = True  # only at creation (docs/audit.md)
    try:
        client.create_bucket(**request)
    except client.exceptions.BucketAlreadyOwnedByYou:
        log.info("bucket %s already exists", name)
    _configure_bucket(client, name, props)
    resolver.refs[logical_id] = name
    resolver.attrs.update(
        {
            (logical_id, "Arn"): f"arn:aws:s3:::{name}",
            (logical_id, "DomainName"): f"{name}.s3.amazonaws.com",
            (logical_id, "RegionalDomainName"): f"{name}.s3.{session.region_name}.amazonaws.com",
        }
    )


def _configure_bucket(client: Any, name: str, props: dict[str, Any]) -> None:
    if "VersioningConfiguration" in props:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration=props["VersioningConfiguration"])
    if "PublicAccessBlockConfiguration" in props:
        client.put_public_access_block(
            Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
        )
    if "BucketEncryption" in props:
        rules = [
            _encryption_rule(rule) for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        ]
        client.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    lock = props.get("ObjectLockConfiguration")
    if lock:
        retention = dict(lock.get("Rule", {}).get("DefaultRetention", {}))
        for unit in ("Days", "Years"):
            if unit in retention:
                retention[unit] = int(retention[unit])
        client.put_object_lock_configuration(
            Bucket=name,
            ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": retention}},
        )


def _encryption_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's `ServerSideEncryptionByDefault` is the API's `ApplyServerSideEncryptionByDefault`."""
    converted = {key: value for key, value in rule.items() if key != "ServerSideEncryptionByDefault"}
    if "ServerSideEncryptionByDefault" in rule:
        converted["ApplyServerSideEncryptionByDefault"] = rule["ServerSideEncryptionByDefault"]
    return converted


def _create_event_bus(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = session.client("events")
    name = f"{prefix}-{logical_id}"
    try:
        arn = client.create_event_bus(Name=name)["EventBusArn"]
    except client.exceptions.ResourceAlreadyExistsException:
        arn = client.describe_event_bus(Name=name)["Arn"]
    resolver.refs[logical_id] = name
    resolver.attrs[(logical_id, "Arn")] = arn
    resolver.attrs[(logical_id, "Name")] = name


def _create_archive(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = session.client("events")
    name = f"{prefix}-{logical_id}"
    request = {"ArchiveName": name, "EventSourceArn": props["SourceArn"]}
    if "EventPattern" in props:
        request["EventPattern"] = json.dumps(props["EventPattern"])
    if "RetentionDays" in props:
        request["RetentionDays"] = int(props["RetentionDays"])
    try:
        arn = client.create_archive(**request)["ArchiveArn"]
    except client.exceptions.ResourceAlreadyExistsException:
        arn = client.describe_archive(ArchiveName=name)["ArchiveArn"]
    resolver.refs[logical_id] = name
    resolver.attrs[(logical_id, "Arn")] = arn


def _create_user_pool(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    """The console's Cognito pool on moto, which issues real RS256 JWTs and serves the pool's JWKS."""
    client = _cognito(session)
    request: dict[str, Any] = {"PoolName": f"{prefix}-{logical_id}"}
    for key in ("Policies", "AdminCreateUserConfig", "AccountRecoverySetting", "UsernameConfiguration"):
        if key in props:
            request[key] = _cognito_shape(props[key])
    pools = client.list_user_pools(MaxResults=60)["UserPools"]
    found = next((p for p in pools if p["Name"] == request["PoolName"]), None)
    if found is not None:  # created already (a second create_from_template): the same pool, as for tables
        pool = client.describe_user_pool(UserPoolId=found["Id"])["UserPool"]
    else:
        pool = client.create_user_pool(**request)["UserPool"]
    if props.get("MfaConfiguration", "OFF") != "OFF":  # TOTP for the console's sign-in (docs/alerts.md)
        client.set_user_pool_mfa_config(
            UserPoolId=pool["Id"],
            MfaConfiguration=props["MfaConfiguration"],
            SoftwareTokenMfaConfiguration={"Enabled": "SOFTWARE_TOKEN_MFA" in props.get("EnabledMfas", [])},
        )
    resolver.refs[logical_id] = pool["Id"]
    resolver.attrs.update(
        {
            (logical_id, "Arn"): pool["Arn"],
            (logical_id, "ProviderName"): f"cognito-idp.{session.region_name}.amazonaws.com/{pool['Id']}",
            (
                logical_id,
                "ProviderURL",
            ): f"https://cognito-idp.{session.region_name}.amazonaws.com/{pool['Id']}",
        }
    )


def _cognito(session: Any) -> Any:
    return session.client("cognito-idp")  # one per template (_OneClientEach)


def _cognito_shape(value: Any) -> Any:
    """CloudFormation writes TemporaryPasswordValidityDays etc. like the API does; booleans stay booleans."""
    if isinstance(value, dict):
        return {key: _cognito_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_cognito_shape(item) for item in value]
    return value


def _create_user_pool_client(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = _cognito(session)
    request = {
        key: props[key]
        for key in (
            "UserPoolId",
            "ClientName",
            "GenerateSecret",
            "ExplicitAuthFlows",
            "PreventUserExistenceErrors",
        )
        if key in props
    }
    existing = client.list_user_pool_clients(UserPoolId=props["UserPoolId"], MaxResults=60)["UserPoolClients"]
    found = next((c for c in existing if c["ClientName"] == props.get("ClientName")), None)
    if found is not None:
        resolver.refs[logical_id] = found["ClientId"]
        return
    created = client.create_user_pool_client(**request)["UserPoolClient"]
    resolver.refs[logical_id] = created["ClientId"]


def _create_user_pool_group(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    client = _cognito(session)
    request = {
        key: props[key] for key in ("GroupName", "UserPoolId", "Description", "Precedence") if key in props
    }
    try:
        client.create_group(**request)
    except client.exceptions.GroupExistsException:
        log.info("group %s already exists", props["GroupName"])
    resolver.refs[logical_id] = props["GroupName"]


def _create_key(
    session: Any, resolver: Resolver, logical_id: str, props: dict[str, Any], prefix: str
) -> None:
    """A KMS key (the seal's signing key, docs/audit.md): its spec and usage; the key policy is IAM's business."""
    client = session.client("kms")
    alias = (
        f"alias/{prefix}-{logical_id}"  # creating the stack again finds the same key (seals stay verifiable)
    )
    try:
        key = client.describe_key(KeyId=alias)["KeyMetadata"]
    except client.exceptions.NotFoundException:
        request = {k: props[k] for k in ("KeySpec", "KeyUsage", "Description") if k in props}
        key = client.create_key(**request)["KeyMetadata"]
        client.create_alias(AliasName=alias, TargetKeyId=key["KeyId"])
    resolver.refs[logical_id] = key["KeyId"]
    resolver.attrs[(logical_id, "Arn")] = key["Arn"]
    resolver.attrs[(logical_id, "KeyId")] = key["KeyId"]


_CREATORS: dict[str, Callable[..., None]] = {
    "AWS::KMS::Key": _create_key,
    "AWS::DynamoDB::Table": _create_table,
    "AWS::SQS::Queue": _create_queue,
    "AWS::S3::Bucket": _create_bucket,
    "AWS::Events::EventBus": _create_event_bus,
    "AWS::Events::Archive": _create_archive,
    "AWS::Cognito::UserPool": _create_user_pool,
    "AWS::Cognito::UserPoolClient": _create_user_pool_client,
    "AWS::Cognito::UserPoolGroup": _create_user_pool_group,
}


# ---------------------------------------------------------------------------------------------
# Functions


@dataclass(frozen=True)
class FunctionSpec:
    """One AWS::Serverless::Function, with Globals applied."""

    logical_id: str
    code_dir: Path
    handler: str
    timeout_s: int
    memory_mb: int
    http_routes: tuple[str, ...]  # route keys, e.g. "GET /orders/{mchid}/{out_trade_no}"
    sqs_queues: tuple[str, ...]  # logical ids of the queues it consumes
    stream_tables: tuple[str, ...] = ()  # logical ids of the tables whose DynamoDB stream it consumes
    # per stream table: (table id, MaximumRetryAttempts or -1, the OnFailure destination queue's id or "")
    stream_on_failure: tuple[tuple[str, int, str], ...] = ()

    @property
    def module_name(self) -> str:
        return "tally_fn_" + re.sub(r"\W", "_", self.code_dir.name)


def function_specs(template: Mapping[str, Any], root: str | Path) -> dict[str, FunctionSpec]:
    defaults = template.get("Globals", {}).get("Function", {})
    specs = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = defaults | resource.get("Properties", {})
        events = props.get("Events", {}).values()
        specs[logical_id] = FunctionSpec(
            logical_id=logical_id,
            code_dir=Path(root) / props["CodeUri"],
            handler=props["Handler"],
            timeout_s=int(props.get("Timeout", 3)),
            memory_mb=int(props.get("MemorySize", 128)),
            http_routes=tuple(_route_key(e.get("Properties")) for e in events if e["Type"] == "HttpApi"),
            sqs_queues=tuple(_queue_id(e["Properties"]["Queue"]) for e in events if e["Type"] == "SQS"),
            stream_tables=tuple(
                _queue_id(e["Properties"]["Stream"]) for e in events if e["Type"] == "DynamoDB"
            ),
            stream_on_failure=tuple(_on_failure(e["Properties"]) for e in events if e["Type"] == "DynamoDB"),
        )
    return specs


def _on_failure(props: Mapping[str, Any]) -> tuple[str, int, str]:
    destination = props.get("DestinationConfig", {}).get("OnFailure", {})
    queue = _queue_id(destination["Destination"]) if destination.get("Type") == "SQS" else ""
    return _queue_id(props["Stream"]), int(props.get("MaximumRetryAttempts", -1)), queue


def _route_key(props: Mapping[str, Any] | None) -> str:
    props = props or {}
    if "Path" not in props and "Method" not in props:
        return "$default"
    method = str(props.get("Method", "ANY")).upper()
    method = "ANY" if method == "X-AMAZON-APIGATEWAY-ANY-METHOD" else method
    return f"{method} {props.get('Path', '$default')}"


def _queue_id(queue: Any) -> str:
    if isinstance(queue, dict) and "Fn::GetAtt" in queue:
        return queue["Fn::GetAtt"][0]
    if isinstance(queue, dict) and "Ref" in queue:
        return queue["Ref"]
    raise UnresolvedReference(f"SQS event queue {queue!r}: expected !GetAtt <Queue>.Arn")


def load_handler(spec: FunctionSpec) -> Callable[[dict[str, Any], Any], Any]:
    """Import the handler's module afresh (a cold start) under a name unique to the function."""
    module_path, function_name = spec.handler.rsplit(".", 1)
    source = spec.code_dir / (module_path.replace(".", "/") + ".py")
    module_spec = importlib.util.spec_from_file_location(spec.module_name, source)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{spec.logical_id}: cannot load {source}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function_name)


class LambdaContext:
    """What the Lambda runtime passes as `context` (the attributes Powertools and handlers read)."""

    def __init__(
        self, function_name: str, timeout_s: int = 3, memory_mb: int = 128, region: str = "us-east-1"
    ):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{LOCAL_ACCOUNT_ID}:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = time.strftime("%Y/%m/%d") + "/[$LATEST]" + uuid.uuid4().hex
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
