"""template.yaml as SAM would deploy it, for the test modules that check it (test modules never import from each
other)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


def sam_transform(template: dict[str, Any], region: str) -> dict[str, Any]:
    """What CloudFormation does with the template after `sam package` (local paths → S3 URIs)."""
    packaged = copy.deepcopy(template)
    for resource in packaged["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://tally-artifacts/{props[key].strip('/')}.zip"
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    return translator.translate(packaged, parameter_values={}, get_managed_policy_map=dict)


def resource_name(resource: Any) -> str:
    """An IAM statement's resource as the logical name it grants (a table, a queue, a secret prefix)."""
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        return resource["Fn::GetAtt"][0]
    if isinstance(resource, dict) and "Fn::Sub" in resource:
        text = resource["Fn::Sub"] if isinstance(resource["Fn::Sub"], str) else resource["Fn::Sub"][0]
        if text.startswith("${") and ".Arn}" in text:
            return text.split(".Arn}")[0][2:] + text.split(".Arn}")[1]
        return "secret:" + text.split(":secret:", 1)[1] if ":secret:" in text else text
    return json.dumps(resource)
