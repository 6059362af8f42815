"""The template's state machines on the embedded stack: created in moto and run by moto's own Step Functions
interpreter (`execute_state_machine`), their Lambda tasks routed to the in-process handlers.

For each `AWS::Serverless::StateMachine`: every function its DefinitionSubstitutions name (`!GetAtt X.Arn`) is
created in moto's Lambda with `TALLY_LOCAL_INVOKE_URL` = the front door's `/_local/lambda/X` (moto_fixes 7: an
Invoke posts there; lambda_io.invoke_route runs X's handler), the other substitutions are resolved like any
template value, and the machine is created under its own `Name` — so the ARN the functions compute from
that name (`RECON_STATE_MACHINE_ARN` in Globals) is the one moto knows. The definition is template.yaml's.
"""

from __future__ import annotations

import io
import json
import logging
import re
import zipfile
from collections.abc import Mapping
from typing import Any

from tally_local.moto_fixes import INVOKE_URL_VARIABLE
from tally_local.resources import LOCAL_ACCOUNT_ID

log = logging.getLogger(__name__)
TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
ROLE = "tally-local-state-machines"


def state_machines(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template.get("Resources", {}).items() if r.get("Type") in TYPES}


def task_functions(template: Mapping[str, Any]) -> set[str]:
    """Logical ids of the functions the state machines invoke (their `!GetAtt X.Arn` substitutions)."""
    found = set()
    for machine in state_machines(template).values():
        for value in machine["Properties"].get("DefinitionSubstitutions", {}).values():
            if isinstance(value, dict) and "Fn::GetAtt" in value:
                found.add(_get_att(value)[0])
    return found


def create(
    template: Mapping[str, Any], resolver: Any, session: Any, prefix: str, invoke_base_url: str
) -> dict[str, str]:
    """Create every state machine (and the Lambda functions it calls); {logical id: state machine ARN}."""
    machines = state_machines(template)
    if not machines:
        return {}
    role = _role(session.client("iam"))
    lam = session.client("lambda")
    sfn = session.client("stepfunctions")
    arns: dict[str, str] = {}
    functions: dict[str, str] = {}
    for lid, machine in machines.items():
        props = machine["Properties"]
        substitutions: dict[str, str] = {}
        for name, value in props.get("DefinitionSubstitutions", {}).items():
            if isinstance(value, dict) and "Fn::GetAtt" in value and _get_att(value)[1] == "Arn":
                function = _get_att(value)[0]
                if function not in functions:
                    functions[function] = _function(lam, role, prefix, function, invoke_base_url)
                substitutions[name] = functions[function]
            else:
                substitutions[name] = str(resolver.resolve(value))
        text = _substitute(json.dumps(props["Definition"]), substitutions)
        name = str(resolver.resolve(props.get("Name") or f"{prefix}-{lid}"))
        answer = sfn.create_state_machine(
            name=name, definition=text, roleArn=role, type=props.get("Type", "STANDARD")
        )
        arns[lid] = answer["stateMachineArn"]
        resolver.refs[lid] = arns[lid]
        log.info("state machine %s created: %s", lid, arns[lid])
    return arns


def _substitute(text: str, substitutions: dict[str, str]) -> str:
    return re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: substitutions.get(m.group(1), m.group(0)), text)


def _get_att(value: dict[str, Any]) -> tuple[str, str]:
    arg = value["Fn::GetAtt"]
    name, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
    return name, attribute


def _role(iam: Any) -> str:
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    try:
        return iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(policy))["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        return f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:role/{ROLE}"


def _function(lam: Any, role: str, prefix: str, logical_id: str, invoke_base_url: str) -> str:
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr(
            "app.py", "# the handler runs in the embedded stack's process (tally_local/lambda_io.py)\n"
        )
    answer = lam.create_function(
        FunctionName=f"{prefix}-{logical_id}",
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
        Timeout=900,
        Environment={"Variables": {INVOKE_URL_VARIABLE: f"{invoke_base_url}/_local/lambda/{logical_id}"}},
    )
    return str(answer["FunctionArn"])
