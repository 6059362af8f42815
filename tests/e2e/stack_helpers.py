"""What the end-to-end test modules share (test modules never import from each other): the CLI against the
running stack's state file, plain HTTP, and waiting for a condition."""

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tally_local.sigv4 import signed_headers

ROOT = pathlib.Path(__file__).resolve().parents[2]
TALLY = str(pathlib.Path(sys.executable).with_name("tally"))


def cli(stack, *args):
    env = {**os.environ, "TALLY_STATE_DIR": str(stack.state_dir)}
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(var, None)  # the CLI must find the stack from the state file alone
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    # signed as a merchant backend signs (SigV4, the stack's fake credentials): the AWS_IAM routes refuse anything else
    headers = signed_headers(method, url, data, {"content-type": "application/json"})
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")
