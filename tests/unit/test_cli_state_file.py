"""`tally … --local` finds the embedded stack's state file: here, else the checkout's own, wherever the checkout
lives (it used to index four folders up from tally_cli/env.py: an IndexError, printed as "tally: 4", for a
checkout two folders below /)."""

from __future__ import annotations

import json
import pathlib

from tally_cli import env

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_checkout_state_file_is_the_project_folder_s():
    assert env.checkout_state_file() == ROOT / ".tally" / "local.json"


def test_a_state_file_in_the_current_folder_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("TALLY_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tally").mkdir()
    (tmp_path / ".tally" / "local.json").write_text(json.dumps({}))
    assert env.state_file() == pathlib.Path(".tally") / "local.json"


def test_from_another_folder_the_checkout_s_state_file_is_used_when_it_exists(tmp_path, monkeypatch):
    monkeypatch.delenv("TALLY_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    expected = (
        env.checkout_state_file() if env.checkout_state_file().exists() else pathlib.Path(".tally/local.json")
    )
    assert env.state_file() == expected
