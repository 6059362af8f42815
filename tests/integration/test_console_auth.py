"""The console's front door on the embedded stack: the JWT check API Gateway's authorizer does, then the
console's own refusals (viewers, CSRF, other origins). Tokens come from Cognito on moto, or are minted
here with the pool's signing key to make them expired, foreign or forged."""

from __future__ import annotations

import json
import time
import urllib.parse

import pytest
from tally.console.auth import csrf_token, identity

from tally_local.stack import EmbeddedStack
from tests.browser.conftest import http, token_for

FORM = {"content-type": "application/x-www-form-urlencoded"}
pytestmark = (
    pytest.mark.e2e
)  # the embedded stack over HTTP: make test runs it, make check's fast lane does not


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with EmbeddedStack(api_port=0, state_dir=tmp_path_factory.mktemp("state"), schedule_scale=0) as running:
        running.write_state()
        yield running


def _claims(token: str) -> dict:
    import base64

    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _mint(claims: dict, alg: str = "RS256") -> str:
    """A token signed with moto's pool key (the one its JWKS publishes): valid signature, chosen claims."""
    from joserfc import jwk, jwt
    from moto.utilities.utils import load_resource

    key = jwk.RSAKey.import_key(load_resource("moto.cognitoidp", "resources/jwks-private.json"))
    return jwt.encode({"alg": alg, "kid": "dummy"}, claims, key)


def _get(stack, path: str, token: str | None = None):
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return http("GET", stack.api_url + path, headers={**headers, "accept-language": "en"})


def _post(stack, path: str, form: dict, token: str | None = None, **extra: str):
    headers = {
        **FORM,
        "accept-language": "en",
        **({"authorization": f"Bearer {token}"} if token else {}),
        **extra,
    }
    return http("POST", stack.api_url + path, urllib.parse.urlencode(form).encode(), headers)


@pytest.mark.parametrize("path", ["/console", "/console/queue", "/console/ledger"])
def test_console_pages_refuse_a_request_without_a_token_401(stack, path):
    status, _, body = _get(stack, path)
    assert status == 401 and json.loads(body) == {"message": "Unauthorized"}


def test_a_post_without_a_token_is_401_and_reaches_no_function(stack):
    status, _, _ = _post(stack, "/console/act", {"id": "raw:x", "action": "resolve", "reason": "r"})
    assert status == 401


def test_a_valid_token_opens_the_pages_with_csp_and_no_caching(stack):
    status, headers, body = _get(stack, "/console", token_for(stack, "viewer"))
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["cache-control"] == "no-store" and headers["x-content-type-options"] == "nosniff"
    assert b'id="morning-number"' in body


def test_forged_expired_foreign_tokens_are_401(stack):
    good = token_for(stack, "operator")
    claims = _claims(good)
    head, payload, signature = good.split(".")
    tampered = ".".join(
        [head, payload, signature[:-6] + ("AAAAAA" if not signature.endswith("AAAAAA") else "BBBBBB")]
    )
    more_groups = _claims(good) | {"cognito:groups": ["operators"], "sub": "someone-else"}
    import base64

    forged_payload = base64.urlsafe_b64encode(json.dumps(more_groups).encode()).decode().rstrip("=")
    now = int(time.time())
    for token in (
        tampered,
        f"{head}.{forged_payload}.{signature}",  # claims changed under the old signature
        _mint(claims | {"exp": now - 10, "iat": now - 3610}),  # expired
        _mint(claims | {"aud": "another-client"}),  # another app's token
        _mint(claims | {"iss": claims["iss"].rsplit("/", 1)[0] + "/us-east-1_other"}),  # another pool
        _mint(claims | {"nbf": now + 600}),  # not valid yet
        "not-a-jwt",
    ):
        assert _get(stack, "/console", token)[0] == 401, token
    assert _get(stack, "/console", _mint(claims))[0] == 200  # the minting itself is sound


def test_r_viewer_post_is_refused_403_even_with_its_own_csrf_token(stack):
    token = token_for(stack, "viewer")
    who = identity({"requestContext": {"authorizer": {"jwt": {"claims": _claims(token)}}}})
    status, _, body = _post(
        stack,
        "/console/act",
        {"id": "raw:x", "action": "resolve", "reason": "r", "csrf": csrf_token(who)},
        token,
    )
    assert status == 403 and b"Viewers cannot act" in body


def test_an_operator_post_needs_the_csrf_token_of_its_own_session(stack):
    token = token_for(stack, "operator")
    other = token_for(stack, "operator")  # a second sign-in: another jti, another CSRF token
    who_other = identity({"requestContext": {"authorizer": {"jwt": {"claims": _claims(other)}}}})
    form = {"id": "raw:wechatpay#none", "action": "resolve", "reason": "r"}
    assert _post(stack, "/console/act", form, token)[0] == 403  # no token in the form
    assert _post(stack, "/console/act", form | {"csrf": csrf_token(who_other)}, token)[0] == 403
    who = identity({"requestContext": {"authorizer": {"jwt": {"claims": _claims(token)}}}})
    good = form | {"csrf": csrf_token(who)}
    assert _post(stack, "/console/act", good, token, origin="https://evil.example")[0] == 403
    status, _, body = _post(stack, "/console/act", good, token)
    assert status == 409 and b"Not done" in body  # accepted as a request; the service refused the unknown id


def test_sign_in_with_a_wrong_password_is_401_and_names_neither_user_nor_password(stack):
    status, _, body = _post(stack, "/console/login", {"username": "operator", "password": "Wrong-password-1"})
    assert status == 401 and b"Wrong user name or password" in body
    status, _, body = _post(stack, "/console/login", {"username": "nobody", "password": "Wrong-password-1"})
    assert status == 401 and b"Wrong user name or password" in body


def test_sign_in_redirects_only_inside_the_console(stack):
    password = stack.console_logins["operator"]
    for target, expected in (
        ("https://evil.example/x", "/console"),
        ("//evil", "/console"),
        ("/console/queue", "/console/queue"),
    ):
        status, _, body = _post(
            stack, "/console/login", {"username": "operator", "password": password, "next": target}
        )
        assert status == 200 and f'data-next="{expected}"'.encode() in body


def test_static_files_are_open_and_only_the_console_s_own(stack):
    assert _get(stack, "/console/static/console.css")[0] == 200
    status, headers, _ = _get(stack, "/console/static/sw.js")
    assert status == 200 and headers["service-worker-allowed"] == "/console"
    assert _get(stack, "/console/static/..%2Fapp.py")[0] == 404
    assert _get(stack, "/console/static/app.py")[0] == 404


def test_tally_console_add_user_creates_an_operator_who_can_sign_in(stack):
    import os
    import pathlib
    import subprocess
    import sys

    tally = str(pathlib.Path(sys.executable).with_name("tally"))
    env = {**os.environ, "TALLY_STATE_DIR": str(stack.state_dir)}
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(var, None)  # the CLI finds the stack from the state file alone
    done = subprocess.run(
        [tally, "console", "add-user", "alice", "--group", "operators", "--local", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["group"] == "operators" and answer["url"].endswith("/console/login")
    status, _, body = _post(stack, "/console/login", {"username": "alice", "password": answer["password"]})
    assert status == 200 and b"data-token=" in body
    token = body.split(b'data-token="')[1].split(b'"')[0].decode()
    assert _claims(token)["cognito:groups"] == ["operators"]
    assert _get(stack, "/console", token)[0] == 200


def test_a_cross_site_sign_in_is_refused_login_csrf(stack):
    """Issue #38 finding 11 (login CSRF): a form on another site posting the attacker's own credentials to
    /console/login signed the victim's browser in as the attacker. Sign-in checks Origin like every action."""
    password = stack.console_logins["operator"]
    form = {"username": "operator", "password": password}
    status, _, body = _post(stack, "/console/login", form, origin="https://evil.example")
    assert status == 403 and b"another site" in body and b"data-token" not in body
    status, _, body = _post(stack, "/console/login", form, **{"sec-fetch-site": "cross-site"})
    assert status == 403
    assert _post(stack, "/console/login", form)[0] == 200  # from the console itself: signed in


def test_a_demoted_operator_cannot_act_and_a_disabled_user_opens_nothing_with_its_old_token(stack):
    """Issue #38 finding 12: the groups in a token were trusted for its whole hour. An action now reads the
    user's groups from the pool: an operator moved to viewers is refused at once with the token it had; a
    disabled user's token opens no page."""
    from tally import bootstrap

    users = bootstrap.console_users()
    password = users.add("carol", "operators")
    token = users.sign_in("carol", password).id_token
    who = identity({"requestContext": {"authorizer": {"jwt": {"claims": _claims(token)}}}})
    form = {"id": "raw:wechatpay#none", "action": "resolve", "reason": "r", "csrf": csrf_token(who)}
    assert _post(stack, "/console/act", form, token)[0] == 409  # an operator: the request is taken
    users.add("carol", "viewers", password=password)  # demoted
    status, _, body = _post(stack, "/console/act", form, token)
    assert status == 403 and b"Viewers cannot act" in body
    users.cognito.admin_disable_user(UserPoolId=users.pool, Username="carol")
    status, _, _ = _post(stack, "/console/act", form, token)
    assert status == 401
