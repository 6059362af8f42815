"""notifier λ (docs/alerts.md): every minute, the work queue's live cases become incidents (service/incidents.py);
subscribed to the alarm topic, each alarm state change opens or resolves its incident. Each change (opened,
escalated, resolved), never each failure, becomes one card per chat destination (service/alerts.py)."""

import json

from tally import bootstrap
from tally.observability import logger, metrics

# clients and services built at init, not in the first request
bootstrap.at_init(bootstrap.incidents, bootstrap.notifier)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event, context):
    incidents = bootstrap.incidents()
    alarms = [r["Sns"]["Message"] for r in event.get("Records") or [] if "Sns" in r]
    changes = (
        [c for message in alarms for c in incidents.alarm(_message(message))] if alarms else incidents.sweep()
    )
    sent = bootstrap.notifier().deliver(changes)
    outcomes = [e["outcome"] for e in sent]
    return {"changes": len(changes), **{o: outcomes.count(o) for o in ("sent", "suppressed", "failed")}}


def _message(text):
    """CloudWatch's alarm message is JSON; anything else published to the topic is kept as the alarm's reason."""
    try:
        message = json.loads(text)
    except ValueError:
        message = None
    return (
        message if isinstance(message, dict) else {"AlarmName": "message", "NewStateReason": str(text)[:500]}
    )
