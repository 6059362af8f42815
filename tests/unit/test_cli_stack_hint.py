"""A person who runs `tally …` without --local next to a running embedded stack is told to add it, instead of
being left with boto3's "You must specify a region" (found trying the morning routine from a fresh clone)."""

from __future__ import annotations

import json

import pytest

from tally_cli import env


def test_a_missing_stack_next_to_a_running_local_stack_says_add_local(tmp_path, monkeypatch):
    (tmp_path / "local.json").write_text(json.dumps({"env": {}, "endpoint_url": "http://127.0.0.1:1"}))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    for var in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(env.StackNotFound, match="add --local"):
        env.describe_stack("tally")


def test_without_a_local_stack_the_error_is_only_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    for var in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(env.StackNotFound) as caught:
        env.describe_stack("tally")
    assert "--local" not in str(caught.value)
