"""The deployed layer ships .pyc compiled for the Lambda runtime (issue: Performance, lean cold start)."""

import pathlib

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_layer_is_built_by_the_makefile_that_compiles_for_the_runtime():
    template = load_template(ROOT / "template.yaml")
    layer = template["Resources"]["CommonLayer"]
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    runtime = template["Globals"]["Function"]["Runtime"]
    makefile = (ROOT / "layers/common/Makefile").read_text()
    assert "build-CommonLayer:" in makefile
    assert f"RUNTIME_PYTHON ?= {runtime}" in makefile
    assert "compileall" in makefile and "unchecked-hash" in makefile
    assert layer["Properties"]["CompatibleRuntimes"] == [runtime]
