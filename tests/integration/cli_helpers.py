"""`tally … --local` against a test's own moto: the state file the CLI reads (the `cli` fixture of conftest.py)."""

from __future__ import annotations

import json


def local_cli_state(h, tmp_path, monkeypatch) -> None:
    """What `tally … --local` reads to find this test's moto (.tally/local.json in a state dir of its own)."""
    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
