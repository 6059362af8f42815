"""`tally manual …`: the one queue of everything that needs a person (R41, docs/morning.md).

    list [--filter kind=…,merchant=…,age>2h] [--over S]     exit 3 while an item is open past its threshold
    show ID
    ack ID [--owner NAME]                                    acknowledge / assign
    resolve ID --code CODE --why …                            dealt with (refunded by hand, booked by hand, junk …)
    ignore ID --why …                                         nothing to do (test traffic, known noise)
    replay ID --why …                                         through the product path again, after a fix
    refund-outcome ID --outcome SUCCESS|FAIL --why …          what the merchant platform says: booked or released
    abnormal-refund ID --to merchant-bank-card|user-bank-card [--bank-type … --bank-account … --real-name …]
                                                              an ABNORMAL WeChat refund, sent elsewhere and tracked
    close-task ID --code refunded-at-channel|booked-after-all --why …
    refund-now ID --why …                                     the payment back through the one refund path
    accept-amount ID --why …                                  amount mismatch: book what the channel was paid
Every acting verb takes `--filter …` instead of an ID (bulk) and `--dry-run` (print what would change,
counts and amounts in yuan, change nothing). `--json` prints exactly one JSON document to stdout.

    replay --filter kind=…,merchant=…,since=…,until=… [--dry-run] [--rate N] [--limit N] --why …
    replay --run ID [--rate N] [--limit N]                    continue a bulk replay run
A bulk replay is a run (service/replay.py): its set is fixed when it starts (what --dry-run showed),
it goes at most --rate items a second, stops after --limit items if asked, is stored with an id and
continued with --run ID, and every item's history names the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from tally.i18n import N_

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, aligned, english, fault, money_text, ngettext, when, words

OVERDUE_EXIT = 3  # cron-able: something is open past its threshold

VERBS = {
    "ack": N_("acknowledge an item: you own it now (--owner to assign someone else)"),
    "resolve": N_("close an item a person dealt with (--code says how)"),
    "ignore": N_("close an item that needs nothing (test traffic, known noise)"),
    "replay": N_("send an item through the product path again after a fix"),
    "refund-outcome": N_(
        "record a refund's outcome found on the merchant platform (books or releases it, once)"
    ),
    "abnormal-refund": N_("send a refund WeChat reported ABNORMAL to the merchant's or the user's bank card"),
    "close-task": N_("close a refund task: refunded at the channel, or booked after all"),
    "refund-now": N_("refund an unwanted payment (or a refund task's) now, through the channel's refund"),
    "accept-amount": N_("amount mismatch: book what the channel says was paid (the order takes that amount)"),
}


def register(sub: argparse._SubParsersAction) -> None:
    manual = sub.add_parser(
        "manual", help=_("the work queue: everything that needs a person")
    ).add_subparsers(metavar="ACTION")
    listing = manual.add_parser("list", help=_("every open item, oldest first; exit 3 if one is overdue"))
    listing.add_argument("--filter", default="", help=_("kind=…,merchant=…,channel=…,state=…,owner=…,age>2h"))
    listing.add_argument(
        "--over", type=int, default=None, help=_("count items older than S seconds as overdue")
    )
    add_json(listing)
    add_target(listing)
    listing.set_defaults(run=manual_list)

    show = manual.add_parser("show", help=_("one item: facts, reason, next step and history"))
    show.add_argument("item_id", help=_("the id `list` prints (old raw:/event: ids work too)"))
    show.add_argument("--raw", action="store_true", help=_("also the stored row (never its ciphertext)"))
    add_json(show)
    add_target(show)
    show.set_defaults(run=manual_show)

    for name, helptext in VERBS.items():
        action = manual.add_parser(name, help=_(helptext))
        action.add_argument("item_id", nargs="?", help=_("the item; or use --filter for many"))
        action.add_argument("--filter", default=None, help=_("bulk: every open item this selects"))
        action.add_argument(
            "--dry-run", action="store_true", help=_("print what would change; change nothing")
        )
        action.add_argument("--by", default=None, help=_("who (default: $USER)"))
        action.add_argument("--why", default="", help=_("why: recorded on the item"))
        if name == "ack":
            action.add_argument("--owner", default=None, help=_("assign to this person (default: --by)"))
        if name in ("resolve", "close-task"):
            action.add_argument(
                "--code", "--action", dest="code", default=None, help=_("how it was dealt with")
            )
        if name in ("resolve", "refund-outcome"):
            action.add_argument(
                "--outcome", choices=["SUCCESS", "FAIL"], default=None, help=_("a refund's outcome")
            )
        if name == "abnormal-refund":
            action.add_argument(
                "--to",
                choices=["merchant-bank-card", "user-bank-card"],
                default=None,
                help=_("where the money goes instead"),
            )
            action.add_argument(
                "--bank-type", default=None, help=_("user-bank-card: the bank's code (e.g. ICBC)")
            )
            action.add_argument(
                "--bank-account", default=None, help=_("user-bank-card: sent encrypted, not kept")
            )
            action.add_argument(
                "--real-name", default=None, help=_("user-bank-card: sent encrypted, not kept")
            )
        if name == "resolve":
            action.add_argument(
                "--reverse", action="store_true", help=_("recon diff: write a reversing entry")
            )
        if name == "replay":
            action.add_argument(
                "--run", dest="run_id", default=None, help=_("continue this bulk replay run (its id)")
            )
            action.add_argument(
                "--rate",
                type=float,
                default=None,
                help=_("items a second (default TALLY_REPLAY_RATE or 20)"),
            )
            action.add_argument(
                "--limit", type=int, default=None, help=_("stop after N items (continue: --run)")
            )
        add_json(action)
        add_target(action)
        action.set_defaults(run=manual_act, verb=name)


@contextlib.contextmanager
def one_document() -> Iterator[None]:
    """Whatever the services log or print while a verb runs goes to stderr, so stdout carries exactly the one
    document the verb prints (`--json` output stays parseable)."""
    import logging

    handlers = [h for h in logging.getLogger("tally").handlers if isinstance(h, logging.StreamHandler)]
    streams = [h.setStream(sys.stderr) for h in handlers]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            if stream is not None:
                handler.setStream(stream)


def _queue() -> Any:
    from tally import bootstrap

    return bootstrap.work_queue()


def manual_list(args: argparse.Namespace) -> int:
    connect(args)
    with one_document():
        items = _queue().list(args.filter, over_s=args.over)
    overdue = sum(1 for i in items if i["overdue"])
    if args.json:
        print(
            json.dumps({"open": len(items), "overdue": overdue, "items": items}, ensure_ascii=False, indent=2)
        )
        return OVERDUE_EXIT if overdue else 0
    print(render_list(items, overdue))
    return OVERDUE_EXIT if overdue else 0


def render_list(items: list[dict[str, Any]], overdue: int) -> str:
    """Each open item: what it is, where, how much and how old, the plain reason and the next step (Words, the
    console's sentences); the kind and the recorded technical reason under "details"."""
    if not items:
        return _("the queue is empty: nothing waits for a person")
    w = words()
    lines = [
        ngettext(
            "%(n)d item waiting for a person, oldest first (%(overdue)d past their threshold):",
            "%(n)d items waiting for a person, oldest first (%(overdue)d past their threshold):",
            len(items),
        )
        % {"n": len(items), "overdue": overdue}
    ]
    for item in items:
        said = w.case(item["kind"], str(item.get("cls") or ""))
        facts = [
            said.title + (f" ×{item['count']}" if item["count"] > 1 else ""),
            w.state(item["state"]),
            *([_("owner %(owner)s") % {"owner": item["owner"]}] if item["owner"] else []),
            f"{w.channel(item['channel'])} {item['merchant'] or ''}".strip(),
            _("order %(order)s") % {"order": item["order"] or "-"},
            _("amount %(amount)s") % {"amount": money_text(item["amount"])},
            _("waiting %(age)s") % {"age": w.age(item.get("age_s"))},
            *([_("OVERDUE")] if item["overdue"] else []),
        ]
        lines += [f"  {item['id']}", "    " + "  ".join(facts)]
        lines += aligned(
            [
                (_("why:"), said.reason),
                (_("do:"), said.todo),
                (_("actions:"), ", ".join(item["actions"])),
                (_("details:"), f"{item['kind']}: {item['reason']}"),
            ],
            indent="    ",
        )
    return "\n".join(lines)


def manual_show(args: argparse.Namespace) -> int:
    from tally.service.shown import scrub

    connect(args)
    with one_document():
        item = _queue().get(args.item_id)
    source = item.pop("source", None)
    if args.raw:  # the stored row(s), secrets and ciphertext never shown
        rows = source if isinstance(source, list) else [source]
        item["raw"] = [scrub(r) for r in rows if r]
    emit(item, lambda: render_item(item), args)
    return 0


def render_item(item: dict[str, Any]) -> str:
    """Facts, the plain reason and the next step (Words), the case's parts, the verbs that act on it and the
    history, in the CLI's language; the kind and the recorded technical reason under "details"."""
    w = words()
    said = w.case(str(item.get("kind") or ""), str(item.get("cls") or ""))
    title = said.title if item.get("kind") else _("closed item")
    lines = [f"{item['id']}: {title} — {w.state(item.get('state'))}"]
    since = when(item.get("since"))
    facts: list[tuple[str, Any]] = [
        (_("merchant:"), f"{w.channel(item.get('channel'))} {item.get('merchant') or ''}".strip()),
        (_("order:"), item.get("order")),
        (_("amount:"), money_text(item["amount"]) if item.get("amount") is not None else ""),
        (
            _("waiting:"),
            _("%(age)s (since %(since)s)") % {"age": w.age(item.get("age_s")), "since": since}
            if item.get("age")
            else "",
        ),
        (_("owner:"), item.get("owner")),
        (_("reason:"), said.reason if item.get("kind") else ""),
        (_("do:"), said.todo if item.get("kind") else ""),
        (_("details:"), f"{item.get('kind')}: {item.get('reason')}" if item.get("reason") else ""),
    ]
    rows = [(name, value) for name, value in facts if value]
    for part in item.get("parts") or []:
        amount = f" {money_text(part['amount'])}" if part.get("amount") else ""
        part_title = w.case(part["kind"], str(part.get("cls") or "")).title
        rows.append(
            (
                _("part:"),
                f"{part['id']} ({part_title}, {w.state(part['state'])}){amount}: {part.get('reason')}",
            )
        )
    codes = item.get("codes") or {}
    for action in item.get("actions") or []:
        code = f" --code {'|'.join(codes[action])}" if codes.get(action) else ""
        rows.append((_("next:"), f"tally manual {action} {item['id']}{code} --why …   # {w.action(action)}"))
    for h in item.get("history") or []:
        extra = "".join(f" · {k} {h[k]}" for k in ("code", "outcome", "owner") if h.get(k))
        rows.append(
            (
                _("history:"),
                _("%(at)s %(action)s by %(by)s: %(why)s")
                % {"at": when(h.get("at")), "action": h.get("action"), "by": h.get("by"), "why": h.get("why")}
                + extra,
            )
        )
    lines += aligned(rows, indent="  ", minimum=9)
    for row in item.get("raw") or []:
        lines.append("  " + _("raw row:"))
        lines += [f"    {k}: {v}" for k, v in sorted(row.items()) if k != "history"]
    return "\n".join(lines)


def manual_act(args: argparse.Namespace) -> int:
    connect(args)
    if args.by is None:  # read when the command runs: the parser is built once per process (main.py)
        args.by = os.environ.get("USER", "")
    verb = args.verb
    fields: dict[str, Any] = {}
    if getattr(args, "owner", None):
        fields["owner"] = args.owner
    if getattr(args, "code", None):
        fields["code"] = args.code
    if getattr(args, "outcome", None):
        fields["outcome"] = args.outcome
    if getattr(args, "reverse", False):
        fields["reverse"] = True
    for name in ("to", "bank_type", "bank_account", "real_name"):
        if getattr(args, name, None):
            fields[name] = getattr(args, name)
    if verb == "abnormal-refund" and not fields.get("to"):
        raise fault(ValueError, N_("abnormal-refund needs --to merchant-bank-card or --to user-bank-card"))
    if verb == "refund-outcome" and not args.outcome:
        raise fault(ValueError, N_("refund-outcome needs --outcome SUCCESS or --outcome FAIL"))
    why = args.why or (f"code {args.code}" if getattr(args, "code", None) else "")
    if verb == "replay" and getattr(args, "run_id", None) and args.dry_run:  # R52: a dry run never acts
        with one_document():
            plan = bootstrap_replay().plan(args.run_id)
        print(json.dumps(plan, ensure_ascii=False, indent=2) if args.json else _render_plan(plan))
        return 0
    if verb == "replay" and (getattr(args, "run_id", None) or (args.filter is not None and not args.dry_run)):
        return _replay_run(args, why)
    if verb == "replay" and args.filter is not None and args.dry_run:
        with one_document():
            report = bootstrap_replay().preview(args.filter)
        print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else _render_bulk(report))
        return 0
    if (args.item_id is None) == (args.filter is None):
        raise fault(ValueError, N_("name one item, or select many with --filter (not both)"))
    try:
        with one_document():
            queue = _queue()
            if args.filter is not None or args.dry_run:
                selected = args.filter if args.filter is not None else {"id": args.item_id}
                report = queue.bulk(selected, verb, by=args.by, reason=why, dry_run=args.dry_run, **fields)
            else:
                result = queue.act(args.item_id, verb, by=args.by, reason=why, **fields)
    except (ValueError, LookupError) as exc:
        if not args.json:
            raise
        print(json.dumps({"error": english(exc), "id": args.item_id, "action": verb}, ensure_ascii=False))
        return 1
    if args.filter is not None or args.dry_run:
        print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else _render_bulk(report))
        return 1 if report["errors"] else 0
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        print(
            _("%(verb)s %(id)s: %(outcome)s (now %(state)s)")
            % {
                "verb": verb,
                "id": result["id"],
                "outcome": result["outcome"],
                "state": words().state(result["state"]),
            }
        )
    return 0


def bootstrap_replay() -> Any:
    from tally import bootstrap

    return bootstrap.bulk_replay()


def _replay_run(args: argparse.Namespace, why: str) -> int:
    """A bulk replay run: started from --filter, or continued with --run ID (service/replay.py)."""
    if args.item_id is not None or (args.run_id and args.filter is not None):
        raise fault(
            ValueError,
            N_("a bulk replay takes --filter (a new run) or --run ID (continue one), not an item id"),
        )
    try:
        with one_document():
            runs = bootstrap_replay()
            if args.run_id:
                result = runs.resume(args.run_id, rate=args.rate, limit=args.limit)
            else:
                result = runs.start(args.filter, by=args.by, why=why, rate=args.rate, limit=args.limit)
    except (ValueError, LookupError) as exc:
        if not args.json:
            raise
        print(json.dumps({"error": english(exc), "run": args.run_id, "action": "replay"}, ensure_ascii=False))
        return 1
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        print(_render_run(result))
    return 1 if result["this_call"]["failed"] else 0


def _render_run(run: dict[str, Any]) -> str:
    call, w = run["this_call"], words()
    lines = [
        _(
            "replay run %(run)s: %(status)s — %(done)d of %(planned)d planned item(s) replayed, "
            "%(done_amount)s of %(planned_amount)s sent through the product path"
        )
        % {
            "run": run["run_id"],
            "status": w.run(run["status"]),
            "done": run["done_items"],
            "planned": run["planned_items"],
            "done_amount": money_text(run["done_amount"]),
            "planned_amount": money_text(run["planned_amount"]),
        }
        + (_(", %(n)d failed") % {"n": run["failed_items"]} if run["failed_items"] else ""),
        "  "
        + _(
            "this call: %(changed)d replayed (%(amount)s), %(failed)d failed, %(passed)d passed over "
            "(done before, or another process had them)"
        )
        % {
            "changed": call["changed"],
            "amount": money_text(call.get("changed_amount", "0.00")),
            "failed": call["failed"],
            "passed": call["passed"],
        },
    ]
    lines += [f"  {w.reason(kind).title}: {n}" for kind, n in sorted((call.get("by_kind") or {}).items())]
    lines += [f"  {_('FAILED')} {k}: {v}" for k, v in (call.get("errors") or {}).items()]
    if run["status"] == "PAUSED":
        lines.append("  " + _("continue: tally manual replay --run %(run)s") % {"run": run["run_id"]})
    return "\n".join(lines)


def _render_plan(plan: dict[str, Any]) -> str:
    left = plan["would_replay"]
    return (
        _(
            "replay run %(run)s: %(status)s — %(done)d of %(planned)d planned item(s) replayed so far "
            "(%(done_amount)s of %(planned_amount)s)"
        )
        % {
            "run": plan["run_id"],
            "status": words().run(plan["status"]),
            "done": plan["done_items"],
            "planned": plan["planned_items"],
            "done_amount": money_text(plan["done_amount"]),
            "planned_amount": money_text(plan["planned_amount"]),
        }
        + "\n"
        + _render_bulk(left)
        + "\n  "
        + _("(dry run: nothing changed; continue with: tally manual replay --run %(run)s)")
        % {"run": plan["run_id"]}
    )


def _render_bulk(report: dict[str, Any]) -> str:
    w = words()
    done = report.get("would_change", report.get("changed", 0))
    values = {
        "action": report["action"],
        "done": done,
        "matched": report["matched"],
        "amount": money_text(report["amount"]),
    }
    if report["dry_run"]:
        head = _(
            "would %(action)s %(done)d of %(matched)d item(s), %(amount)s in all (dry run: nothing changed)"
        )
    else:
        head = _("did %(action)s %(done)d of %(matched)d item(s), %(amount)s in all")
    lines = [head % values]
    lines += [f"  {w.reason(kind).title}: {n}" for kind, n in sorted(report["by_kind"].items())]
    lines += [
        f"  {i['id']}  {i['merchant']}  {_('order %(order)s') % {'order': i['order'] or '-'}}  "
        f"{money_text(i['amount'])}  {i['reason']}"
        for i in report["items"]
    ]
    if report["skipped"]:
        lines.append(
            "  "
            + _("not offered for %(n)d item(s): %(ids)s")
            % {"n": len(report["skipped"]), "ids": ", ".join(report["skipped"][:10])}
        )
    lines += [f"  {_('FAILED')} {k}: {v}" for k, v in report["errors"].items()]
    return "\n".join(lines)
