"""The console's pure parts: claims as API Gateway passes them, CSRF, redaction, escaping."""

from __future__ import annotations

import json

from tally.console.auth import csrf_ok, csrf_token, identity, parse_groups
from tally.service.shown import redact_body


def _event(**claims):
    return {"requestContext": {"authorizer": {"jwt": {"claims": claims}}}}


def test_groups_as_the_http_api_flattens_them_and_only_the_two_known_ones():
    assert parse_groups("[operators viewers]") == {"operators", "viewers"}
    assert parse_groups(["viewers"]) == {"viewers"}
    assert parse_groups("[admins root]") == frozenset()
    assert parse_groups(None) == frozenset()


def test_identity_comes_from_claims_only_and_an_access_token_is_no_page_view():
    who = identity(
        _event(sub="s-1", **{"cognito:username": "alice", "cognito:groups": "[operators]"}, jti="j")
    )
    assert who and who.can_act and who.who == "alice (s-1)"
    assert identity({"headers": {"x-user": "admin"}}) is None  # a header names nobody
    assert identity(_event(sub="s-1", token_use="access", **{"cognito:groups": "[operators]"})) is None


def test_csrf_token_is_bound_to_the_token_and_refused_without_one():
    a = identity(_event(sub="s", jti="one", **{"cognito:groups": "[operators]"}))
    b = identity(_event(sub="s", jti="two", **{"cognito:groups": "[operators]"}))
    assert csrf_ok(a, csrf_token(a)) and not csrf_ok(a, csrf_token(b)) and not csrf_ok(a, "")
    no_jti = identity(_event(sub="s", **{"cognito:groups": "[operators]"}))
    assert csrf_token(no_jti) == "" and not csrf_ok(no_jti, "")


def test_ciphertext_is_never_shown_wechat_v3_json_and_v2_req_info():
    body = json.dumps({"id": "x", "resource": {"ciphertext": "SECRETBYTES" * 10, "nonce": "n"}})
    shown = redact_body(body)
    assert "SECRETBYTES" not in shown and "110 characters, not shown" in shown and '"nonce": "n"' in shown
    xml = "<xml><return_code>SUCCESS</return_code><req_info><![CDATA[ENCRYPTED==]]></req_info></xml>"
    assert "ENCRYPTED" not in redact_body(xml) and "<return_code>SUCCESS" in redact_body(xml)
    assert redact_body("<script>alert(1)</script>") == "<script>alert(1)</script>"  # text stays text


def test_every_template_escapes_what_it_is_given():
    from tally.console.app import _env

    html = _env.from_string("{{ v }}").render(v='"><img src=x onerror=alert(1)><script>x</script>')
    assert "<img" not in html and "<script" not in html and "&lt;script&gt;" in html


def test_stuck_rows_are_read_from_the_pending_report_as_it_names_them(monkeypatch):
    from tally import bootstrap
    from tally.console import data

    class Report:
        def report(self, limit):
            line = {
                "key": "wechatpay#42",
                "channel": "wechatpay",
                "merchant": "m",
                "order": "o",
                "age_s": 900,
            }
            return {"rows": [{**line, "kind": "stuck-notification"}, {**line, "kind": "unbooked-payment"}]}

    monkeypatch.setattr(bootstrap, "pending_report", lambda: Report())
    (stuck,) = data.stuck_rows()
    assert stuck.stuck and stuck.order == "o" and stuck.age == "15 min"
