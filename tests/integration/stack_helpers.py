"""A deployed stack as the CLI sees it (a CloudFormation stack on moto with template.yaml's outputs) and the CLI
itself, for the test modules that drive them (test modules never import from each other)."""

from __future__ import annotations

import json


def deploy_stack(name, env):
    """A CloudFormation stack (on moto) whose outputs are what template.yaml outputs for `name`."""
    import boto3

    from tally_cli.env import OUTPUT_ENV

    outputs = {key: env[var] for key, var in OUTPUT_ENV.items() if var in env}
    outputs["MerchantSecretPrefix"] = f"tally/{name}/merchants/"
    body = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(body))


def cli(*argv):
    from tally_cli.main import main

    return main(list(argv))
