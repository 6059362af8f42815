"""Headless Chromium (Debian's package, driven by Playwright) against the console on the embedded stack.

Installs nothing: without /usr/bin/chromium the tests FAIL with the command that installs it
(`make browser-deps`), so a CI without a browser is red, never silently green.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tally_local.demo import seed_demo
from tally_local.stack import EmbeddedStack

LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # else Chromium's own outbound connections are refused and stall it
    "--disable-component-update",
    "--disable-sync",
]
INSTALL = "apt-get update && apt-get install -y chromium chromium-driver   (as root; or: make browser-deps)"
SCREENSHOTS = Path(os.environ.get("TALLY_SCREENSHOTS", "")) if os.environ.get("TALLY_SCREENSHOTS") else None
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def chromium_path() -> str:
    found = os.environ.get("TALLY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        pytest.fail(f"Chromium is not installed, the console's browser tests cannot run: {INSTALL}")
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("state")
    running = EmbeddedStack(
        api_port=0, state_dir=state_dir, simulator_options={"fixed_keys": True}, schedule_scale=0
    )
    running.seed_demo = seed_demo
    with running:
        running.write_state()
        yield running


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: make venv (requirements-dev.txt pins it)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_FLAGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def new_page(browser):
    contexts = []

    def make(width: int = 1280, height: int = 900, locale: str = "en-US"):
        # the browser's language is its Accept-Language: English unless a test reads the console in Chinese
        context = browser.new_context(viewport={"width": width, "height": height}, locale=locale)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.dialogs = []  # anything that opens a dialog (alert from an injected script) is recorded
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
        return page

    yield make
    for context in contexts:
        context.close()


def sign_in(page, stack, who: str = "operator"):
    page.goto(stack.api_url + "/console/login")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", stack.console_logins[who])
    page.click("button[type=submit]")
    page.wait_for_url(stack.api_url + "/console")
    page.wait_for_selector("#morning-number")
    return page


def morning_total(page) -> int:
    return int(page.get_attribute("#morning-number b", "data-total"))


def shot(page, name: str) -> None:
    """With TALLY_SCREENSHOTS=dir, keep a PNG of the page (docs/console.md shows them)."""
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def token_for(stack, who: str) -> str:
    """An ID token from the pool, the way the sign-in form gets one (for the direct-HTTP checks)."""
    from tally import bootstrap

    return bootstrap.console_users().sign_in(who, stack.console_logins[who]).id_token


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=20) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def sim_post(stack, path: str, body: dict) -> tuple[int, bytes]:
    status, _, data = http(
        "POST", stack.simulator_url + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    return status, data


def audit_bucket_call(operation: str, params: dict) -> tuple[str, str]:
    """An S3 call on the audit bucket as IAM authorises it: a listing is ListBucket on the bucket, a read of a
    version GetObjectVersion, a HeadObject GetObject (on its objects)."""
    if operation in ("ListObjectsV2", "ListObjects"):
        return "s3:ListBucket", "AuditBucket"
    if operation == "ListObjectVersions":
        return "s3:ListBucketVersions", "AuditBucket"
    if operation in ("GetObject", "HeadObject") and "versionId" in (params.get("query_string") or {}):
        return "s3:GetObjectVersion", "AuditBucket/*"
    return ("s3:GetObject" if operation == "HeadObject" else f"s3:{operation}"), "AuditBucket/*"


@pytest.fixture(scope="module", autouse=True)
def console_calls(stack):
    """Every AWS call the console function makes while the tests click: (IAM action, resource), as IAM
    authorises them (a transaction item by item), so a test can hold them against the template's policy."""
    import threading

    from tally import bootstrap

    names = {value: key for key, value in stack.env.items()}
    logical = {
        env: "".join(part.capitalize() for part in env.removesuffix("_TABLE").split("_")) + "Table"
        for env in names.values()
        if env.endswith("_TABLE")
    }
    state = threading.local()
    calls: set[tuple[str, str]] = set()

    def seen(model, params, **_):
        if not getattr(state, "console", False):
            return
        service = model.service_model.endpoint_prefix
        if service == "dynamodb":
            request = json.loads(params.get("body") or b"{}")
            items = [
                (f"{kind}Item" if kind != "ConditionCheck" else "ConditionCheckItem", op)
                for entry in request.get("TransactItems", [])
                for kind, op in entry.items()
            ] or [(model.name, {"TableName": name}) for name in request.get("RequestItems", {})]  # a batch
            items = items or [(model.name, request)]
            for action, op in items:
                table = logical[names[op["TableName"]]]
                index = op.get("IndexName")
                calls.add((f"dynamodb:{action}", f"{table}/index/{index}" if index else table))
        elif service == "s3":
            # auth_path is "/<bucket>/<key>" whichever addressing style the request used (url_path may hold the key only)
            bucket, _, key = (
                str(params.get("auth_path") or params.get("url_path", "")).lstrip("/").partition("/")
            )
            if bucket == stack.env.get("AUDIT_BUCKET"):  # the sealed books (docs/audit.md)
                calls.add(audit_bucket_call(model.name, params))
            else:
                calls.add((f"s3:{model.name}", "BillsBucket/" + key.split("/", 1)[0] + "/*"))
        elif service == "kms":
            calls.add((f"kms:{model.name}", "AuditKey"))
        elif service == "sqs":
            calls.add((f"sqs:{model.name}", "ApplyQueue"))
        elif service == "secretsmanager":
            calls.add((f"secretsmanager:{model.name}", "secret:tally/${AWS::StackName}/merchants/*"))
        else:
            calls.add((f"{service}:{model.name}", service))

    watched = ("dynamodb", "sqs", "secretsmanager", "s3", "kms", "cognito-idp")
    for service in watched:
        bootstrap._client(service).meta.events.register("before-call", seen)
    # a test that moves bootstrap's clock (set_clock → reset) makes bootstrap build new clients: they copy the
    # default session's events, so the recorder is there too and keeps seeing the console's calls
    import boto3

    for service in watched:
        boto3._get_default_session()._session.register(f"before-call.{service}", seen)
    for route in stack.front_door.routes:
        target = route.target
        if target.function_name == "ConsoleFunction" and not getattr(target, "_recorded", False):
            inner = target.handler

            def wrapped(event, context, _inner=inner):
                state.console = True
                try:
                    return _inner(event, context)
                finally:
                    state.console = False

            target.handler, target._recorded = wrapped, True
    return calls
