"""What the Lambda runtime runs is what the suite runs (issue #16): the AWS SDK is pinned in the layer, and the
layer build refuses an interpreter that is not the runtime's Python."""

import ast
import os
import pathlib
import re
import stat
import subprocess
from importlib.metadata import version

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYER_REQUIREMENTS = ROOT / "layers/common/requirements.txt"
MIN_BOTOCORE = (1, 35, 0)  # S3 conditional writes: put_object(IfNoneMatch="*") in store/recon.py


def pins():
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", LAYER_REQUIREMENTS.read_text(), re.M))


def test_the_layer_pins_the_sdk_the_suite_runs():
    """The runtime's own boto3 differs by region and date; the layer's copy (first on sys.path) is the one
    the functions import, and it is the very version these tests exercise."""
    layer = pins()
    assert layer["boto3"] == version("boto3") and layer["botocore"] == version("botocore")


def test_no_deployed_code_imports_urllib3_so_the_layer_leaves_its_version_to_botocore():
    """urllib3 is in the layer only as botocore's dependency (tally/httpclient.py speaks HTTP over ssl/socket):
    a module importing it directly would need it pinned here again."""
    importers = [
        str(path.relative_to(ROOT))
        for path in [*(ROOT / "layers").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
        if any(
            name.split(".")[0] == "urllib3"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            for name in _imported(node)
        )
    ]
    assert importers == []
    assert "urllib3" not in pins()


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_the_pinned_botocore_has_what_the_code_calls():
    import botocore.session

    assert tuple(int(x) for x in pins()["botocore"].split(".")[:3]) >= MIN_BOTOCORE
    s3 = botocore.session.get_session().get_service_model("s3")
    assert "IfNoneMatch" in s3.operation_model("PutObject").input_shape.members


def test_the_layer_build_runs_the_interpreter_instead_of_trusting_command_v(tmp_path):
    """A pyenv shim is on PATH (command -v finds it) but exits 127 when no 3.12 is installed behind it: the
    build must stop with the reason before pip runs, not fail later or build with another Python."""
    shim = tmp_path / "python3.12"
    shim.write_text('#!/bin/sh\necho "pyenv: python3.12: command not found" >&2\nexit 127\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    result = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(ROOT / "layers/common"),
            "build-CommonLayer",
            f"ARTIFACTS_DIR={tmp_path / 'out'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "need python3.12" in result.stderr
    assert not (tmp_path / "out").exists()  # stopped before anything was installed
