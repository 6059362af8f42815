"""`make new-channel NAME=unionpay [LABEL="UnionPay"]`: a new channel's package, its simulator desk and one
registry line, from tally_local/channel_template (docs/new-channel.md). Nothing else is touched: the channel's
callbacks come by POST /notify/{channel}/{merchant} (channels/registry.NOTIFY_ANY_ROUTE), and every step of the
package refuses until it is built, so hostile input to the new route books nothing.

Prints, one per line, the files it wrote or changed (relative to the repository), then what to build next."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "channel_template"
REGISTRY = Path("layers/common/tally/channels/registry.py")
NAME = re.compile(r"^[a-z][a-z0-9_]{1,30}$")


class ScaffoldError(ValueError):
    """A name the scaffold cannot use; the message says why."""


def tokens(name: str, label: str) -> dict[str, str]:
    return {
        "{{name}}": name,
        "{{Name}}": "".join(part.capitalize() for part in name.split("_")),
        "{{NAME}}": name.upper(),
        "{{route}}": name.replace("_", "-"),
        "{{label}}": label,
    }


def scaffold(root: Path, name: str, label: str) -> list[Path]:
    """Write the package and the desk under `root`, add the registry line; the paths written, relative."""
    if not NAME.match(name):
        raise ScaffoldError(f"{name!r}: a channel's name is lower-case letters, digits and _ (e.g. unionpay)")
    package = Path("layers/common/tally/channels") / name
    desk = Path("tally_local/simulator") / f"{name}.py"
    if (root / package).exists() or (root / desk).exists():
        raise ScaffoldError(f"{name}: {package} or {desk} exists already")
    registry = (root / REGISTRY).read_text(encoding="utf-8")
    builtin = re.search(r"_BUILTIN = \(\n(.*?)\)\n", registry, re.S)
    if builtin is None:
        raise ScaffoldError(f"{REGISTRY}: no _BUILTIN tuple to add the channel to")
    words = tokens(name, label or name.replace("_", " ").title())
    written = []
    for template in sorted(TEMPLATE.glob("*.py.tmpl")):
        target = (
            desk if template.name == "simulator_desk.py.tmpl" else package / template.name[: -len(".tmpl")]
        )
        text = template.read_text(encoding="utf-8")
        for token, value in words.items():
            text = text.replace(token, value)
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        (root / target).write_text(text, encoding="utf-8")
        written.append(target)
    line = f'    "tally.channels.{name}.channel",\n'
    at = builtin.end(1)
    (root / REGISTRY).write_text(registry[:at] + line + registry[at:], encoding="utf-8")
    return [*written, REGISTRY]


NEXT = """next, in this order (docs/new-channel.md):
  1. docs/channel-spec.md: the channel's wire format from its public documentation, with sources
  2. {package}/wire.py: verify over the raw bytes, parse into PaymentNotice, the state table; notify.py
  3. tally_local/simulator/{name}.py: the channel's side, signed as the documentation says
  4. pull.py, refunds.py, settlement.py, doctor.py; bills when it has them (then reconciled=True)
  5. tests: its wire format (unit), its callback end to end (integration)"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make new-channel", description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the channel's package name, e.g. unionpay")
    parser.add_argument("--label", default="", help='what people read, e.g. "UnionPay"')
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: here)")
    args = parser.parse_args(argv)
    try:
        paths = scaffold(args.root, args.name, args.label)
    except (ScaffoldError, OSError) as exc:
        print(f"new-channel: {exc}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    print(NEXT.format(package=paths[0].parent, name=args.name), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
