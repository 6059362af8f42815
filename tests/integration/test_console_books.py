"""The console's Sealed books page (docs/console.md, docs/audit.md) on the embedded stack, through the console's
own router with a viewer's verified claims (finance reads and downloads; nothing here acts): a sealed day
reads sealed and verified, a day tampered with after its seal reads "does not match" with the first finding in
plain words, and the day's zip is the export folder, which the offline verify passes."""

from __future__ import annotations

import base64
import html
import io
import re
import time
import urllib.parse
import zipfile

import pytest
from tally.console import app
from tally.domain.journal import shanghai_day
from tally.service.audit import verify_export

from tests.integration.audit_helpers import change_ledger_amount, paid_and_sealed, pay, seal_tomorrow

VIEWER = {
    "sub": "sub-finance",
    "cognito:username": "finance-wang",
    "cognito:groups": "[viewers]",
    "jti": "jti-finance",
    "token_use": "id",
}


def console(page: str, language: str = "en", **query: str) -> dict:
    event = {
        "version": "2.0",
        "routeKey": "GET /console/{page}",
        "rawPath": f"/console/{page}",
        "headers": {"host": "console.test", "accept-language": language},
        "queryStringParameters": query or None,
        "pathParameters": {"page": page},
        "requestContext": {"http": {"method": "GET"}, "authorizer": {"jwt": {"claims": VIEWER}}},
        "isBase64Encoded": False,
    }
    return app.handle(event)


def text(answer: dict) -> str:
    """The page as plain text (tags dropped, the details toggles left out)."""
    body = re.sub(r"<details.*?</details>", "", answer["body"], flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def row(answer: dict, day: str, mchid: str) -> str:
    found = re.search(rf'<tr data-day="{day}" data-merchant="{mchid}"[^>]*>.*?</tr>', answer["body"], re.S)
    assert found, answer["body"][-3000:]
    return found.group(0)


@pytest.fixture
def m(h):
    return h.add_merchant()


def test_a_sealed_day_reads_sealed_and_verified_and_its_zip_verifies_offline(h, m, tmp_path):
    day = paid_and_sealed(h, m["mchid"])
    listed = console("books")
    assert listed["statusCode"] == 200
    mine = row(listed, day, m["mchid"])
    assert 'data-sealed="yes"' in mine and 'data-check="none"' in mine
    assert ">4<" in mine and "sealed" in mine  # three payments and the merchant's configuration, sealed
    assert "no records that day" in row(listed, shanghai_day(time.time() - 86400), "")
    assert len(set(re.findall(r'<tr data-day="([\d-]+)"', listed["body"]))) == 14

    page = console("books", date=day, merchant=m["mchid"])
    assert page["statusCode"] == 200 and 'data-verdict="verified"' in page["body"]
    assert "Verified" in text(page) and "4 records sealed" in text(page)

    got = console("books", date=day, format="zip")
    assert got["statusCode"] == 200 and got["headers"]["content-type"] == "application/zip"
    assert got["headers"]["content-disposition"] == f'attachment; filename="tally-books-{day}.zip"'
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(got["body"]))) as archive:
        names = archive.namelist()
        assert f"tally-books-{day}/day.json" in names and f"tally-books-{day}/{m['mchid']}/seal.json" in names
        archive.extractall(tmp_path)
    verdict = verify_export(tmp_path / f"tally-books-{day}")  # offline: only what the zip holds
    assert verdict.ok and verdict.records == 5  # the merchant's 4 and the test principal's grant

    one = console("books", date=day, merchant=m["mchid"], format="zip")
    assert f'filename="tally-books-{day}-{m["mchid"]}.zip"' in one["headers"]["content-disposition"]


def test_a_day_tampered_with_after_its_seal_reads_does_not_match_naming_the_first_finding(h, m):
    day = paid_and_sealed(h, m["mchid"])
    (entry, *_) = sorted(h.scan("LEDGER_TABLE"), key=lambda r: r["amount_cent"])
    change_ledger_amount(h, entry, 1)

    page = console("books", date=day, merchant=m["mchid"])
    assert 'data-verdict="mismatch"' in page["body"]
    plain = text(page)
    assert "Does not match" in plain and "was changed after it was recorded" in plain
    assert "amount_cent is 1, journaled 101" not in plain  # the technical finding: behind details
    assert "amount_cent is 1, journaled 101" in html.unescape(page["body"])

    listed = console("books")
    assert 'data-check="none"' in row(listed, day, m["mchid"])  # the daily check has not run again yet
    seal_tomorrow(h)  # the next run checks the sealed day again: a case, and the list says so
    mine = row(console("books"), day, m["mchid"])
    assert 'data-check="mismatch"' in mine and "does not match" in mine
    assert "was changed after it was recorded" in mine

    zh = text(console("books", "zh-CN", date=day, merchant=m["mchid"]))
    assert "不一致" in zh and "账簿封存" in zh


def test_a_day_not_closed_yet_reads_open_and_the_ledger_day_links_to_it(h, m):
    pay(h, m["mchid"], 150)
    assert h.drain() == []
    day = shanghai_day(time.time())
    page = console("books", date=day, merchant=m["mchid"])
    assert 'data-verdict="unsealed"' in page["body"] and "still open" in text(page)
    ledger = console("ledger", date=day, merchant=m["mchid"])
    assert html.unescape(
        f'href="/console/books?{urllib.parse.urlencode({"date": day, "merchant": m["mchid"]})}"'
    ) in html.unescape(ledger["body"])
    assert console("books", date="12/04")["statusCode"] == 400
