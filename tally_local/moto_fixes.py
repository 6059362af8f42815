"""What the embedded stack's moto server lacks, measured under `bench/load.py` (16 senders), fixed here.

1. **Each DynamoDB request atomic and isolated.** moto applies a request in the werkzeug thread that
   received it, with no lock: two conditional writes can both pass their condition, and a scan can
   fail with "dictionary changed size during iteration" while another thread inserts.
   `atomic_requests` applies one DynamoDB request at a time (the same lock tests/concurrency uses);
   callers still race between their requests, as they do on AWS.
2. **A transaction costs what it touches.** moto's TransactWriteItems deep-copies every table it names
   (items *and* stream records) before it starts, to restore the copy if the transaction is cancelled.
   That is O(table size) CPU per transaction, on the GIL the front door needs to ACK: at 200 orders
   it was 38 % of the process's CPU, and it grows with every row. `item_level_rollback` copies only
   the items the transaction names and, on cancellation, puts exactly those back and drops the stream
   records the transaction wrote. The outcome is moto's (all or nothing; the same errors); only the
   copy is smaller. (Whole-table restore also erased writes other threads made meanwhile; with 1.
   there are none.)
3. **Routing a request does not read the disk.** moto's server lists its own package directory
   (`os.listdir` + an `isdir` per service, ~170 syscalls) for every request, under its dispatch lock.
   `cached_module_list` lists it once: the installed package does not change while it runs.

4. **An event is not a parser build.** moto's EventBridge builds a JSONPath parser (ply tables) for
   each of the 8 default input paths of every event it delivers to a target: 1.8 ms each, ~14 ms of
   CPU per PutEvents. `cached_jsonpath` parses each path once (a parsed path is not mutated by `find`).

5. **A queue's attribute is not all of them.** moto's SQS computes every queue attribute, including
   the three message counts (a pass over all messages each), to read one: per received message (its
   retention check), per GetQueueAttributes name, so O(backlog) per message. `one_queue_attribute`
   reads the retention period directly and answers GetQueueAttributes for plain named attributes by
   computing only those (anything else, e.g. "All" or Policy, goes the original way).
6. **An update expression is parsed once.** moto parses the same UpdateExpression text (a tokenizer
   and a recursive parser) twice per UpdateItem; `cached_update_parser` keeps the parsed tree per
   text. Its users only read it (the validator deep-copies it before changing anything).

7. **A Lambda task runs the function's own handler.** moto invokes a Lambda function in Docker (or answers a
   canned reply); the embedded stack has neither: its handlers run in-process behind the front door. A function
   created with the environment variable `TALLY_LOCAL_INVOKE_URL` (tally_local/statemachines.py) is invoked by
   POSTing the payload there (`POST /_local/lambda/{function}`, tally_local/lambda_io.py); the answer and a
   raised error come back as Lambda's Invoke would return them (`X-Amz-Function-Error: Unhandled`). This is what
   moto's Step Functions interpreter calls for each `lambda:invoke` task, so the state machine of
   template.yaml runs on the very handlers `make run` serves. Functions without the variable go moto's way.

8. **A state machine runs more than once.** moto's interpreter deep-copies the state machine at every
   StartExecution, its list of executions included: once one has run, that list holds its worker's threads
   and locks, and the copy fails ("cannot pickle '_thread.RLock'"), so a second execution never starts.
   `state_machine_copy_without_executions` copies everything else (the copy is only read for its definition).

9. **A Distributed Map fails when its children do.** On AWS a Map run whose failed children exceed
   ToleratedFailureCount / ToleratedFailurePercentage (both 0 by default) fails with
   States.ExceedToleratedFailureThreshold, which the Map's Catch handles. moto counts a failed child and goes
   on with `null` as its result. `map_run_tolerated_failures` raises AWS's error once the run is over.

Under bench.load's 16 senders (issue #20 item 6; measured in docs/embedded-stack.md), each the same answer
for less CPU, each with a test in tests/integration/test_moto_fixes_load.py:

10. **A response is not a name search per member.** `cached_alias_keys`: the names a structure member may
    have in a plain dict are found once per shape, not by six alias providers per member per response.
11. **An action is found without listing the class.** `cached_action_names`: inspect.getmembers once per
    handler class, not per request.
12. **An update is validated in O(nodes).** `cached_processing_maps` (each walker's node map built once),
    `structural_checks_once` (clause counts and overlapping paths checked once per parsed expression and
    names, not at every node), `plain_ast_copy` (the tree copied node by node, not through deepcopy).
13. **An item's size is summed once.** `item_size_checked_once`: the 400 KB check with a running total.

14. **A Query reads its key's items, not the table.** moto answers every Query (a table's hash key or a global
   secondary index's) by sorting *all* the table's items and filtering them, then sorting the matches, then
   walking from the first match to the page's ExclusiveStartKey: each page is O(table). With 10,000 unbooked
   payments in notify_raw, listing them took 34.5 s in-process and one page up to 8 s (the product's read timeout
   is 5 s); DynamoDB reads a key's partition. `query_by_hash_key` keeps, per table, which items each GSI hash key
   value holds (built at the table's first Query, kept on every write moto makes: put, delete, update, batch,
   transaction and its cancellation) and hands moto's own Query only those items (a table Query: the items under
   its hash key). Everything after the candidate list is moto's code unchanged (sort, ScanIndexForward, range
   condition, ExclusiveStartKey, Limit, the 1 MB page, filter, projection), so a result differs from moto's only
   if the candidates missed a matching item: each candidate is checked against the live item, and
   tests/integration/test_moto_query_index.py compares the two on the same data.

15. **A page of items is JSON, not a walk of botocore's shapes.** moto 5.2 serializes every response through a
   generic serializer that walks the operation's output shape for each value (each AttributeValue a structure of
   ten members, each looked up under its aliases): with the Query itself fixed (14), a 1,000-item listing still
   spent 77 of its 94 s (cProfile, in-process, this loaded machine) there, ~2,400 items a page held moto's lock
   for tens of seconds. `items_as_json` lets moto's serializer write a Query's or Scan's answer without its
   Items (status, headers, counts, LastEvaluatedKey as before), then puts the Items in as the wire JSON they are
   already (moto's DynamoResult holds them as {type: value}; binary values are base64, as the serializer
   writes them). tests/integration/test_moto_query_index.py compares the two bodies for every attribute type.

16. **A queue's backlog is read with one clock.** moto's SQS decides which messages a ReceiveMessage may see
   through two properties per message (`visible`, `delayed`), each reading the clock through datetime arithmetic
   (~5 µs; ~15 µs on a busy machine), and deletes a message by two passes over the queue, each building a list of
   every message's receipt handles; and every SendMessage reads the queue's `attributes`, which counts the
   delayed and in-flight messages the same way. With the apply queue 1,000 messages behind (bench.load: four notify
   containers outrun the one worker), each receive cost ~10–30 ms of moto's one GIL and the ACK's SendMessage
   waited behind it. `backlog_with_one_clock` reads the clock once per call and finds the message to delete in
   one pass; the same messages, in the same order (tests/integration/test_moto_fixes_load.py).

`install()` is idempotent and process-wide (moto's backends are per process anyway).

**Checked against moto `==5.2.1`** (`MOTO_CHECKED`; requirements-dev.txt pins 5.2.1). Every patch rebinds a
moto internal that moto documents no extension point for, so `install()` refuses to run on a moto outside that
range (`MotoFixError`, naming the range), and each patch refuses to install if the attribute it replaces is gone
(or, for a hook it adds, if moto grew one of its own): a moto upgrade fails at start, never runs a half-patched
path. To move the range: install the new moto, run tests/integration/test_moto_*.py (each patch's test shows what
moto does without it) and `python -m bench.moto_patches` (what each cost patch still buys), then widen it.
moto's own function behind each patch stays reachable as `moto_own(owner, name)`, for the tests.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable
from typing import Any

MOTO_CHECKED = "==5.2.1"
_CHECKED_FROM, _CHECKED_BELOW = (5, 2, 1), (5, 2, 2)

_installed = False
_install_lock = threading.Lock()
_request_lock = threading.RLock()
_in_transaction = threading.local()
_MISSING = object()
_moto_own: dict[tuple[int, str], Any] = {}  # (id(owner), name) -> moto's own attribute, before any patch


class MotoFixError(RuntimeError):
    """The installed moto is not the one these patches were checked against."""


def check_moto_version(version: str | None = None) -> None:
    """Raise MotoFixError unless `version` (default: the installed moto's) is within MOTO_CHECKED."""
    if version is None:
        import moto

        version = moto.__version__
    numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])
    if not _CHECKED_FROM <= numbers < _CHECKED_BELOW or re.search(r"(dev|a|b|rc)\d*$", version):
        raise MotoFixError(
            f"tally_local.moto_fixes was checked against moto {MOTO_CHECKED}, this is moto {version}: "
            "its patches rebind moto internals, so run tests/integration/test_moto_*.py and "
            "`python -m bench.moto_patches` on this moto, then move MOTO_CHECKED (or pin moto back)"
        )


def _where(owner: Any) -> str:
    return (
        f"{getattr(owner, '__module__', '')}.{owner.__qualname__}"
        if isinstance(owner, type)
        else owner.__name__
    )


def _moto(owner: Any, name: str) -> Any:
    """moto's `owner.name`, or MotoFixError if this moto has none (a patch must not silently do nothing)."""
    found = getattr(owner, name, _MISSING)
    if found is _MISSING:
        raise MotoFixError(
            f"moto has no {_where(owner)}.{name}, which tally_local.moto_fixes patches "
            f"(checked against moto {MOTO_CHECKED}): check the patch against this moto"
        )
    return found


def _replace(owner: Any, name: str, new: Any) -> None:
    """Rebind moto's `owner.name` (which must exist) to `new`; moto's own stays in `moto_own`."""
    _moto_own.setdefault((id(owner), name), _moto(owner, name))
    setattr(owner, name, new)


def _add(owner: Any, name: str, new: Any) -> None:
    """Give `owner` a hook moto's class does not define itself (MotoFixError if it now does)."""
    if name in vars(owner):
        raise MotoFixError(
            f"moto's {_where(owner)} now defines {name} itself, which tally_local.moto_fixes adds "
            f"(checked against moto {MOTO_CHECKED}): check whether the patch is still needed"
        )
    _moto_own.setdefault((id(owner), name), None)
    setattr(owner, name, new)


def moto_own(owner: Any, name: str) -> Any:
    """moto's own `owner.name` as it was before `install()` (None for a hook moto does not define)."""
    return _moto_own[(id(owner), name)] if (id(owner), name) in _moto_own else getattr(owner, name)


def install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        check_moto_version()
        for patch in PATCHES:
            patch()
        _installed = True


def atomic_requests() -> None:
    from moto.dynamodb.responses import DynamoHandler

    original = _moto(DynamoHandler, "call_action")

    def call_action(self: Any) -> Any:
        with _request_lock:
            return original(self)

    _replace(DynamoHandler, "call_action", call_action)


INVOKE_URL_VARIABLE = "TALLY_LOCAL_INVOKE_URL"


def local_lambda_invoke() -> None:
    import urllib.request

    from moto.awslambda.models import LambdaBackend

    original = _moto(LambdaBackend, "invoke")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only

    def invoke(
        self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
    ) -> Any:
        function = self.get_function(function_name, qualifier)
        url = (function.environment_vars or {}).get(INVOKE_URL_VARIABLE)
        if not url:
            return original(self, function_name, qualifier, body, headers, response_headers)
        data = body.encode() if isinstance(body, str) else (body or b"{}")
        request = urllib.request.Request(
            url, data=data, method="POST", headers={"content-type": "application/json"}
        )
        with opener.open(request, timeout=900) as answer:
            payload = answer.read()
            error = answer.headers.get("x-amz-function-error")
        if error:
            response_headers["x-amz-function-error"] = error
        return payload

    _replace(LambdaBackend, "invoke", invoke)


def state_machine_copy_without_executions() -> None:
    from moto.stepfunctions.models import StateMachineInstance

    def deepcopy(self: Any, memo: dict[int, Any]) -> Any:
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for name, value in self.__dict__.items():
            setattr(clone, name, [] if name == "executions" else copy.deepcopy(value, memo))
        return clone

    _add(StateMachineInstance, "__deepcopy__", deepcopy)  # moto defines none: its copy is the default


def map_run_tolerated_failures() -> None:
    from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, HistoryEventType
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (  # noqa: E501
        DistributedIterationComponent,
    )
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    original = _moto(DistributedIterationComponent, "_map_run")

    def _map_run(self: Any, env: Any, eval_input: Any) -> None:
        original(self, env, eval_input)
        counter = eval_input.map_run_record.item_counter
        failed = counter.failed.get() + counter.timed_out.get()
        total = max(1, len(env.stack[-1]) if env.stack and isinstance(env.stack[-1], list) else 1)
        count_over = failed > int(eval_input.tolerated_failure_count or 0)
        percent_over = failed * 100.0 > float(eval_input.tolerated_failure_percentage or 0) * total
        if failed and count_over and percent_over:
            error = StatesErrorNameType.StatesExceedToleratedFailureThreshold
            cause = (
                f"The specified tolerated failure threshold was exceeded: {failed} of {total} items failed"
            )
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=error),
                    event_type=HistoryEventType.ExecutionFailed,
                    event_details=EventDetails(
                        executionFailedEventDetails=ExecutionFailedEventDetails(
                            error=error.to_name(), cause=cause
                        )
                    ),
                )
            )

    _replace(DistributedIterationComponent, "_map_run", _map_run)


def cached_module_list() -> None:
    import moto.backends as backends

    modules = tuple(_moto(backends, "list_of_moto_modules")())
    _replace(backends, "list_of_moto_modules", lambda: modules)  # werkzeug_app calls it through the module


def cached_jsonpath() -> None:
    import functools

    import jsonpath_ng.ext

    # moto.events.utils imports `parse` from the module at each call, so it finds this one
    _replace(jsonpath_ng.ext, "parse", functools.lru_cache(maxsize=256)(_moto(jsonpath_ng.ext, "parse")))


_PLAIN_QUEUE_ATTRIBUTES = frozenset(
    {
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
        "CreatedTimestamp",
        "DelaySeconds",
        "LastModifiedTimestamp",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "QueueArn",
        "ReceiveMessageWaitTimeSeconds",
        "VisibilityTimeout",
    }
)


def one_queue_attribute() -> None:
    from moto.core.utils import camelcase_to_underscores, unix_time
    from moto.sqs.models import SQSBackend

    original = _moto(SQSBackend, "get_queue_attributes")

    def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
        if not attribute_names or not set(attribute_names) <= _PLAIN_QUEUE_ATTRIBUTES:
            return original(self, queue_name, attribute_names)
        queue = self.get_queue(queue_name)
        values = {name: getattr(queue, camelcase_to_underscores(name), None) for name in attribute_names}
        return {name: value for name, value in values.items() if value is not None}  # as moto's own

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention_period = self.get_queue(queue_name).message_retention_period
        return int(retention_period) + message.sent_timestamp / 1000 > unix_time()

    _replace(SQSBackend, "get_queue_attributes", get_queue_attributes)
    _replace(
        SQSBackend, "is_message_valid_based_on_retention_period", is_message_valid_based_on_retention_period
    )


def backlog_with_one_clock() -> None:
    from moto.core.utils import unix_time_millis
    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Queue

    def messages(self: Any) -> list[Any]:
        now = unix_time_millis()  # moto's Message.visible and .delayed, each of which reads the clock itself
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    def delete_message(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return  # already deleted: moto answers success again
        messages = self._messages
        position = next(
            (
                i
                for i, m in enumerate(messages)
                if m.receipt_handle == receipt_handle or receipt_handle in m._old_receipt_handles
            ),
            None,
        )
        if position is None:
            raise ReceiptHandleIsInvalid()
        message = messages[position]
        # a new list, as moto builds one: a receive in another thread may be walking the old one
        self._messages = messages[:position] + messages[position + 1 :]
        self.pending_messages.discard(message)
        self.deleted_messages.update(message.all_receipt_handles)

    def delayed(self: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in self._messages if now < m.delayed_until)

    def not_visible(self: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in self._messages if not now > m.visible_at)

    _replace(Queue, "messages", property(messages))
    _replace(Queue, "approximate_number_of_messages_delayed", property(delayed))
    _replace(Queue, "approximate_number_of_messages_not_visible", property(not_visible))
    _replace(Queue, "delete_message", delete_message)


def cached_update_parser() -> None:
    import functools

    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    make = _moto(UpdateExpressionParser, "make").__func__
    parsed = functools.lru_cache(maxsize=512)(lambda text: make(UpdateExpressionParser, text))

    def cached_make(cls: type, text: str) -> Any:
        return parsed(text) if cls is UpdateExpressionParser else make(cls, text)

    _replace(UpdateExpressionParser, "make", classmethod(cached_make))


def item_level_rollback() -> None:
    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend

    _replace(models, "copy", _CopyKeepingTables(models.Table))  # the module-level `copy` moto's backend calls
    original = _moto(DynamoDBBackend, "transact_write_items")

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _save_touched(self, transact_items)
        _in_transaction.active = True
        try:
            return original(self, transact_items)
        except BaseException:
            _restore(saved)
            raise
        finally:
            _in_transaction.active = False

    _replace(DynamoDBBackend, "transact_write_items", transact_write_items)


class _CopyKeepingTables:
    """`copy` as moto.dynamodb.models sees it: inside our transact_write_items a Table is not copied
    (its backup is the item-level one taken before); everything else is copied as before."""

    def __init__(self, table_class: type):
        self._table_class = table_class

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(value, self._table_class) and getattr(_in_transaction, "active", False):
            return value
        return copy.deepcopy(value, memo)


def _save_touched(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(table, hash, range, copy of the item or None) per item named, and each table's stream length.

    An operation whose table or key is unusable is skipped: moto rejects it without writing it."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    saved: list[tuple[Any, ...]] = []
    streams: dict[int, tuple[Any, int]] = {}
    for entry in transact_items:
        try:
            op_type, op = next(iter(entry.items()))
            table = backend.tables[op["TableName"]]
            key = op["Item"] if op_type == "Put" else op["Key"]
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = DynamoType(key[table.range_key_attr]) if table.has_range_key else None
            current = table.get_item(hash_value, range_value)
        except Exception:  # noqa: BLE001 - moto itself reports this operation's error, and writes nothing for it
            continue
        saved.append(("item", table, hash_value, range_value, copy.deepcopy(current)))
        if table.stream_shard is not None and id(table) not in streams:
            streams[id(table)] = (table, len(table.stream_shard.items))
    saved += [("stream", table, length) for table, length in streams.values()]
    return saved


def _restore(saved: list[tuple[Any, ...]]) -> None:
    """Put back the items a cancelled transaction named; drop the stream records it wrote."""
    for entry in saved:
        if entry[0] == "stream":
            _, table, length = entry
            shard = table.stream_shard
            if shard is not None and len(shard.items) >= length:
                del shard.items[length:]
            continue
        _, table, hash_value, range_value, item = entry
        if range_value is None:
            if item is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = item
        elif item is None:
            bucket = table.items.get(hash_value)
            if bucket is not None:
                bucket.pop(range_value, None)
                if not bucket:
                    del table.items[hash_value]
        else:
            table.items[hash_value][range_value] = item


_ALIAS_KEYS_LIMIT = 20_000  # botocore's shapes are cached per service: the set is small and fixed


def cached_alias_keys() -> None:
    """moto serialises every response by walking the botocore output shape and, for each member of each
    structure, asking its attribute picker which names the member may have in the Python value (the
    name itself, its snake_case form, a Meta alias, the shape name, the parent's or class's prefix cut
    off, the wire name): six alias-provider objects built and asked per member, whether the value has
    it or not. A DynamoDB AttributeValue has ten members (S, N, B, ..., BOOL), so an item of 30
    attributes is ~300 such lookups per image; it was the largest single cost of moto under
    bench.load (GetRecords with two images per record, Query, GetItem).

    For a value that is a plain `dict` the candidate names depend only on the picker, the member's
    shape (and its parent) and the key, never on the dict's contents: ExplicitAlias needs a `Meta`
    (a dict has none), ClassPrefixAlias the class name ("dict"), the others the shape. So the
    candidates are computed once per (picker kind, shape, parent, key), and the value is still looked
    up in this dict, in the same order, first present wins, as moto does; a structure member whose
    names are all absent is skipped, as moto skips a member whose value is None. Pickers with response
    transformers (they look at the key path), serializers that serialise members their own way (XML)
    and values that are not plain dicts go moto's way."""
    from moto.core import serialize
    from moto.core.utils import MISSING, get_value

    base = serialize.ResponseSerializer
    original_get_value, original_structure = (
        _moto(base, "get_value"),
        _moto(base, "_serialize_type_structure"),
    )
    pickers = (serialize.AttributePicker, serialize.XFormedAttributePicker)
    names_by: dict[tuple[Any, ...], tuple[str, ...]] = {}
    members_by: dict[tuple[Any, ...], tuple[tuple[str, Any, tuple[str, ...]], ...]] = {}

    def plain(self: Any, value: Any) -> bool:
        picker = self._value_picker
        return (
            type(value) is dict
            and type(picker) in pickers
            and picker.alias_providers is serialize.DEFAULT_ALIAS_PROVIDERS
            and not picker.response_transformers
        )

    def names_for(self: Any, value: Any, key: str, shape: Any) -> tuple[str, ...]:
        ident = (type(self._value_picker), shape, getattr(shape, "parent", None), key)
        names = names_by.get(ident)
        if names is None:
            context = serialize.AttributePickerContext(
                obj=value,
                key=key,
                shape=shape,
                operation_model=self.operation_model,
                service_model=self.operation_model.service_model,
                key_path=".".join(self.path),
            )
            names = tuple(self._value_picker.get_possible_keys(context))
            if len(names_by) >= _ALIAS_KEYS_LIMIT:
                names_by.clear()
            names_by[ident] = names
        return names

    def pick(value: dict[str, Any], names: tuple[str, ...]) -> Any:
        for name in names:
            # moto's get_value on a dict: value[name], a dotted name walks the path
            found = value.get(name, MISSING) if "." not in name else get_value(value, name, MISSING)
            if found is not MISSING:
                return found
        return None

    def cached_get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        if not plain(self, value):
            return original_get_value(self, value, key, shape)
        return pick(value, names_for(self, value, key, shape))

    def cached_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if (
            value is None
            or not plain(self, value)
            or type(self)._serialize_structure_member is not base._serialize_structure_member
        ):
            return original_structure(self, serialized, value, shape, key)
        ident = (type(self._value_picker), shape)
        members = members_by.get(ident)
        if members is None:
            listed = []
            for member_key, member_shape in shape.members.items():
                member_shape.parent = shape
                listed.append((member_key, member_shape, names_for(self, value, member_key, member_shape)))
            members = members_by[ident] = tuple(listed)
            if len(members_by) >= _ALIAS_KEYS_LIMIT:
                members_by.clear()
        wrapper = self.MAP_TYPE() if key else serialized
        for member_key, member_shape, names in members:
            member_shape.parent = shape  # as moto sets it, for whatever reads it below
            member_value = pick(value, names)
            if member_value is not None:
                self._serialize(wrapper, member_value, member_shape, member_key)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)
        return None

    cached_get_value.__wrapped__ = original_get_value  # type: ignore[attr-defined]  # moto's, for the tests
    cached_structure.__wrapped__ = original_structure  # type: ignore[attr-defined]
    _replace(base, "get_value", cached_get_value)
    _replace(base, "_serialize_type_structure", cached_structure)


def cached_action_names() -> None:
    """To dispatch an action moto lists every function of the handler class (`inspect.getmembers`,
    ~300 names for DynamoDB, sorted) on every request, to see whether the action is one of them. A
    class's functions do not change while the server runs (our patches are installed before it
    serves), so the list is computed once per class."""
    import functools

    from moto.core import responses

    original = _moto(responses, "method_names_from_class")
    _replace(responses, "method_names_from_class", functools.lru_cache(maxsize=256)(original))


def cached_processing_maps() -> None:
    """moto validates an UpdateExpression with ten tree walkers (DepthFirstTraverser), each asking, at every
    node of the tree, for its `_processing_map()`: a new dict of bound methods, built twice per node (once
    to list the node types, once to find the function). Every `_processing_map` of moto returns a literal
    dict of the walker's own methods, the same for the walker's whole life, so each walker builds it once."""
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser

    def processing_map(self: Any) -> dict[type, Any]:
        found = self.__dict__.get("_tally_processing_map")
        if found is None:
            found = self.__dict__["_tally_processing_map"] = self._processing_map()
        return found

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        found = self.__dict__.get("_tally_node_types")
        if found is None:
            found = self.__dict__["_tally_node_types"] = tuple(processing_map(self))
        return found

    def process(self: Any, node: Any) -> Any:
        for class_key, processor in processing_map(self).items():
            if isinstance(node, class_key):
                return processor(node)
        return None

    _replace(DepthFirstTraverser, "nodes_to_be_processed", nodes_to_be_processed)
    _replace(DepthFirstTraverser, "process", process)


_STRUCTURAL_LIMIT = 4096


def structural_checks_once() -> None:
    """Two of moto's UpdateExpression checks look only at the expression's shape: ActionCountValidator
    (at most one SET / ADD / REMOVE clause) and OverlappingPathsValidator (no path set twice or inside
    another, given the attribute names). They run at every node of the tree and each run walks the
    node's subtree again (O(nodes²)): with the worker's order update they were ~20 % of a transaction.
    Neither changes the tree nor reads the item or the values, so for the same parsed expression (the
    object `cached_update_parser` hands out per text; held here so its id stays its own) and the same
    ExpressionAttributeNames the outcome is the same: a check that passed once is not run again. A
    check that fails is not remembered: it runs, and raises, every time."""
    from moto.dynamodb.parsing import validators

    kinds = (validators.ActionCountValidator, validators.OverlappingPathsValidator)
    original_init, original_validate = (
        validators.Validator.__init__,
        validators.UpdateExpressionValidator.validate,
    )
    passed: dict[int, tuple[Any, set[tuple[Any, ...]]]] = {}

    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, expression, *args, **kwargs)
        self._tally_source = expression

    def validate(self: Any) -> Any:
        source = getattr(self, "_tally_source", None)
        if source is None:
            return original_validate(self)
        entry = passed.get(id(source))
        if entry is None or entry[0] is not source:
            if len(passed) >= _STRUCTURAL_LIMIT:
                passed.clear()
            entry = passed[id(source)] = (source, set())
        names = tuple(sorted((self.expression_attribute_names or {}).items()))
        node = self.node_to_validate
        for processor in self.processors:
            ident = (type(processor), names)
            if type(processor) in kinds and ident in entry[1]:
                continue  # it would walk the tree, find it as before, and hand back the same node
            node = processor.traverse(node)
            if type(processor) in kinds:
                entry[1].add(ident)
        return node

    _replace(validators.Validator, "__init__", __init__)
    _replace(validators.UpdateExpressionValidator, "validate", validate)


def item_size_checked_once() -> None:
    """moto builds an Item attribute by attribute into a LimitedSizeDict, whose every insert sums the size
    of all attributes already in it to enforce DynamoDB's 400 KB item limit: O(attributes²) per item, for
    every item written, read into a transaction or copied. The same check, with a running total: each
    attribute's size (key and value, as LimitedSizeDict measures them) is computed once; an item over
    the limit raises ItemSizeTooLarge at the same attribute as before. Later updates of an item go
    through LimitedSizeDict as before."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models import dynamo_type
    from moto.dynamodb.models.utilities import bytesize

    def __init__(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        self.hash_key = hash_key
        self.range_key = range_key
        self.attrs = dynamo_type.LimitedSizeDict()
        total = 0
        for key, value in attrs.items():
            typed = dynamo_type.DynamoType(value)  # keys come from a dict: each is new
            size = bytesize(str(key)) + typed.size()
            if total + size > 405000:
                raise ItemSizeTooLarge
            dict.__setitem__(self.attrs, key, typed)
            total += size

    _replace(dynamo_type.Item, "__init__", __init__)


_IMMUTABLE = (str, int, float, bool, type(None))


def plain_ast_copy() -> None:
    """Each UpdateExpression validation starts with `copy.deepcopy` of the parsed tree (the walkers then
    replace nodes in the copy): ~400 objects through deepcopy's generic dispatch (reduce, reconstruct,
    memo) per update, ~a fifth of a TransactWriteItems. moto's tree nodes are plain objects (no
    __deepcopy__, __slots__ or state hooks) whose attributes are strings, None, lists and other
    nodes, so they are copied here directly: a new node of the same class with each attribute copied
    (strings shared, as deepcopy shares them; lists and nodes copied, through the same memo, so a
    node's `parent` is its copied parent). Anything else in the tree goes through copy.deepcopy."""
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.ast_nodes import Node

    plain_nodes: dict[type, bool] = {}  # class → a Node class without copy hooks (ABC isinstance is slow)

    def plain_node(cls: type) -> bool:
        found = plain_nodes.get(cls)
        if found is None:
            hooks = ("__deepcopy__", "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
            found = plain_nodes[cls] = (
                issubclass(cls, Node)
                and all(getattr(cls, hook, None) is getattr(object, hook, None) for hook in hooks)
                and not any("__slots__" in vars(k) for k in cls.__mro__)
            )
        return found

    def copy_value(value: Any, memo: dict[int, Any]) -> Any:
        kind = type(value)
        if kind in _IMMUTABLE:
            return value
        done = memo.get(id(value))
        if done is not None:
            return done
        if kind is list:
            clone: list[Any] = []
            memo[id(value)] = clone
            clone.extend([copy_value(entry, memo) for entry in value])
            return clone
        if plain_node(kind):
            node = kind.__new__(kind)
            memo[id(value)] = node
            attributes = node.__dict__
            for name, attribute in value.__dict__.items():
                attributes[name] = copy_value(attribute, memo)
            return node
        return copy.deepcopy(value, memo)

    def ast_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if plain_node(type(value)):
            return copy_value(value, {} if memo is None else memo)
        return copy.deepcopy(value, memo)

    _replace(validators, "deepcopy", ast_deepcopy)


_query_scope = threading.local()  # id(table) -> the candidate items moto's Query sees as the table's items


def query_by_hash_key() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    original_query = _moto(Table, "query")
    original_all_items = _moto(Table, "all_items")
    original_put = _moto(Table, "put_item")
    original_delete = _moto(Table, "delete_item")
    original_update = _moto(DynamoDBBackend, "update_item")
    original_transact = _moto(DynamoDBBackend, "transact_write_items")

    def all_items(self: Any) -> Any:
        candidates = getattr(_query_scope, "tables", {}).get(id(self))
        return original_all_items(self) if candidates is None else candidates

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        candidates = _query_candidates(self, *args, **kwargs)
        if candidates is None:
            return original_query(self, *args, **kwargs)
        scope = _query_scope.__dict__.setdefault("tables", {})
        scope[id(self)] = candidates
        try:
            return original_query(self, *args, **kwargs)
        finally:
            scope.pop(id(self), None)

    def put_item(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return original_put(self, item_attrs, *args, **kwargs)
        finally:
            _reindex_attrs(self, item_attrs)

    def delete_item(self: Any, hash_key: Any, range_key: Any) -> Any:
        try:
            return original_delete(self, hash_key, range_key)
        finally:
            _reindex(self, hash_key, range_key)

    def update_item(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return original_update(self, table_name, key, *args, **kwargs)
        finally:
            if table_name in self.tables:
                _reindex_attrs(self.tables[table_name], key)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        try:
            return original_transact(self, transact_items)
        except BaseException:  # a cancelled transaction put its items back behind the writes' backs
            for entry in transact_items:
                try:
                    op_type, op = next(iter(entry.items()))
                    table = self.tables.get(op["TableName"])
                    if table is not None:
                        _reindex_attrs(table, op["Item"] if op_type == "Put" else op["Key"])
                except Exception:  # noqa: BLE001 - an operation moto refused names nothing to re-index
                    continue
            raise

    _replace(Table, "all_items", all_items)
    _replace(Table, "query", query)
    _replace(Table, "put_item", put_item)
    _replace(Table, "delete_item", delete_item)
    _replace(DynamoDBBackend, "update_item", update_item)
    _replace(DynamoDBBackend, "transact_write_items", transact_write_items)


_QUERY_PARAMETERS = (
    "hash_key",
    "range_comparison",
    "range_objs",
    "limit",
    "exclusive_start_key",
    "scan_index_forward",
    "projection_expressions",
    "index_name",
    "consistent_read",
    "filter_expression",
)


def _query_candidates(table: Any, *args: Any, **kwargs: Any) -> list[Any] | None:
    """The items moto's Query would keep from all_items() (a superset is fine: moto filters them again), in
    all_items()'s order; None: let moto look at every item (a Query this index cannot narrow)."""
    named = dict(zip(_QUERY_PARAMETERS, args, strict=False)) | kwargs
    index_name = named.get("index_name")
    if not index_name:
        hash_key = named.get("hash_key")
        if hash_key is None or hash_key not in table.items:  # (items is a defaultdict: no lookup by [])
            return None if hash_key is None else []
        found = table.items[hash_key]
        items = list(found.values()) if table.range_key_attr else [found]
        return sorted(items, key=lambda x: x.range_key) if table.range_key_attr else items
    hash_attrs = _gsi_hash_attrs(table, index_name)
    conditions = dict(named.get("hash_key_conditions") or [])
    if hash_attrs is None or set(conditions) != set(hash_attrs):
        return None
    index = _hash_index(table)
    value = tuple(conditions[a] for a in hash_attrs)
    items = []
    for hash_key, range_key in index.buckets.get(index_name, {}).get(value, {}):
        item = table.get_item(hash_key, range_key) if hash_key in table.items else None
        if item is not None and all(
            a in item.attrs and item.attrs[a] == v for a, v in zip(hash_attrs, value, strict=True)
        ):
            items.append(item)
    return sorted(items, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)


class _HashIndex:
    """Per GSI: hash-key value (a tuple of the index's HASH attributes) -> the table keys of its items, and the
    reverse (table key -> its value), so a write moves one key between two buckets."""

    def __init__(self, table: Any):
        self.attrs = {
            g.name: [k["AttributeName"] for k in g.schema if k["KeyType"] == "HASH"]
            for g in (table.global_indexes or [])
        }
        self.buckets: dict[str, dict[tuple[Any, ...], dict[tuple[Any, Any], None]]] = {
            name: {} for name in self.attrs
        }
        self.where: dict[str, dict[tuple[Any, Any], tuple[Any, ...]]] = {name: {} for name in self.attrs}
        for item in original_items(table):
            self.put((item.hash_key, item.range_key), item)

    def put(self, key: tuple[Any, Any], item: Any) -> None:
        for name, attrs in self.attrs.items():
            old = self.where[name].pop(key, None)
            if old is not None:
                bucket = self.buckets[name].get(old)
                if bucket is not None:
                    bucket.pop(key, None)
                    if not bucket:
                        del self.buckets[name][old]
            if item is None or not all(a in item.attrs for a in attrs):
                continue
            value = tuple(item.attrs[a] for a in attrs)
            self.buckets[name].setdefault(value, {})[key] = None
            self.where[name][key] = value


def original_items(table: Any) -> list[Any]:
    """Every item of the table (as moto's all_items, without its sort)."""
    if table.range_key_attr:
        return [item for bucket in table.items.values() for item in bucket.values()]
    return list(table.items.values())


def _gsi_hash_attrs(table: Any, index_name: str) -> list[str] | None:
    for index in table.global_indexes or []:
        if index.name == index_name:
            attrs = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
            return attrs or None
    return None  # a local index (or none by that name: moto says so)


def _hash_index(table: Any) -> _HashIndex:
    index = table.__dict__.get("_tally_hash_index")
    if index is None or set(index.attrs) != {g.name for g in (table.global_indexes or [])}:
        index = _HashIndex(table)  # first Query, or the table's indexes changed (UpdateTable)
        table.__dict__["_tally_hash_index"] = index
    return index


def _reindex(table: Any, hash_key: Any, range_key: Any) -> None:
    index = table.__dict__.get("_tally_hash_index")
    if index is None:  # not queried by an index yet: built from the items at its first Query
        return
    try:
        item = table.get_item(hash_key, range_key) if hash_key in table.items else None
    except Exception:  # noqa: BLE001 - a key moto refuses has no item
        item = None
    index.put((hash_key, range_key), item)


def _reindex_attrs(table: Any, attrs: dict[str, Any]) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    if table.__dict__.get("_tally_hash_index") is None:
        return
    try:
        hash_key = DynamoType(attrs[table.hash_key_attr])
        range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    except Exception:  # noqa: BLE001 - without its key the write wrote nothing
        return
    _reindex(table, hash_key, range_key)


_ITEM_PAGES = frozenset({"Query", "Scan"})


def items_as_json() -> None:
    import json

    from moto.dynamodb.responses import DynamoResult

    original = _moto(DynamoResult, "execute_result")

    def execute_result(self: Any, context: Any) -> Any:
        result = self.result
        items = result.get("Items") if isinstance(result, dict) else None
        if context.operation_model.name not in _ITEM_PAGES or not isinstance(items, list) or not items:
            return original(self, context)
        self._result = {**result, "Items": []}
        try:
            status, headers, body = original(self, context)
        finally:
            self._result = result
        answer = json.loads(body)
        answer["Items"] = [_wire(item) for item in items]
        return status, headers, json.dumps(answer)

    _replace(DynamoResult, "execute_result", execute_result)


def _wire(value: Any) -> Any:
    """An item as moto's DynamoResult holds it ({name: {type: value}}, binary values as bytes) -> its wire JSON."""
    import base64

    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


# In install()'s order (query_by_hash_key wraps item_level_rollback's transact_write_items).
PATCHES: tuple[Callable[[], None], ...] = (
    atomic_requests,
    item_level_rollback,
    cached_module_list,
    cached_jsonpath,
    one_queue_attribute,
    cached_update_parser,
    local_lambda_invoke,
    state_machine_copy_without_executions,
    map_run_tolerated_failures,
    cached_alias_keys,
    cached_action_names,
    cached_processing_maps,
    structural_checks_once,
    item_size_checked_once,
    plain_ast_copy,
    query_by_hash_key,
    items_as_json,
    backlog_with_one_clock,
)
