"""A person's console language is the Cognito standard attribute `locale` (docs/language.md), stored with
AdminUpdateUserAttributes through store/users.py on moto, and chosen before the browser's Accept-Language."""

from __future__ import annotations

import boto3
from tally.console import lang
from tally.console.auth import Identity
from tally.console.web import Request
from tally.store.users import ConsoleUsers


def test_the_locale_attribute_is_stored_read_back_and_beats_the_browser(h, monkeypatch):
    from tally import bootstrap

    cognito = boto3.client("cognito-idp", region_name="us-east-1")
    pool_id = cognito.create_user_pool(PoolName="console-language")["UserPool"]["Id"]
    client_id = cognito.create_user_pool_client(UserPoolId=pool_id, ClientName="console")["UserPoolClient"][
        "ClientId"
    ]
    for group in ("viewers", "operators"):
        cognito.create_group(UserPoolId=pool_id, GroupName=group)
    monkeypatch.setenv("CONSOLE_USER_POOL_ID", pool_id)
    monkeypatch.setenv("CONSOLE_CLIENT_ID", client_id)
    bootstrap.reset()
    users = ConsoleUsers(cognito, pool_id, client_id)
    users.add("mei", "viewers", password="Mei-Pass-2026-ok!")
    assert users.locale("mei") is None
    who = Identity(sub="s-1", username="mei", groups=frozenset({"viewers"}), token_id="j")
    english_browser = Request("GET", "", {}, {}, {"accept-language": "en-US,en;q=0.9"}, "/console")
    assert lang.choose(english_browser, who).lang == "en"
    assert lang.set_user_language(who, "zh_CN.UTF-8") == "zh-CN"
    assert users.locale("mei") == "zh-CN"  # in the pool, for every container and the next token
    lang._locales.clear()  # another container: reads the pool
    assert lang.choose(english_browser, who).lang == "zh_CN"
    bootstrap.reset()
