"""The console's router: one function per page, each reading data.py and rendering one template.

GET pages need a verified identity in `viewers` or `operators`; POST actions need `operators` and the
CSRF token of the page the form came from. The sign-in page and static files are the only open routes.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from tally import bootstrap
from tally.apigw import BadRequest
from tally.channels import registry as channel_registry
from tally.console import actions, data, lang
from tally.console.auth import Identity, as_now, csrf_ok, csrf_token, identity
from tally.console.web import Request, Response, link, redirect
from tally.i18n.words import Words
from tally.i18n.words import cst as words_cst
from tally.observability import M, count, logger

HERE = Path(__file__).resolve().parent
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],  # {% trans %} and _(): the page's language (console/lang.py)
)
_env.policies["ext.i18n.trimmed"] = True
LANGUAGE_NAMES = {
    "zh-CN": "简体中文",
    "en": "English",
}  # each in its own language, as language menus show them


def fact(key: Any, value: Any) -> str:
    """A stored value as a page shows it, even behind a details toggle: "—" for nothing, a time (ISO or epoch
    seconds, as `expire_at` is stored) in Asia/Shanghai, anything else as its text."""
    if value is None or value == "":
        return "—"
    name = str(key)
    if name.endswith(("_at", "_due")) or "expire" in name:
        return words_cst(value) or str(value)
    return str(value)


_env.globals.update(
    link=link, yuan=data.yuan, cst=data.cst, fact=fact, BUCKETS=data.BUCKETS, ACTIONS=actions.ACTIONS
)
_env.globals["live_incidents"] = lambda: incident_rows(
    live_only=True
)  # the Morning page's block (docs/alerts.md)


def _(message: str) -> str:
    """A message of this module in the page's language (console/lang.py; Babel extracts `_`)."""
    return lang.current().gettext(message)


def _names() -> Callable[[Any], str]:
    """The page's merchant display names, read at most once per page and only if the page shows a merchant."""
    found: dict[str, str] | None = None

    def name(mchid: Any) -> str:
        nonlocal found
        if found is None:
            try:
                found = data.merchant_names()
            except Exception:  # noqa: BLE001 - a page shows ids without names rather than fail
                logger.warning("merchant names not read", exc_info=True)
                found = {}
        return found.get(str(mchid or ""), "")

    return name


def render(template: str, who: Identity | None, status: int = 200, **context: Any) -> Response:
    speaker = lang.current()
    context.setdefault("message_detail", "")
    html = _env.get_template(template).render(
        mname=_names(),
        who=who,
        csrf=csrf_token(who) if who else "",
        gettext=speaker.gettext,
        ngettext=speaker.ngettext,
        lang_tag=speaker.tag,
        w=Words(speaker),
        LANGUAGE_NAMES=LANGUAGE_NAMES,
        **context,
    )
    return Response(status, html)


def handle(event: dict[str, Any]) -> dict[str, Any]:
    try:
        request = Request.from_event(event)
    except BadRequest as exc:
        return Response(400, f"bad request: {exc}", "text/plain; charset=utf-8").to_event()
    route_key = str(event.get("routeKey") or "")
    if route_key.endswith("/console/static/{file}") or request.path.startswith("/console/static/"):
        return static(request.page).to_event()
    lang.choose(request, None)
    if request.page == "login":
        return (login_post(request) if request.method == "POST" else login_page(request)).to_event()
    who = identity(event)
    if who is None:  # API Gateway answers 401 before us; this is the same answer if it ever did not
        return Response(401, "sign in first", "text/plain; charset=utf-8").to_event()
    if bootstrap.settings().console_user_pool_id:  # no pool (a test's hand-made claims): nobody to ask again
        who = as_now(who, bootstrap.console_users().current, fresh=request.method == "POST")
    if who is None:  # disabled or deleted since the token was issued: the token opens nothing
        return Response(401, "sign in again", "text/plain; charset=utf-8").to_event()
    lang.choose(request, who)
    if not who.can_view:
        return render(
            "error.html", who, 403, message=_("You are in no console group (viewers or operators).")
        ).to_event()
    if request.method == "POST":
        return post(request, who).to_event()
    view = PAGES.get(request.page)
    if view is None:
        return render("error.html", who, 404, message=_("No such page.")).to_event()
    return view(request, who).to_event()


# ------------------------------------------------------------------------------------------- open routes


def static(name: str) -> Response:
    path = (HERE / "static" / name).resolve()
    if path.parent != (HERE / "static").resolve() or path.suffix not in STATIC_TYPES or not path.is_file():
        return Response(404, "not found", "text/plain; charset=utf-8")
    headers = {"cache-control": "no-cache"}
    if name == "sw.js":
        headers["service-worker-allowed"] = "/console"
    return Response(200, path.read_text(encoding="utf-8"), STATIC_TYPES[path.suffix], headers)


def login_page(request: Request, message: str = "", status: int = 200, **step: Any) -> Response:
    return render(
        "login.html",
        None,
        status,
        message=message,
        next=_safe_next(request.field("next")),
        bye=bool(request.field("bye")),
        expired=request.field("expired") if request.field("expired") in ("expired", "not-done") else "",
        **step,
    )


def login_post(request: Request) -> Response:
    from tally.store.users import MfaRequired, SignInFailed

    if not request.same_origin():  # login CSRF: another site must not sign this browser in as someone else
        count(M.CONSOLE_ACTION_REFUSED)
        logger.warning(
            "console sign-in from another site refused", extra={"origin": request.headers.get("origin")}
        )
        return login_page(
            request, _("This sign-in came from another site: open the console and sign in there."), 403
        )
    if request.form.get("mfa_session") or request.form.get("enrol_token"):
        return totp_post(request)
    username, password = request.form.get("username", "").strip(), request.form.get("password", "")
    if not username or not password:
        return login_page(request, _("Enter your user name and password."), 400)
    users = bootstrap.console_users()
    try:
        tokens = users.sign_in(username[:128], password[:256])
    except MfaRequired as challenge:
        return login_page(request, "", step="code", session=challenge.session, username=username[:128])
    except SignInFailed:
        count(M.CONSOLE_LOGIN_FAILED)
        logger.warning("console sign-in failed", extra={"username": username[:128]})
        return login_page(request, _("Wrong user name or password."), 401)
    if bootstrap.settings().console_operator_mfa and "operators" in _groups(tokens.id_token):
        # an operator without TOTP: enrol now, then sign in again with a code (docs/alerts.md "Hardening")
        secret = users.start_totp(tokens.access_token)
        uri = f"otpauth://totp/Tally:{urllib.parse.quote(username[:128])}?secret={secret}&issuer=Tally"
        return login_page(
            request, "", step="enrol", secret=secret, otpauth=uri, enrol_token=tokens.access_token
        )
    return render(
        "signed_in.html", None, token=tokens.id_token, next=_safe_next(request.form.get("next", ""))
    )


def totp_post(request: Request) -> Response:
    """The sign-in's TOTP steps: the code for a challenge, or the first code of an enrolment."""
    from tally.store.users import SignInFailed

    users = bootstrap.console_users()
    code = request.form.get("code", "").strip()[:16]
    try:
        if request.form.get("enrol_token"):
            users.confirm_totp(request.form["enrol_token"][:4096], code)
            return login_page(
                request, _("Your authenticator app is set up: sign in with your password and a code.")
            )
        username = request.form.get("username", "").strip()[:128]
        tokens = users.answer_mfa(username, request.form["mfa_session"][:4096], code)
    except SignInFailed:
        count(M.CONSOLE_LOGIN_FAILED)
        logger.warning(
            "console sign-in failed: TOTP code", extra={"username": request.form.get("username", "")[:128]}
        )
        return login_page(request, _("Wrong or expired code: sign in again."), 401)
    return render(
        "signed_in.html", None, token=tokens.id_token, next=_safe_next(request.form.get("next", ""))
    )


def _groups(id_token: str) -> frozenset[str]:
    """The groups in an ID token Cognito has just handed us over TLS (its signature is API Gateway's to check on
    every page; here it only decides whether the sign-in needs TOTP first)."""
    from tally.console.auth import parse_groups

    try:
        part = id_token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return frozenset()
    return parse_groups(claims.get("cognito:groups"))


def _safe_next(value: str) -> str:
    """Only a console path: never another site (an open redirect would carry the person off)."""
    if (
        value.startswith("/console")
        and not value.startswith("//")
        and "\\" not in value
        and value != "/console/login"
    ):
        return value
    return "/console"


# ------------------------------------------------------------------------------------------- pages


def morning_page(request: Request, who: Identity) -> Response:
    return render("morning.html", who, m=data.morning(), page="morning")


def queue_page(request: Request, who: Identity) -> Response:
    filters = {k: request.field(k) for k in actions.FILTERS}
    items = data.queue_items()
    shown = data.filter_items(items, **filters)
    return render(
        "queue.html",
        who,
        page="queue",
        items=shown,
        filters=filters,
        kinds=sorted({k for i in items for k in i.kinds}),
        merchants=sorted({i.mchid for i in items if i.mchid}),
        owners=sorted({i.owner for i in items if i.owner}),
        classes=sorted({i.cls for i in items if i.cls}),
        bill_dates=sorted({i.bill_date for i in items if i.bill_date}),
        codes=sorted({c for i in shown for cs in i.codes.values() for c in cs}),
        message=request.field("done"),
        message_detail=request.field("detail"),
        run=request.field("run"),
    )


def item_page(
    request: Request, who: Identity, message: str = "", status: int = 200, message_detail: str = ""
) -> Response:
    from tally.service.queue import QueueError

    item_id = request.field("id")
    try:
        item, detail, history = data.item_detail(item_id)
    except (QueueError, LookupError):
        if request.field("done"):  # closed by the action just done, and its row no longer readable by id
            return redirect(link("queue", done=request.field("done")))
        return render(
            "error.html",
            who,
            status if message else 404,
            message=message or _("No such case (cleared already?)."),
        )
    return render(
        "item.html",
        who,
        status,
        page="queue",
        item=item,
        item_id=item_id,
        detail=detail,
        state=(item.state if item else detail.get("q_state") or "closed"),
        history=history,
        message=message or request.field("done"),
        message_detail=message_detail or request.field("detail"),
        form=request.form if message else {},  # a refusal keeps what the person chose and typed
    )


def story_page(request: Request, who: Identity) -> Response:
    mchid, order = request.field("mchid"), request.field("order")
    story = data.order_story(mchid, order) if mchid and order else None
    return render(
        "story.html", who, page="story", mchid=mchid, order=order, story=story, asked=bool(mchid and order)
    )


def find_page(request: Request, who: Identity) -> Response:
    """The search box: a transaction id, refund number, refund id or out_trade_no → its order's story (one
    match), or the matches to choose from, across every configured merchant."""
    q = request.field("q")[:64]
    matches = bootstrap.story_service().find(q, data.merchants_configured()) if q else []
    if len(matches) == 1:
        return redirect(link("story", mchid=matches[0]["mchid"], order=matches[0]["out_trade_no"]))
    return render(
        "story.html", who, page="story", mchid="", order="", story=None, asked=False, q=q, matches=matches
    )


def recon_page(request: Request, who: Identity) -> Response:
    channel, mchid = request.field("channel"), request.field("mchid")
    day = request.field("date") or data.yesterday_cst()
    view = data.recon_day(channel, mchid, day) if channel and mchid else None
    return render(
        "recon.html",
        who,
        page="recon",
        channel=channel,
        mchid=mchid,
        date=day,
        view=view,
        merchants=[(data.recon_channel(c), m) for c, m in data.merchants_configured()],
        channels=channel_registry.reconciled(),  # the stored channels whose bills recon reads
    )


def report_download(request: Request, who: Identity) -> Response:
    found = data.recon_report(request.field("channel"), request.field("mchid"), request.field("date"))
    if found is None:
        return render("error.html", who, 404, message=_("No report for that day yet."))
    name, body = found
    return Response(
        200, body, "text/csv; charset=utf-8", {"content-disposition": f'attachment; filename="{name}"'}
    )


def refunds_page(request: Request, who: Identity) -> Response:
    filters = {k: request.field(k) for k in ("state", "merchant", "date")}
    try:
        day = data.date.fromisoformat(filters["date"]).isoformat() if filters["date"] else ""
    except ValueError:
        return render("error.html", who, 400, message=_("Dates look like 2026-11-30."))
    found = data.refunds(filters["state"].upper(), filters["merchant"], day)
    return render("refunds.html", who, page="refunds", refunds=found, filters=filters)


def merchants_page(request: Request, who: Identity) -> Response:
    return render("merchants.html", who, page="merchants", merchants=data.merchants())


def ledger_page(request: Request, who: Identity) -> Response:
    day = request.field("date") or data.yesterday_cst()
    merchant = request.field("merchant")
    try:
        bill_date = data.date.fromisoformat(day).isoformat()
    except ValueError:  # only the date the person typed: an error reading the day is not theirs
        return render("error.html", who, 400, message=_("Dates look like 2026-11-30."))
    if request.field("format") == "statement":  # the daily statement, the same figures (R49)
        return Response(
            200,
            data.statement_csv(bill_date, merchant),
            "text/csv; charset=utf-8",
            {"content-disposition": f'attachment; filename="statement-{bill_date}.csv"'},
        )
    view = data.ledger_day(bill_date, merchant)
    if request.field("format") == "csv":
        return Response(
            200,
            data.ledger_csv(view),
            "text/csv; charset=utf-8",
            {"content-disposition": f'attachment; filename="ledger-{day}.csv"'},
        )
    return render("ledger.html", who, page="ledger", date=day, merchant_id=merchant, view=view)


def books_page(request: Request, who: Identity) -> Response:
    """The seals of the last 14 days per merchant; `?date=&merchant=` one merchant-day, verified now;
    `format=zip` that day's export (every merchant, or the one named). Read-only: viewers too (finance)."""
    day, merchant = request.field("date"), request.field("merchant")
    if day:
        try:
            day = data.date.fromisoformat(day).isoformat()
        except ValueError:
            return render("error.html", who, 400, message=_("Dates look like 2026-11-30."))
    if day and request.field("format") == "zip":
        found = data.books_zip(day, merchant)
        if found is None:
            return render(
                "error.html",
                who,
                413,
                message=_("That day's books are too large to download here: ask an engineer to export them."),
                message_detail=f"tally audit export --day {day} --out ./tally-books-{day}",
            )
        name, body = found
        return Response(
            200, body, "application/zip", {"content-disposition": f'attachment; filename="{name}"'}
        )
    if day and merchant:
        return render("books_day.html", who, page="books", view=data.books_day(day, merchant))
    view = data.books(merchant, day)
    return render("books.html", who, page="books", view=view, merchant_id=merchant, date=day)


def webhooks_page(request: Request, who: Identity, **shown: Any) -> Response:
    mchid = request.field("mchid")
    return render("webhooks.html", who, page="webhooks", mchid=mchid, endpoints=data.webhooks(mchid), **shown)


def webhooks_post(request: Request, who: Identity) -> Response:
    """The CLI's `tally webhooks add|resume|remove|resend` for an operator; a range resend shows its count and
    digest first and sends only that set (the same Resender)."""
    form = {
        k: request.form.get(k, "").strip()
        for k in ("action", "mchid", "url", "events", "endpoint", "since", "until", "digest")
    }
    try:
        shown = actions.webhook_action(form, who)
    except actions.ActionRefused as exc:
        return webhooks_page(request, who, message=_("Not done."), message_detail=str(exc))
    return webhooks_page(request, who, **shown)


def incidents_page(request: Request, who: Identity) -> Response:
    """Failures grouped by cause (docs/alerts.md): live first; `?id=` shows one with its cases and history."""
    wanted = request.field("id")
    rows = incident_rows(live_only=False)
    shown = next((r for r in rows if r["id"] == wanted), None) if wanted else None
    return render("incidents.html", who, page="incidents", incidents=rows, shown=shown, wanted=wanted)


def incident_rows(*, live_only: bool) -> list[dict[str, Any]]:
    return bootstrap.incidents().list(live_only=live_only) if bootstrap.settings().alerts_table else []


PAGES: dict[str, Callable[[Request, Identity], Response]] = {
    "": morning_page,
    "morning": morning_page,
    "queue": queue_page,
    "item": item_page,
    "story": story_page,
    "find": find_page,
    "recon": recon_page,
    "report": report_download,
    "refunds": refunds_page,
    "merchants": merchants_page,
    "ledger": ledger_page,
    "books": books_page,
    "webhooks": webhooks_page,
    "incidents": incidents_page,
    "settings": lambda request, who: settings_page(request, who),
}


def settings_page(request: Request, who: Identity, message: str = "", status: int = 200) -> Response:
    """The person's own settings: the console's language (Cognito `locale`, docs/language.md)."""
    return render(
        "settings.html",
        who,
        status,
        page="settings",
        chosen=lang.user_locale(who) or "",
        message=message,
        saved=request.field("done") == "saved",
    )


def settings_post(request: Request, who: Identity) -> Response:
    """Anyone signed in sets their own language (a viewer too): CSRF and same-site checked like every POST."""
    try:
        lang.set_user_language(who, request.form.get("locale", ""))
    except ValueError:
        return settings_page(request, who, _("Choose one of the languages offered."), 400)
    return redirect(link("settings", done="saved"))


# ------------------------------------------------------------------------------------------- actions


def post(request: Request, who: Identity) -> Response:
    """Every POST: operators only, a CSRF token of this session, from this site. Refusals are counted."""
    if request.page == "settings" and csrf_ok(who, request.form.get("csrf")) and request.same_origin():
        return settings_post(request, who)  # one's own language: not an action on money, so viewers too
    if not who.can_act:
        return refuse(who, request, _("Viewers cannot act: ask an operator."), "viewer")
    if not csrf_ok(who, request.form.get("csrf")) or not request.same_origin():
        return refuse(
            who,
            request,
            _("This form is stale or came from another site: reload the page and try again."),
            "csrf",
        )
    if request.page == "webhooks":  # register, resume, remove an endpoint; resend with a preview first
        return webhooks_post(request, who)
    fields = {k: request.form.get(k, "") for k in actions.FIELDS}
    if request.page == "act":
        item_id = request.form.get("id", "")
        try:
            outcome = actions.act(
                item_id, request.form.get("action", ""), who, request.form.get("reason", ""), **fields
            )
        except actions.ActionRefused as exc:
            return item_page(request, who, _("Not done."), 409, str(exc))
        return redirect(link("item", id=item_id, done=outcome.message, detail=outcome.detail))
    if request.page == "bulk":
        return bulk_post(request, who, fields)
    return render("error.html", who, 404, message=_("No such action."))


def bulk_post(request: Request, who: Identity, fields: dict[str, str]) -> Response:
    """Preview (changes nothing), then confirm: the confirm acts on exactly the previewed set or shows the new
    preview (R52). The result lists each item not done with its reason."""
    from tally.service.queue import SetChanged

    filters = {k: request.form.get(k, "") for k in actions.FILTERS}
    picked = [i for i in request.form.get("pick", "").split(",") if i]
    action = request.form.get("action", "")
    reason = request.form.get("reason", "")
    if action not in actions.ACTIONS:
        return render("error.html", who, 400, message=_("Choose an action."))

    def bulk_page(status: int = 200, **context: Any) -> Response:
        return render(
            "bulk.html", who, status, page="queue", filters=filters, picked=picked, fields=fields, **context
        )

    def preview_page(message: str = "", status: int = 200, detail: str = "") -> Response:
        preview = actions.bulk_preview(filters, action, picked, **fields)
        return bulk_page(status, preview=preview, reason=reason, message=message, message_detail=detail)

    if request.form.get("run"):
        return replay_post(request, who, filters, reason)
    if request.form.get("confirm") != "yes":
        return preview_page()
    try:
        expect = actions.expected(request.form)
        if action == "replay" and not picked:
            return replay_post(request, who, filters, reason, expect)
        report = actions.bulk(filters, action, who, reason, expect=expect, picked=picked, **fields)
    except SetChanged:
        return preview_page(_("Not done: the cases changed since the preview. This is the new preview."), 409)
    except actions.ActionRefused as exc:
        return preview_page(_("Not done."), 409, str(exc))
    return bulk_page(preview=None, report=report)


def replay_post(
    request: Request,
    who: Identity,
    filters: dict[str, str],
    reason: str,
    expect: dict[str, Any] | None = None,
) -> Response:
    """A bulk replay run: started from the preview's confirm (exactly its set, R52), or continued with its id."""
    try:
        run = actions.replay_run(filters, who, reason, request.form.get("run", "").strip(), expect)
    except actions.ActionRefused as exc:
        return render("error.html", who, 409, message=_("Not done."), message_detail=str(exc))
    call = run["this_call"]
    words = Words(lang.current())
    message = lang.current().ngettext(
        "Replay: %(done)s of %(planned)s case tried again (%(done_money)s of %(planned_money)s).",
        "Replay: %(done)s of %(planned)s cases tried again (%(done_money)s of %(planned_money)s).",
        int(run["planned_items"]),
    ) % {
        "done": run["done_items"],
        "planned": run["planned_items"],
        "done_money": words.money_text(run["done_amount"]),
        "planned_money": words.money_text(run["planned_amount"]),
    }
    if run["failed_items"]:
        message += " " + _("%(n)s not done.") % {"n": run["failed_items"]}
    paused = run["status"] == "PAUSED"
    if paused:
        message += " " + _("The run is paused: continue it below.")
    detail = f"replay run {run['run_id']}: {run['status']}" + (
        f"; this time {call['changed']}" if call["changed"] != run["done_items"] else ""
    )
    return redirect(link("queue", done=message, detail=detail, **({"run": run["run_id"]} if paused else {})))


def refuse(who: Identity, request: Request, message: str, why: str) -> Response:
    count(M.CONSOLE_ACTION_REFUSED)
    logger.warning("console action refused", extra={"by": who.who, "page": request.page, "why": why})
    return render("error.html", who, 403, message=message)
