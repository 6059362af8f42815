"""Production wiring on the handlers (issue #16): heartbeats, per-stack secrets, clients, routing."""

from __future__ import annotations

import json

import pytest
from tally import bootstrap


def test_r46_a_recon_tick_with_nothing_to_reconcile_still_beats_the_heartbeat(h):
    """No merchant configured: the scheduled tick finishes, reconciles nothing, and counts ReconRunCompleted,
    so ReconNotRunAlarm stays quiet on a stack that has no merchant yet (and fires when ticks stop)."""
    assert list(bootstrap.recon_service().merchants()) == []
    result = h.invoke(
        "ReconFunction", {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
    )
    assert result == {"runs": []}
    assert h.metric("ReconRunCompleted") == 1
    assert h.series("ReconRunCompleted") == 1  # the service-only series the alarm watches


def _deploy_stack(name, env):
    """A CloudFormation stack (on moto) whose outputs are what template.yaml outputs for `name`."""
    import boto3
    from tally.cli.env import OUTPUT_ENV

    outputs = {key: env[var] for key, var in OUTPUT_ENV.items() if var in env}
    outputs["MerchantSecretPrefix"] = f"tally/{name}/merchants/"
    body = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(body))


def test_two_stacks_never_share_a_merchant_secret(h, monkeypatch):
    """Issue #16: `tally merchant add … --stack staging` overwrote prod's keys for the same mchid. The CLI now
    reads the stack's own prefix from its MerchantSecretPrefix output."""
    import boto3
    from tally.cli.env import use_deployed

    for name in ("prod", "staging"):
        _deploy_stack(name, h.env)
    stored = {}
    for name in ("prod", "staging"):
        monkeypatch.setenv("MERCHANT_SECRET_PREFIX", "tally/wrong/merchants/")  # restored after the test
        use_deployed(name)
        bootstrap.reset()
        assert bootstrap.settings().merchant_secret_prefix == f"tally/{name}/merchants/"
        m = h.sim.register_test_merchant(verify_mode="public_key")
        stored[name] = f"{name}-apiv3-key".ljust(32, "0")  # each stack's own key for the same mchid
        bootstrap.merchants().add_wechatpay(
            mchid="1900000777",
            apiv3_key=stored[name],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url="http://127.0.0.1:9/notify/wechatpay/1900000777",
            public_key=h.sim.public_key_pem,
            public_key_id=h.sim.public_key_id,
        )
    secrets = boto3.client("secretsmanager")
    names = sorted(s["Name"] for s in secrets.list_secrets()["SecretList"] if "1900000777" in s["Name"])
    assert names == [f"tally/{n}/merchants/wechatpay/1900000777" for n in ("prod", "staging")]
    for name in ("prod", "staging"):
        value = json.loads(secrets.get_secret_value(SecretId=names[name == "staging"])["SecretString"])
        assert value["apiv3_key"] == stored[name]
    assert stored["prod"] != stored["staging"]


@pytest.mark.parametrize("prefix", ["tally/merchants", "", "merchants/"])
def test_a_missing_or_shared_secret_prefix_is_refused(prefix):
    from tally.settings import _secret_prefix

    with pytest.raises(RuntimeError):
        _secret_prefix(prefix)
