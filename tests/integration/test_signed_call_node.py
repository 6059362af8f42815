"""examples/node/signed_call.mjs (docs/deploy.md "Calling the API"): a Node backend signs with the AWS SDK's own
SigV4 signer (from the npm registry, `make node-deps`), and the front door's IAM check (tally_local/sigv4.py, API
Gateway's rules) lets it in as its role over real HTTP; a wrong secret is refused 403 as on AWS; without
credentials the example says what to set instead of a stack trace."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import subprocess

import pytest

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples/node"
ROLE = "arn:aws-cn:iam::123456789012:role/shop-backend"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (.ci/run installs it)"
)


def run_example(url: str, **env: str) -> subprocess.CompletedProcess:
    assert (EXAMPLE / "node_modules/@smithy/signature-v4").is_dir(), "run `make node-deps` (make test does)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(
        ["node", "signed_call.mjs"],
        cwd=EXAMPLE,
        env={**clean, "TALLY_API_URL": url, "AWS_REGION": "cn-north-1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def door():
    from tally_local.frontdoor import FrontDoor
    from tally_local.sigv4 import IamAuthorizer

    seen: dict = {}

    def orders(event, context):
        seen["event"] = event
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/json"},
            "body": '{"status":"WAIT_PAY"}',
        }

    iam = IamAuthorizer("cn-north-1")
    iam.add("AKIDEXAMPLE", "secret", ROLE)
    front = FrontDoor({"POST /orders": orders}, authorizers={"POST /orders": iam}).start()
    front.seen = seen
    yield front
    front.stop()


def test_the_node_example_signs_with_the_sdk_signer_and_passes_the_iam_check(door):
    done = run_example(door.url, AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secret")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '201 {"status":"WAIT_PAY"}'
    event = door.seen["event"]
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == ROLE  # the verified caller (R53)
    body = base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"]
    assert json.loads(body)["out_trade_no"] == "NODE000001"


def test_the_node_example_with_a_wrong_secret_is_refused_403(door):
    done = run_example(door.url, AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="not-the-secret")
    assert done.returncode == 1 and done.stdout.startswith("403 "), done.stdout + done.stderr
    assert "event" not in door.seen  # the function never ran


def test_the_node_example_without_credentials_says_what_to_set(door):
    done = run_example(door.url)
    assert done.returncode == 2
    assert "no AWS credentials" in done.stderr and "AWS_ACCESS_KEY_ID" in done.stderr
    assert "\n    at " not in done.stderr and "Error" not in done.stderr  # a sentence, not a stack trace
