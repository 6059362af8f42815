"""Who may act for which merchant on the signed API (R53): the caller is the IAM principal API Gateway's
IAM authorizer verified (`requestContext.authorizer.iam.userArn`); a merchant is reachable only by the
principals registered for it. Pure: the grants come from the store, the principal from the event."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

EVERY_MERCHANT = "*"  # a grant for every merchant of the deployment (one backend serving them all)

# arn:PARTITION:sts::ACCOUNT:assumed-role/ROLE/SESSION: a role's temporary credentials; the role is the principal
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/[^/]+$")
_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:[A-Za-z0-9+=,.@_/-]+$")


def principal_of(user_arn: str) -> str:
    """The principal a grant names for this caller: an assumed role's session ARN becomes its role's ARN (the
    session name is the caller's choice, the role is what the merchant registered); anything else as it is."""
    assumed = _ASSUMED_ROLE.match(user_arn)
    if assumed:
        partition, account, role = assumed.groups()
        return f"arn:{partition}:iam::{account}:role/{role}"
    return user_arn


def valid_principal(arn: str) -> bool:
    """An IAM user, role or assumed-role ARN, in any partition (aws, aws-cn, aws-us-gov)."""
    return bool(_PRINCIPAL.match(arn))


def may_act(granted: Collection[str], merchant_ids: Iterable[str]) -> list[str]:
    """The merchant ids of `merchant_ids` the grant does not cover ([] = may act for all of them)."""
    if EVERY_MERCHANT in granted:
        return []
    return sorted({m for m in merchant_ids if m not in granted})
