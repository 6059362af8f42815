"""Safe bulk replay (#21 item 4, service/replay.py) through the CLI, on moto: the dry run's numbers are what the
run then does; a run pauses after --limit and continues with --run ID; each item's history names the run; the
rate is kept; nothing is booked twice. The concurrent 200- and 10,000-item simulations: test_bulk_replay_sim.py."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from tally import bootstrap
from tally.service.queue import QueueError, parse_filter
from tally.service.replay import BulkReplay
from tally.store.replay import ReplayStore

from tests.integration.queue_helpers import orphan_payments


@pytest.fixture
def cli(h, tmp_path, monkeypatch, capsys):
    from tally_cli.main import main

    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)

    def run(*argv, expect=0):
        capsys.readouterr()
        code = main([*argv, "--local"])
        out = capsys.readouterr()
        assert code == expect, (argv, code, out.out[-2000:], out.err[-2000:])
        return json.loads(out.out) if "--json" in argv else out.out

    return run


def ledger_by_order(h) -> Counter:
    return Counter(str(r.get("out_trade_no")) for r in h.scan("LEDGER_TABLE"))


def test_r41_bulk_replay_dry_run_equals_the_run_paused_continued_audited_and_booked_once(h, cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    other = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    numbers = orphan_payments(h, m["mchid"], 6, "BULK")
    orphan_payments(h, other["mchid"], 2, "OTHER")  # not selected by the filter: left alone
    selector = f"kind=unbooked,merchant={m['mchid']},since=2020-01-01"
    before = bootstrap.work_queue().list()

    dry = cli("manual", "replay", "--filter", selector, "--dry-run", "--json")
    assert (dry["would_change"], dry["amount_cent"], dry["amount"]) == (6, 615, "6.15")
    assert [i["id"] for i in bootstrap.work_queue().list()] == [i["id"] for i in before]  # nothing changed
    text = cli("manual", "replay", "--filter", selector, "--dry-run")
    assert "would replay 6 of 6 item(s), ¥6.15 in all (dry run: nothing changed)" in text

    first = cli(
        "manual",
        "replay",
        "--filter",
        selector,
        "--by",
        "ops",
        "--why",
        "orders created",
        "--limit",
        "4",
        "--json",
    )
    run_id = first["run_id"]
    assert first["status"] == "PAUSED" and first["this_call"]["changed"] == 4
    assert (first["planned_items"], first["planned_cent"]) == (dry["would_change"], dry["amount_cent"])
    done = cli("manual", "replay", "--run", run_id, "--json")
    assert done["status"] == "DONE" and done["this_call"]["changed"] == 2
    assert (done["done_items"], done["done_cent"], done["failed_items"]) == (6, 615, 0)  # = the dry run
    again = cli("manual", "replay", "--run", run_id, "--json")
    assert again["this_call"]["changed"] == 0 and again["done_items"] == 6

    h.drain()
    booked = ledger_by_order(h)
    assert all(booked[no] == 1 for no in numbers), booked  # each once
    assert all(h.order(m["mchid"], no)["status"] == "PAID" for no in numbers)
    assert [i["merchant"] for i in bootstrap.work_queue().list(f"merchant={other['mchid']}")] == [
        other["mchid"]
    ] * 2
    for item in before:
        if item["merchant"] == m["mchid"]:
            row = bootstrap.work_queue().get(item["id"])["source"]
            assert any(
                h_["by"] == "ops" and f"bulk replay run {run_id}" in h_["why"] for h_ in row["history"]
            ), row["history"]


def test_r41_a_bulk_replay_refuses_without_who_and_why_and_a_bad_filter_stores_nothing(h, cli):
    with pytest.raises(QueueError):
        parse_filter("since=yesterday-ish")
    out = cli("manual", "replay", "--filter", "kind=unbooked", "--by", "ops", "--why", "", "--json", expect=1)
    assert "say who you are" in out["error"]
    out = cli("manual", "replay", "--run", "r-no-such-run", "--json", expect=1)
    assert "no replay run" in out["error"]


def test_r41_a_run_s_set_is_fixed_when_it_starts_and_its_rate_is_kept(h):
    """Items arriving after the start are not the run's (the dry run did not show them); N items at R a
    second take (N-1)/R seconds of the run's own clock."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    orphan_payments(h, m["mchid"], 5, "RATE")
    fake = {"t": __import__("time").time()}
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        fake["t"] += s

    runs = BulkReplay(
        bootstrap.work_queue(),
        ReplayStore(bootstrap.tables().ddb, bootstrap.settings().notify_event_table),
        clock=lambda: fake["t"],
        sleep=sleep,
    )
    result = runs.start(f"kind=unbooked,merchant={m['mchid']}", by="ops", why="rate", rate=2.0, limit=3)
    assert result["this_call"]["changed"] == 3 and abs(sum(waits) - 1.0) < 0.01  # 3 items at 2/s: 1 s
    orphan_payments(h, m["mchid"], 1, "LATE")  # arrives after the run started
    rest = runs.resume(result["run_id"])
    assert rest["status"] == "DONE" and rest["done_items"] == 5 == rest["planned_items"]
    (late,) = bootstrap.work_queue().list(f"merchant={m['mchid']}")
    assert late["order"] == "LATE0000"  # not replayed: not in the run's set


def test_r41_the_console_s_bulk_replay_previews_what_the_cli_dry_run_says_and_runs_the_same_run(h, cli):
    """The queue page's bulk replay: its preview is the run's own preview (the numbers of `tally manual replay
    --filter … --dry-run`, whose command it prints); confirming starts a run, continued from the page."""
    from tally.console import actions
    from tally.console.auth import OPERATORS, Identity

    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    numbers = orphan_payments(h, m["mchid"], 3, "CONS")
    filters = {"kind": "unbooked-payment", "merchant": m["mchid"], "age": "< 1 h", "state": "", "owner": ""}
    preview = actions.bulk_preview(filters, "replay")
    text = actions.filter_text(filters)
    assert preview["cli"] == f"tally manual replay --filter '{text}' --dry-run"
    dry = cli("manual", "replay", "--filter", text, "--dry-run", "--json")
    keys = ("would_change", "amount_cent", "amount", "notifications", "by_kind", "matched")
    assert {k: preview[k] for k in keys} == {k: dry[k] for k in keys} and preview["count"] == 3

    alice = Identity("sub-1", "alice", frozenset({OPERATORS}), "jti-1")
    run = actions.replay_run(filters, alice, "orders created by support")
    assert run["status"] == "DONE" and (run["done_items"], run["done_cent"]) == (3, dry["amount_cent"])
    h.drain()
    assert all(h.order(m["mchid"], no)["status"] == "PAID" for no in numbers)
    assert bootstrap.bulk_replay().show(run["run_id"])["by"] == alice.who  # audited with the token's user


class _AnswerLost:
    """A DynamoDB client whose UpdateItem lands and then is sent again, as botocore resends a request whose
    answer timed out: the caller sees the second answer."""

    def __init__(self, ddb):
        self._ddb = ddb
        self.exceptions = ddb.exceptions

    def update_item(self, **request):
        self._ddb.update_item(**request)
        return self._ddb.update_item(**request)

    def __getattr__(self, name):
        return getattr(self._ddb, name)


def test_r41_a_run_s_progress_resent_after_a_lost_answer_is_counted_once(h):
    """Seen in the 200-item simulation on a loaded machine (2026-12-01): one run counted a batch of 25 twice
    (202 + 23 done of 200 items), because its ADD was resent after a read timeout. Each batch is added once."""
    store = ReplayStore(bootstrap.tables().ddb, bootstrap.settings().notify_event_table)
    store.create(
        {"run_id": "r-lost", "status": "RUNNING", "done_items": 0, "failed_items": 0, "done_cent": 0}, 0
    )
    store.ddb = _AnswerLost(store.ddb)
    first = store.progress(
        "r-lost", done=25, failed=1, cents=2_500, status="RUNNING", at="2026-12-01T19:00:00Z"
    )
    assert (first["done_items"], first["failed_items"], first["done_cent"]) == (25, 1, 2_500)
    second = store.progress("r-lost", done=3, cents=300, status="DONE", at="2026-12-01T19:00:01Z")
    assert (second["done_items"], second["failed_items"], second["done_cent"], second["status"]) == (
        28,
        1,
        2_800,
        "DONE",
    )
    assert store.get("r-lost")["done_items"] == 28
