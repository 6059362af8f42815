"""`tally` itself (#30 item 10): `--version`, and a reader that closes the pipe early (`tally … | head`) ends
the command quietly, with no "[Errno 32] Broken pipe" and no traceback, whatever the command."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tally_cli.main import main, version


def test_tally_version_prints_the_installed_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert out.strip() == f"tally {version()}" and version() != ""


def test_a_closed_pipe_ends_any_command_quietly():
    """A real pipe: a command that writes far more than the pipe holds, read by `head -1`."""
    script = textwrap.dedent(
        """
        import sys
        from tally_cli import envvars
        from tally_cli.main import main

        def loud(args):
            for n in range(200_000):
                print(f"line {n} of a long listing")
            return 0

        envvars.env_vars = loud
        from tally_cli.main import build_parser
        build_parser.cache_clear()
        sys.exit(main(["env-vars"]))
        """
    )
    done = subprocess.run(
        f"{sys.executable} -c '{script}' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "line 0 of a long listing\n"
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == ""
