"""Merchants as people know them (issue #31): `tally merchant set … --name` stores a display name on the merchant's
row (store/tables.py), a later `merchant add` without --name keeps it, and the console shows it next to the id
wherever a merchant appears (the Merchants page, the queue, in both languages)."""

from __future__ import annotations

import random

from tally import bootstrap
from tally.console import app
from tally.store.tables import MerchantStore

CLAIMS = {"sub": "sub-ops", "cognito:username": "alice", "cognito:groups": "[operators]", "token_use": "id"}


def console(page: str, accept_language: str) -> str:
    event = {
        "version": "2.0",
        "routeKey": "GET /console/{page}",
        "rawPath": f"/console/{page}",
        "headers": {"host": "console.test", "accept-language": accept_language},
        "queryStringParameters": None,
        "pathParameters": {"page": page},
        "requestContext": {"http": {"method": "GET"}, "authorizer": {"jwt": {"claims": CLAIMS}}},
        "body": "",
        "isBase64Encoded": False,
    }
    answer = app.handle(event)
    assert answer["statusCode"] == 200, answer.get("body", "")[:500]
    return answer["body"]


def test_a_display_name_set_from_the_cli_is_kept_and_shown_next_to_the_id(h, tally_cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    mchid = m["mchid"]
    assert "上海一号便利店" in tally_cli("merchant", "set", "wechatpay", mchid, "--name", "上海一号便利店")
    store = MerchantStore(bootstrap.tables())
    assert store.names()[mchid] == "上海一号便利店"
    row = store.get("wechatpay", mchid)
    assert row is not None
    store.put({k: v for k, v in row.items() if k != "display_name"})  # a re-add without --name
    assert store.names()[mchid] == "上海一号便利店"
    for language, header in (("zh-CN", "商户"), ("en", "Merchants")):
        page = console("merchants", language)
        assert (
            header in page
            and '<span class="mname">上海一号便利店</span> <small class="mchid">' + mchid in page
        )
    tally_cli("merchant", "set", "wechatpay", mchid, "--name", "", expect=1)  # an empty name is refused


def test_merchant_add_with_a_name_stores_it(h, tally_cli):
    mchid = str(random.randrange(10**9, 10**10))
    tally_cli(
        "merchant",
        "add",
        "wechatpay-v2",
        "--mchid",
        mchid,
        "--api-key",
        "k" * 32,
        "--name",
        "北京二号店",
        "--no-check",
    )
    assert MerchantStore(bootstrap.tables()).names()[mchid] == "北京二号店"
