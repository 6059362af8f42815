"""Console sign-in with TOTP for operators (docs/alerts.md "Hardening"), through the console handler and Cognito
on moto (its pool with MFA OPTIONAL and software tokens, as template.yaml configures it). An operator without
TOTP enrols at the next sign-in and from then on signs in with a code; a viewer is not asked. moto accepts any
six digits as a code (it does not compute TOTP), so what this proves is the flow, not the code's arithmetic."""

from __future__ import annotations

import re
import urllib.parse

import boto3
import pytest
from tally import bootstrap
from tally.store.users import ConsoleUsers

from tally_local.lambda_io import http_event


@pytest.fixture
def pool(h, monkeypatch):
    cognito = boto3.client("cognito-idp", region_name="us-east-1")
    policy = {"MinimumLength": 12, "RequireLowercase": True, "RequireUppercase": True, "RequireNumbers": True}
    pool_id = cognito.create_user_pool(
        PoolName="console-totp",
        MfaConfiguration="OPTIONAL",
        Policies={"PasswordPolicy": {**policy, "RequireSymbols": False}},  # template.yaml's
    )["UserPool"]["Id"]
    cognito.set_user_pool_mfa_config(
        UserPoolId=pool_id, MfaConfiguration="OPTIONAL", SoftwareTokenMfaConfiguration={"Enabled": True}
    )
    client_id = cognito.create_user_pool_client(
        UserPoolId=pool_id,
        ClientName="console",
        ExplicitAuthFlows=["ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
    )["UserPoolClient"]["ClientId"]
    for group in ("viewers", "operators"):
        cognito.create_group(UserPoolId=pool_id, GroupName=group)
    monkeypatch.setenv("CONSOLE_USER_POOL_ID", pool_id)
    monkeypatch.setenv("CONSOLE_CLIENT_ID", client_id)
    monkeypatch.setenv("CONSOLE_OPERATOR_MFA", "required")
    bootstrap.reset()
    yield ConsoleUsers(cognito, pool_id, client_id)
    bootstrap.reset()


def login(h, **form):
    body = urllib.parse.urlencode(form).encode()
    event = http_event(
        "POST",
        "/console/login",
        body,
        {"content-type": "application/x-www-form-urlencoded", "accept-language": "en"},
        {},
        base64_body=False,
    )
    response = h.invoke("ConsoleFunction", event)
    return response["statusCode"], response["body"]


def hidden(page: str, name: str) -> str:
    return re.search(rf'name="{name}" value="([^"]*)"', page).group(1)


def test_an_operator_enrols_totp_at_the_next_sign_in_then_signs_in_with_a_code(h, pool):
    password = pool.add("olga", "operators")
    status, page = login(h, username="olga", password=password)
    assert status == 200 and 'id="totp-enrol"' in page and "otpauth://totp/Tally:olga?secret=" in page
    status, page = login(h, enrol_token=hidden(page, "enrol_token"), code="123456")
    assert status == 200 and "authenticator app is set up" in page
    status, page = login(h, username="olga", password=password)
    assert status == 200 and 'id="totp-code"' in page and "enrol_token" not in page
    status, page = login(h, username="olga", mfa_session=hidden(page, "mfa_session"), code="654321")
    assert status == 200 and 'id="session"' in page and 'data-token="ey' in page
    status, _ = login(h, username="olga", mfa_session="not-a-session-of-cognito-at-all", code="000000")
    assert status == 401 and h.metric("ConsoleLoginFailed") == 1
    for forged in ({"mfa_session": "short", "code": "1"}, {"enrol_token": "not a token!", "code": "x"}):
        assert login(h, username="olga", **forged)[0] == 401  # hostile input: refused, never a 500


def test_a_viewer_signs_in_with_the_password_alone(h, pool):
    password = pool.add("vera", "viewers")
    status, page = login(h, username="vera", password=password)
    assert status == 200 and "totp" not in page and 'id="session"' in page
