"""Shared fixtures: AWS on in-process moto (tables/queues from template.yaml), the channel simulator,
and a harness that drives the real handlers."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import sys
import threading
import time
import uuid
from typing import Any

import boto3
import hypothesis
import pytest
from moto import mock_aws

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tally import bootstrap  # noqa: E402
from tally.domain.callers import EVERY_MERCHANT  # noqa: E402
from tally.observability import metrics  # noqa: E402

from tally_local.lambda_io import emf_metrics, emf_series, http_event  # noqa: E402
from tally_local.resources import (  # noqa: E402
    LambdaContext,
    create_from_template,
    function_specs,
    load_handler,
    load_template,
)
from tally_local.sigv4 import LOCAL_BACKEND_ARN  # noqa: E402
from tally_local.simulator import ChannelSimulator, _crypto  # noqa: E402

# Property tests assert behaviour, not speed (speed lives in `make bench`): no per-example deadline, which a
# loaded 2-core machine trips at random.
hypothesis.settings.register_profile("tally", deadline=None)
hypothesis.settings.load_profile("tally")


def pytest_collection_finish(session):
    """The garbage collector walks what outlives every test once: what the test modules imported at collection
    and, after each test, what the worker keeps (`_freeze_what_outlives_the_test`)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    _freeze_what_outlives_the_test()


def _freeze_what_outlives_the_test() -> None:
    """What is still alive after a test's teardown lives for the worker's run (modules, service models, moto's
    backends, session fixtures, caches) and is frozen out of the collector (`gc.freeze`): its full collections
    otherwise walked those ~600,000 objects again and again, ~8 s of CPU per worker. The test's garbage is
    collected first (only the objects made since the last freeze are walked), so nothing a test dropped is kept;
    a frozen object is still freed when its last reference goes."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def sim():
    simulator = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    yield simulator
    simulator.stop()


class KeyPool:
    """RSA-2048 keys made once per worker and handed out again in every test: the k-th key a test asks the
    simulator for (`_crypto.new_rsa_key`: an Alipay merchant's app key, a key the test makes itself) is the k-th of
    the pool (the channel's own keys are always new: `_kept_by_the_channel`), so the keys of one test are all different, as generated ones
    are. Generating one costs ~60 ms of CPU, and hundreds of tests register an Alipay merchant."""

    def __init__(self, generate):
        self.generate = generate
        self.keys: list[Any] = []
        self.used = 0
        self.lock = threading.Lock()

    def __call__(self):
        if _kept_by_the_channel(sys._getframe(1)):
            return self.generate()
        with self.lock:
            if self.used == len(self.keys):
                self.keys.append(self.generate())
            self.used += 1
            return self.keys[self.used - 1]


def _kept_by_the_channel(caller) -> bool:
    """A key the simulated channel keeps for itself (its signing certificates, roots, public-key-mode key,
    rotations): it outlives the test in the session's simulator, so it must never be a pooled key a later test
    is handed as its own (an Alipay app key equal to the session simulator's key verifies what it must refuse).
    Merchant keys the simulator makes for a test (`register_test_merchant`) and keys a test makes itself are
    pooled."""
    module = caller.f_globals.get("__name__", "")
    return module.startswith("tally_local.simulator") and caller.f_code.co_name != "register_test_merchant"


_KEY_POOL = KeyPool(_crypto.new_rsa_key)


@pytest.fixture(autouse=True)
def rsa_keys(monkeypatch):
    """Per test: the simulator's new keys come from the worker's pool, from its first key on. The session's
    simulator (`sim`, set up before any test's fixtures) made its own keys, so none of them is in the pool."""
    _KEY_POOL.used = 0
    monkeypatch.setattr(_crypto, "new_rsa_key", _KEY_POOL)
    return _KEY_POOL


@pytest.fixture(autouse=True)
def cli_language(monkeypatch):
    """The CLI's lines in English whatever the machine's locale (a developer's LANG=zh_CN.UTF-8 would turn them
    Chinese, tally_cli/speak.py); tests/integration/test_cli_language.py sets the language it proves."""
    monkeypatch.setenv("TALLY_LANG", "en")


@pytest.fixture(scope="session")
def handlers():
    specs = function_specs(load_template(ROOT / "template.yaml"), ROOT)
    return {lid: (load_handler(spec), spec) for lid, spec in specs.items()}


AWS_TEST_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    "POWERTOOLS_SERVICE_NAME": "tally",
}


class MotoAccount:
    """In-process moto (`mock_aws`) with every table, queue, bucket and bus of template.yaml, created once
    per test worker; each test gets them back empty. Creating them cost ~1.3 s of CPU per test (parsing
    the template, 16 boto3 clients, 30 create calls); emptying them clears moto's tables directly
    (`_empty_tables`) and goes through the API only for what else a test left.

    Between tests the mock is stopped with its data kept (`stop(remove_data=False)`), so tests that bring
    their own moto see no patching. moto's data is process-wide: a test that resets it (its own
    `mock_aws()`, an EmbeddedStack) takes the resources with it, and the next `aws` test finds them missing
    and creates them again; a moto server in this process writing to them is undone by emptying again on
    start."""

    def __init__(self, sim):
        # the default boto3 session is kept across tests (moto would reset it on every start): its loaded
        # service models make a client ~10x cheaper to build, and every test builds several
        self.mock = mock_aws(config={"core": {"reset_boto3_session": False}})
        self.mock._enable_patching = self._enable_patching  # type: ignore[method-assign]
        self.overrides = {
            "WechatPayApiBase": sim.url,
            "AlipayGateway": sim.url + "/gateway.do",
            "WebhookPrivateAddresses": "allow",  # the tests' receivers are on 127.0.0.1
        }
        self.env: dict[str, str] | None = None
        self.session = boto3.Session(region_name="us-east-1")
        self.clients: dict[str, Any] = {}
        self.created = 0  # how often the resources were (re)created in this worker

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = self.session.client(service)
        return self.clients[service]

    def start(self) -> dict[str, str]:
        from tally_local import moto_fixes

        # each DynamoDB request atomic, as on AWS (moto_fixes 1, 2): the store writes from thread pools
        # (FEE entries: store/recon.py put_fees). Idempotent; an e2e test in this process installs it anyway.
        moto_fixes.install()
        self.mock.start(reset=False)
        if self.env is None or not self._intact():
            self._create()
        else:  # empty already (stop() emptied it), unless a moto server in this process wrote to it since
            self.empty()
        assert self.env is not None
        return self.env

    def stop(self) -> None:
        try:
            self.empty()
        finally:
            self.mock.stop(remove_data=False)

    def _enable_patching(self, reset: bool = True) -> None:
        """moto's `MockAWS._enable_patching` (moto==5.2.1) without its growth: every start added moto's 1,253
        URL patterns to the `responses` registry (its requests mock) again, though stop() never removes them,
        ~4.8 ms of CPU a test and ~590,000 objects by a worker's last test. They are added when the registry
        is empty (the first start, or after anything reset moto: a test's own mock_aws(), an EmbeddedStack);
        otherwise only the patching is switched on, as moto does."""
        from moto.core.models import botocore_stubber, responses_mock

        if reset or not responses_mock.registered():
            type(self.mock)._enable_patching(self.mock, reset=reset)
        else:
            botocore_stubber.enabled = True
            responses_mock.start()

    def _create(self) -> None:
        """Everything moto holds dropped, then exactly the template's resources: the baseline."""
        from moto.core.base_backend import BackendDict

        BackendDict.reset()  # moto's data only; its patching stays as it is
        self.env = create_from_template(
            ROOT / "template.yaml", self.session, parameter_overrides=self.overrides
        )
        ddb = self.client("dynamodb")
        self.tables = {
            name: [k["AttributeName"] for k in ddb.describe_table(TableName=name)["Table"]["KeySchema"]]
            for name in ddb.list_tables()["TableNames"]
        }
        self.queues = set(self.client("sqs").list_queues().get("QueueUrls", []))
        self.buckets = {b["Name"] for b in self.client("s3").list_buckets()["Buckets"]}
        self.buses = {b["Name"] for b in self.client("events").list_event_buses()["EventBuses"]}
        self.baseline = self._leftovers()
        self.created += 1

    def _intact(self) -> bool:
        """The template's tables, queues and buckets still there (moto's backends read directly, as in
        _leftovers: three list calls through the API cost ~10 ms of CPU per test)."""
        queues, buckets = self._leftovers()[:2]
        return (
            set(self._ddb_tables()) == set(self.tables)
            and {url.rsplit("/", 1)[1] for url in self.queues} <= set(queues)
            and self.buckets <= set(buckets)
            and self._audit_key_intact()
        )

    def _audit_key_intact(self) -> bool:
        """The seal's signing key (docs/audit.md) still in moto's KMS: a moto reset elsewhere drops it."""
        from moto.core import DEFAULT_ACCOUNT_ID

        key = (self.env or {}).get("AUDIT_KEY_ID")
        kms = sys.modules.get("moto.kms.models")
        if not key or kms is None:
            return kms is not None or not key
        return key in kms.kms_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].keys

    @staticmethod
    def _leftovers() -> tuple[Any, ...]:
        """What a test can leave outside DynamoDB, read from moto's backends without an API call (internals
        of moto==5.2.1, as in _ddb_tables): queues and their messages (visible, in flight and delayed), buckets
        and their object versions, secrets, stacks, buses and their rules. Equal to the baseline taken right
        after creating the resources, the account holds nothing to empty there; otherwise empty() goes
        through the API as before. Each API call costs ~4 ms of CPU and emptying an untouched account made
        ~25 of them per test (start and stop), more than many tests cost themselves."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.events.models import events_backends
        from moto.s3.models import s3_backends
        from moto.sqs.models import sqs_backends

        region = "us-east-1"
        queues = {
            name: len(q._messages) for name, q in sqs_backends[DEFAULT_ACCOUNT_ID][region].queues.items()
        }
        buckets = {
            name: sum(len(bucket.keys.getlist(key)) for key in bucket.keys)
            for name, bucket in s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets.items()
        }
        buses = {
            name: sorted(bus.rules)
            for name, bus in events_backends[DEFAULT_ACCOUNT_ID][region].event_buses.items()
        }
        # moto loads a service's models on its first request: not loaded, nothing of it exists (importing
        # moto.cloudformation.models loads every service moto has, seconds of CPU per worker)
        secrets = stacks = 0
        if "moto.secretsmanager.models" in sys.modules:
            secrets = len(
                sys.modules["moto.secretsmanager.models"]
                .secretsmanager_backends[DEFAULT_ACCOUNT_ID][region]
                .secrets
            )
        if "moto.cloudformation.models" in sys.modules:
            stacks = len(
                sys.modules["moto.cloudformation.models"]
                .cloudformation_backends[DEFAULT_ACCOUNT_ID][region]
                .stacks
            )
        return queues, buckets, buses, secrets, stacks

    def empty(self) -> None:
        """Every item, message, object, secret and rule a test left, gone; streams start again."""
        self._empty_tables()
        self._restart_streams()
        self._empty_archives()
        if self._leftovers() == self.baseline:
            return  # nothing outside DynamoDB to undo: the API calls below would each find nothing
        if self._leftovers()[4]:  # stacks a test "deployed" (tally --stack NAME)
            cloudformation = self.client("cloudformation")
            for stack in cloudformation.describe_stacks()["Stacks"]:
                cloudformation.delete_stack(StackName=stack["StackName"])
        # only what differs from the baseline goes through the API (most tests leave a secret or a message:
        # listing and purging everything else cost ~25 calls, ~4 ms of CPU each)
        queues, buckets, buses, secrets, _ = self._leftovers()
        if queues != self.baseline[0]:
            sqs = self.client("sqs")
            for url in sqs.list_queues().get("QueueUrls", []):
                if url not in self.queues:
                    sqs.delete_queue(QueueUrl=url)
                elif queues.get(url.rsplit("/", 1)[1]):
                    sqs.purge_queue(QueueUrl=url)  # visible and in-flight messages alike
        if buckets != self.baseline[1]:
            s3 = self.client("s3")
            for bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
                if buckets.get(bucket) and _object_locked(bucket):
                    _forget_locked_objects(bucket)  # compliance mode refuses every delete (docs/audit.md)
                elif buckets.get(bucket):
                    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                        for version in page.get("Versions", []) + page.get("DeleteMarkers", []):
                            s3.delete_object(
                                Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"]
                            )
                if bucket not in self.buckets:
                    s3.delete_bucket(Bucket=bucket)
        if secrets:
            client = self.client("secretsmanager")
            for page in client.get_paginator("list_secrets").paginate():
                for secret in page["SecretList"]:
                    client.delete_secret(SecretId=secret["ARN"], ForceDeleteWithoutRecovery=True)
        if buses != self.baseline[2]:
            events = self.client("events")
            for bus in [b["Name"] for b in events.list_event_buses()["EventBuses"]]:
                for rule in events.list_rules(EventBusName=bus)["Rules"]:
                    if rule.get("ManagedBy"):  # the template's archive keeps its own rule on the bus
                        continue
                    targets = events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus)["Targets"]
                    if targets:
                        events.remove_targets(
                            Rule=rule["Name"], EventBusName=bus, Ids=[t["Id"] for t in targets]
                        )
                    events.delete_rule(Name=rule["Name"], EventBusName=bus)
                if bus not in self.buses:
                    events.delete_event_bus(Name=bus)
        assert self._leftovers() == self.baseline, "MotoAccount.empty left something behind"

    def _empty_tables(self) -> None:
        """Every item of the template's tables gone, in moto's backend (internals, as in _ddb_tables): deleting
        them through the API (a scan, then batches of 25) cost ~4 ms of CPU per item and ~5 % of the lane.
        moto keeps a table's items in one dict, and moto_fixes' hash-key index of it is rebuilt at the next
        Query; the streams are replaced after this (_restart_streams)."""
        tables = self._ddb_tables()
        for name in self.tables:
            table = tables.get(name)
            if table is not None and table.items:
                table.items.clear()
                table.__dict__.pop("_tally_hash_index", None)  # moto_fixes.query_by_hash_key

    @staticmethod
    def _ddb_tables() -> dict[str, Any]:
        """moto's DynamoDB tables (moto==5.2.1 internals, pinned in requirements-dev.txt): counting items
        here costs nothing, where a scan per table through the API cost most of emptying an empty account."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        return dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].tables

    @staticmethod
    def _empty_archives() -> None:
        """The bus's archive (template.yaml EventArchive) forgets earlier tests' events; the API has no call
        that empties an archive, so moto's list is cleared (internals, as above)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.events.models import events_backends

        for archive in events_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].archives.values():
            archive.events.clear()

    def _restart_streams(self) -> None:
        """The deletes went to the tables' streams too, and a stream read from TRIM_HORIZON (the outbox
        tests) must show this test's changes only. moto refuses to re-enable a stream through the API, so
        each stream's one shard is replaced (internals, as above)."""
        from moto.dynamodb.models.table import StreamShard

        for table in self._ddb_tables().values():
            if table.name in self.tables and table.stream_shard is not None and table.stream_shard.items:
                table.stream_shard = StreamShard(table.account_id, table)


class WorkerClients:
    """bootstrap's boto3 clients (`bootstrap._client`) kept by the worker across `aws` tests: bootstrap builds
    ~3.5 per test (each `reset()` forgets them) at ~2-6 ms of CPU each, where Lambda builds them once per
    container. A client is handed out again only for the same service, Config (`bootstrap.aws_config()`),
    default boto3 session and AWS_* / BOTO* environment, and only as it was built: a client whose events a
    test registered on or unregistered from (`meta.events`), or on which it set or replaced an attribute, is
    forgotten after the test. Tests that replace `boto3.client` (spies) or point AWS_ENDPOINT_URL* elsewhere
    (a moto server, a silent socket) get bootstrap's own per-test clients, built as in production."""

    _LAZY = frozenset({"_exceptions"})  # botocore fills client.exceptions on first use

    def __init__(self, built):
        self.built = built  # bootstrap's own `_client` (functools.cache, cleared by reset())
        self.clients: dict[tuple[Any, ...], tuple[Any, dict[str, Any], list[str]]] = {}
        self.lock = threading.Lock()

    def __call__(self, service: str) -> Any:
        session = boto3.DEFAULT_SESSION
        if (
            boto3.client is not _BOTO3_CLIENT
            or session is None
            or any(name.startswith("AWS_ENDPOINT_URL") for name in os.environ)
        ):
            return self.built(service)
        config = bootstrap.aws_config()
        key = (
            service,
            session,
            repr(sorted(vars(config).items())),
            tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("AWS_", "BOTO")))),
        )
        with self.lock:
            if key not in self.clients:
                client = boto3.client(service, config=config)
                self.clients[key] = (client, dict(vars(client)), _watch_events(client))
            return self.clients[key][0]

    def cache_clear(self) -> None:  # bootstrap.reset()
        self.built.cache_clear()

    def forget_changed(self) -> None:
        """After each test: the clients the test changed are dropped (the next test builds its own)."""
        for key, (client, built, touched) in list(self.clients.items()):
            now = vars(client)
            if (
                touched
                or now.keys() != built.keys()
                or any(now[name] is not value for name, value in built.items() if name not in self._LAZY)
            ):
                del self.clients[key]


def _watch_events(client: Any) -> list[str]:
    """Notes every register/unregister on the client's event emitter (what a test hooks into a client)."""
    touched: list[str] = []
    events = client.meta.events
    for name in ("register", "register_first", "register_last", "unregister"):
        setattr(events, name, _noting(touched, name, getattr(events, name)))
    return touched


def _noting(touched: list[str], name: str, method: Any) -> Any:
    def watched(*args, **kwargs):
        touched.append(name)
        return method(*args, **kwargs)

    return watched


_BOTO3_CLIENT = boto3.client
_WORKER_CLIENTS = WorkerClients(bootstrap._client)


@pytest.fixture(scope="session")
def moto_account(sim):
    account = MotoAccount(sim)
    yield account
    account.mock.start(reset=False)
    account.mock.stop()  # remove_data: the worker's last test leaves nothing in moto


@pytest.fixture
def aws(monkeypatch, moto_account):
    """moto with the template's resources, empty, and the functions' environment (one account per worker)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for var, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(var, value)
    env = moto_account.start()
    monkeypatch.setattr(bootstrap, "_client", _WORKER_CLIENTS)
    try:
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        bootstrap.reset()
        yield env
    finally:
        _WORKER_CLIENTS.forget_changed()
        moto_account.stop()
        bootstrap.set_clock(time.time)


class Harness:
    """Drives the real handlers the way API Gateway and SQS would."""

    def __init__(self, env, sim, handlers, capsys, account):
        self.env = env
        self.sim = sim
        self.handlers = handlers
        self.capsys = capsys
        self.ddb = account.client(
            "dynamodb"
        )  # the worker's clients: building two per test cost ~12 ms of CPU
        self.sqs = account.client("sqs")
        self.metric_log: list[dict] = []
        self._backend_allowed = False
        self.series_log: list[tuple] = []  # (name, value, dimensions): what CloudWatch would store
        # counts an earlier test left by calling services directly (no handler flushed them) would
        # otherwise ride out with this test's first handler call and be read as this test's
        metrics.clear_metrics()

    # ---- set-up
    def add_merchant(self, verify_mode="public_key", mchid=None, public_key=None):
        """A merchant the simulator knows, stored with the channel's keys; `public_key`: another WeChat Pay
        public key stored under the channel's key id (a stale key: the channel's callbacks fail to verify)."""
        m = self.sim.register_test_merchant(verify_mode=verify_mode)
        if mchid is not None and mchid != m["mchid"]:
            self.sim.register_merchant(
                mchid,
                m["apiv3_key"],
                m["merchant_public_key_pem"],
                m["merchant_serial"],
                appid=m["appid"],
                verify_mode=verify_mode,
            )
        mchid = mchid or m["mchid"]
        from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
            mchid=mchid,
            apiv3_key=m["apiv3_key"],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
            platform_certs=[self.sim.platform_cert_pem],
            public_key=public_key or self.sim.public_key_pem,
            public_key_id=self.sim.public_key_id,
        )
        return {**m, "mchid": mchid}

    def create_order(self, mchid, out_trade_no=None, amount_cent=100, prepay=False, **extra):
        out_trade_no = out_trade_no or f"T{uuid.uuid4().hex[:20]}"
        body = {
            "mchid": mchid,
            "out_trade_no": out_trade_no,
            "amount_cent": amount_cent,
            "description": "test order",
            "prepay": prepay,
            **extra,
        }
        return self.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {})

    # ---- callbacks
    def notification(self, mchid, out_trade_no, total=100, **kw):
        build = {
            k: kw.pop(k)
            for k in list(kw)
            if k
            in {
                "timestamp",
                "nonce",
                "serial",
                "signature_override",
                "associated_data",
                "apiv3_key",
                "event_type",
            }
        }
        currency = kw.pop("currency", None)
        resource = self.sim.transaction_resource(mchid, out_trade_no, total, **kw)
        if currency:
            resource["amount"]["currency"] = resource["amount"]["payer_currency"] = currency
        headers, body = self.sim.build_notification(mchid, resource, **build)
        return headers, body, resource

    def notify(self, mchid, headers, body, base64_body=True):
        return self.call(
            "NotifyFunction",
            "POST",
            f"/notify/wechatpay/{mchid}",
            body,
            headers,
            {"mchid": mchid},
            base64_body=base64_body,
        )

    def call(
        self,
        function,
        method,
        path,
        body: bytes,
        headers,
        path_params,
        base64_body=True,
        caller=LOCAL_BACKEND_ARN,
    ):
        """`caller`: the IAM principal API Gateway verified (R53); the tests' backend acts for every merchant."""
        handler, _ = self.handlers[function]
        if caller == LOCAL_BACKEND_ARN and not self._backend_allowed:
            bootstrap.callers().allow(LOCAL_BACKEND_ARN, [EVERY_MERCHANT], by="tests")
            self._backend_allowed = True
        event = http_event(method, path, body, headers, path_params, base64_body=base64_body, caller=caller)
        response = handler(event, LambdaContext(function))
        self._collect_metrics()
        return response

    def invoke(self, function, event):
        """Any function with any event (stream, schedule …), metrics collected."""
        handler, _ = self.handlers[function]
        result = handler(event, LambdaContext(function))
        self._collect_metrics()
        return result

    # ---- the worker
    def drain(self, max_rounds=20):
        """Feed queued messages to the worker handler until the queue is empty; returns results."""
        handler, _ = self.handlers["WorkerFunction"]
        url = self.env["APPLY_QUEUE_URL"]
        failures = []
        for _ in range(max_rounds):
            msgs = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
            ).get("Messages", [])
            if not msgs:
                return failures
            event = {"Records": [self._record(m) for m in msgs]}
            result = handler(event, LambdaContext("WorkerFunction"))
            self._collect_metrics()
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            failures.extend(failed)
            for m in msgs:
                if m["MessageId"] not in failed:
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return failures

    def _record(self, m):
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:apply",
            "awsRegion": "us-east-1",
        }

    def queue_depth(self):
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.env["APPLY_QUEUE_URL"], AttributeNames=["ApproximateNumberOfMessages"]
        )
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])

    # ---- observations
    def _collect_metrics(self):
        out = self.capsys.readouterr().out
        for name, value in emf_metrics(out):
            self.metric_log.append({"name": name, "value": value})
        self.series_log.extend(emf_series(out))

    def series(self, name, **dimensions):
        """`name` summed over the one CloudWatch series with exactly service=tally plus `dimensions`."""
        want = {"service": "tally", **dimensions}
        return sum(value for n, value, dims in self.series_log if n == name and dims == want)

    def metric(self, name):
        return sum(m["value"] for m in self.metric_log if m["name"] == name)

    def scan(self, env_var):
        from tally.store.codec import from_item

        return [from_item(i) for i in self.ddb.scan(TableName=self.env[env_var]).get("Items", [])]

    def order(self, mchid, out_trade_no):
        return bootstrap.order_service().show(mchid, out_trade_no)


@pytest.fixture
def h(aws, sim, handlers, capsys, moto_account):
    return Harness(aws, sim, handlers, capsys, moto_account)


def _object_locked(bucket: str) -> bool:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return bool(s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].object_lock_enabled)


def _forget_locked_objects(bucket: str) -> None:
    """Between tests only: the audit bucket's objects are in COMPLIANCE mode, which no API call may delete
    (tests/integration/test_audit.py proves it), so the harness forgets them in moto's own state."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].keys.clear()
