"""docs/contracts.md names exactly the functions, tables, queues, buckets, buses, keys, indexes and
environment variables that template.yaml has: a doc row for something the template lacks fails, and so
does a template resource no row names."""

from __future__ import annotations

import pathlib
import re

import pytest

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "docs/contracts.md"
RESOURCE_TYPES = {
    "AWS::DynamoDB::Table": "DynamoDB",
    "AWS::SQS::Queue": "SQS",
    "AWS::S3::Bucket": "S3",
    "AWS::Events::EventBus": "EventBridge bus",
}
TICKED = re.compile(r"`([^`]+)`")


@pytest.fixture(scope="module")
def template():
    return load_template(ROOT / "template.yaml")


def section_rows(heading: str) -> dict[str, list[str]]:
    """The markdown table under `## heading…`: first cell → cells, header and rule lines dropped."""
    text = CONTRACTS.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    rows = {}
    for line in text[start : end if end > 0 else None].splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] != "logical id":
            rows[cells[0]] = cells
    return rows


def of_types(template, types) -> dict:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] in types}


def env_refs(template) -> dict[str, str]:
    """Globals env var → the logical id it is a Ref to."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    return {k: v["Ref"] for k, v in env.items() if isinstance(v, dict) and "Ref" in v}


def test_resources_table_names_exactly_the_templates_tables_queues_buckets_and_buses(template):
    rows = section_rows("Resources")
    resources = of_types(template, RESOURCE_TYPES)
    assert sorted(rows) == sorted(resources), "docs/contracts.md Resources rows vs template.yaml"
    for lid, cells in rows.items():
        assert cells[1] == RESOURCE_TYPES[resources[lid]["Type"]], f"{lid}: type column"


def test_each_resource_rows_env_var_is_the_one_the_template_sets(template):
    by_resource = {lid: var for var, lid in env_refs(template).items()}
    for lid, cells in section_rows("Resources").items():
        expected = f"`{by_resource[lid]}`" if lid in by_resource else "–"
        assert cells[2] == expected, f"{lid}: env var column"


def test_every_key_and_index_of_every_table_is_named_and_none_other(template):
    for lid, cells in section_rows("Resources").items():
        props = template["Resources"][lid].get("Properties", {})
        if template["Resources"][lid]["Type"] != "AWS::DynamoDB::Table":
            continue
        doc = cells[3]
        named = set(TICKED.findall(doc))
        for key in props["KeySchema"]:
            assert key["AttributeName"] in named, f"{lid}: key {key['AttributeName']} not in the row"
        indexes = {g["IndexName"]: g for g in props.get("GlobalSecondaryIndexes", [])}
        documented = set(re.findall(r"GSI `([^`]+)`", doc))
        assert documented == set(indexes), f"{lid}: GSIs in the row vs the template"
        for name, index in indexes.items():
            for key in index["KeySchema"]:
                assert key["AttributeName"] in named, (
                    f"{lid}.{name}: key {key['AttributeName']} not in the row"
                )
        ttl = props.get("TimeToLiveSpecification")
        assert ("TTL" in doc) == bool(ttl), f"{lid}: TTL"
        if ttl:
            assert ttl["AttributeName"] in named
        assert ("stream" in doc) == bool(props.get("StreamSpecification")), f"{lid}: stream"


def test_every_global_env_var_is_documented(template):
    text = CONTRACTS.read_text(encoding="utf-8")
    for var in template["Globals"]["Function"]["Environment"]["Variables"]:
        assert f"`{var}" in text, f"{var} (template Globals) is not in docs/contracts.md"


def test_functions_table_names_exactly_the_templates_functions_their_code_and_routes(template):
    rows = section_rows("Functions")
    functions = of_types(template, {"AWS::Serverless::Function"})
    assert sorted(rows) == sorted(functions), "docs/contracts.md Functions rows vs template.yaml"
    default_handler = template["Globals"]["Function"].get("Handler")
    for lid, cells in rows.items():
        props = functions[lid]["Properties"]
        code = props["CodeUri"].rstrip("/") + "/" + props.get("Handler", default_handler)
        assert cells[1] == f"`{code}`", f"{lid}: code column"
        module = ROOT / props["CodeUri"] / (props.get("Handler", default_handler).split(".")[0] + ".py")
        assert module.is_file(), f"{lid}: {module} missing"
        events = (props.get("Events") or {}).values()
        routes = {
            f"{e['Properties']['Method']} {e['Properties']['Path']}" for e in events if e["Type"] == "HttpApi"
        }
        documented = {t for t in TICKED.findall(cells[2]) if re.match(r"(GET|POST|PUT|DELETE) /", t)}
        assert documented == routes, f"{lid}: routes in the row vs the template"
        for e in events:
            if e["Type"] == "Schedule":
                assert f"`{e['Properties']['Schedule']}`" in cells[2], f"{lid}: schedule"
            if e["Type"] == "SQS":
                assert e["Properties"]["Queue"]["Fn::GetAtt"][0] in cells[2], f"{lid}: queue"
            if e["Type"] == "DynamoDB":
                assert e["Properties"]["Stream"]["Fn::GetAtt"][0] in cells[2], f"{lid}: stream source"
