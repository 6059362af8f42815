"""The console's auth in the template as CloudFormation will deploy it (the strict SAM transform)."""

from __future__ import annotations

import json

import pytest

from tally_local.resources import load_template
from tests.integration.template_helpers import TEMPLATE, sam_transform

OPEN = {("get", "/console/login"), ("post", "/console/login"), ("get", "/console/static/{file}")}


@pytest.fixture(scope="module")
def transformed():
    return sam_transform(load_template(TEMPLATE), "us-east-1")


def _openapi(transformed):
    apis = [r for r in transformed["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Api"]
    assert len(apis) == 1
    return apis[0]["Properties"]["Body"]


def test_every_console_route_needs_the_cognito_jwt_but_sign_in_and_static(transformed):
    body = _openapi(transformed)
    console = {
        (method, path): op
        for path, ops in body["paths"].items()
        if path.startswith("/console")
        for method, op in _unwrap(ops).items()
        if method != "parameters"
    }
    console = {key: _unwrap(op) for key, op in console.items()}
    assert set(console) == OPEN | {
        ("get", "/console"),
        ("get", "/console/{page}"),
        ("post", "/console/{page}"),
    }
    for key, op in console.items():
        security = op.get("security")
        if key in OPEN:
            assert security in (None, [], [{"NONE": []}]), key  # Authorizer: NONE
        else:
            assert security == [{"ConsoleJwt": []}], key  # no valid token: API Gateway answers 401
    scheme = body["components"]["securitySchemes"]["ConsoleJwt"]
    authorizer = scheme["x-amazon-apigateway-authorizer"]
    assert authorizer["type"] == "jwt"
    assert authorizer["identitySource"] == "$request.header.Authorization"
    assert authorizer["jwtConfiguration"]["audience"] == [
        {"Fn::If": ["HasConsole", {"Ref": "ConsoleUserPoolClient"}, "no-console"]}
    ]
    assert "ConsoleUserPool" in json.dumps(authorizer["jwtConfiguration"]["issuer"])


def _unwrap(ops):
    """A conditional function's paths come as Fn::If [HasConsole, {operations}, AWS::NoValue]."""
    if isinstance(ops, dict) and "Fn::If" in ops:
        condition, present, absent = ops["Fn::If"]
        assert condition == "HasConsole" and absent == {"Ref": "AWS::NoValue"}
        return present
    return ops


def test_the_other_routes_keep_their_auth(transformed):
    body = _openapi(transformed)
    assert body["paths"]["/orders"]["post"]["security"] == [{"AWS_IAM": []}]
    assert body["paths"]["/notify/wechatpay/{mchid}"]["post"]["security"] == [{"NONE": []}]


def test_the_pool_admits_only_people_an_admin_adds_and_has_the_two_groups(transformed):
    resources = transformed["Resources"]
    pool = resources["ConsoleUserPool"]["Properties"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    assert pool["Policies"]["PasswordPolicy"]["MinimumLength"] >= 12
    client = resources["ConsoleUserPoolClient"]["Properties"]
    assert client["GenerateSecret"] is False and client["PreventUserExistenceErrors"] == "ENABLED"
    groups = {
        r["Properties"]["GroupName"] for r in resources.values() if r["Type"] == "AWS::Cognito::UserPoolGroup"
    }
    assert groups == {"viewers", "operators"}


def test_no_console_in_china_where_cognito_user_pools_do_not_exist(transformed):
    china = sam_transform(load_template(TEMPLATE), "cn-north-1")
    assert china["Resources"]["ConsoleUserPool"]["Condition"] == "HasConsole"
    assert china["Resources"]["ConsoleFunction"]["Condition"] == "HasConsole"
