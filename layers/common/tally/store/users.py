"""The console's people: the Cognito user pool (template.yaml ConsoleUserPool), its two groups, sign-in.

`tally console add-user`, `make run`'s printed login and the console's sign-in form all go through this
class: one way to create a user, one way to sign in.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ParamValidationError

GROUPS = ("viewers", "operators")


class SignInFailed(Exception):
    """Wrong user name or password, or a user who must first set a password: never says which."""


class MfaRequired(Exception):
    """The password was right and the user has TOTP: the code comes next (`session` carries the sign-in)."""

    def __init__(self, session: str):
        super().__init__("a TOTP code is required")
        self.session = session


@dataclass(frozen=True)
class Tokens:
    id_token: str
    expires_in: int
    refresh_token: str = ""
    access_token: str = ""  # the user's own Cognito calls (TOTP enrolment), never stored


def new_password(length: int = 20) -> str:
    """Meets the pool's policy (12+, upper, lower, digit) with room to spare."""
    alphabet = string.ascii_letters + string.digits
    while True:
        word = "".join(secrets.choice(alphabet) for _ in range(length))
        if (
            any(c.islower() for c in word)
            and any(c.isupper() for c in word)
            and any(c.isdigit() for c in word)
        ):
            return word


class ConsoleUsers:
    def __init__(self, cognito: Any, user_pool_id: str, client_id: str):
        self.cognito = cognito
        self.pool = user_pool_id
        self.client = client_id

    def add(self, username: str, group: str, *, password: str | None = None, email: str | None = None) -> str:
        """Create (or reset) a user with a permanent password in exactly one group; returns the password."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, not {group!r}")
        password = password or new_password()
        attributes = [{"Name": "email", "Value": email}] if email else []
        try:
            self.cognito.admin_create_user(
                UserPoolId=self.pool,
                Username=username,
                UserAttributes=attributes,
                MessageAction="SUPPRESS",  # the person who runs the command hands the password over
            )
        except self.cognito.exceptions.UsernameExistsException:
            pass
        self.cognito.admin_set_user_password(
            UserPoolId=self.pool, Username=username, Password=password, Permanent=True
        )
        for other in GROUPS:
            if other != group:
                self.cognito.admin_remove_user_from_group(
                    UserPoolId=self.pool, Username=username, GroupName=other
                )
        self.cognito.admin_add_user_to_group(UserPoolId=self.pool, Username=username, GroupName=group)
        return password

    def sign_in(self, username: str, password: str) -> Tokens:
        try:
            answer = self.cognito.initiate_auth(
                ClientId=self.client,
                AuthFlow="USER_PASSWORD_AUTH",
                AuthParameters={"USERNAME": username, "PASSWORD": password},
            )
        except (
            self.cognito.exceptions.NotAuthorizedException,
            self.cognito.exceptions.UserNotFoundException,
            self.cognito.exceptions.UserNotConfirmedException,
            self.cognito.exceptions.PasswordResetRequiredException,
        ):
            raise SignInFailed from None
        if answer.get("ChallengeName") == "SOFTWARE_TOKEN_MFA":
            raise MfaRequired(str(answer["Session"]))
        return _tokens(answer)

    # ------------------------------------------------------------ TOTP (docs/alerts.md "Hardening")

    def answer_mfa(self, username: str, session: str, code: str) -> Tokens:
        """The second step of a sign-in: the authenticator app's code for the session sign_in started."""
        try:  # the session and the code come from a form: anything Cognito's client refuses is a failed sign-in
            answer = self.cognito.respond_to_auth_challenge(
                ClientId=self.client,
                ChallengeName="SOFTWARE_TOKEN_MFA",
                Session=session,
                ChallengeResponses={"USERNAME": username, "SOFTWARE_TOKEN_MFA_CODE": code},
            )
        except (
            self.cognito.exceptions.NotAuthorizedException,
            self.cognito.exceptions.CodeMismatchException,
            self.cognito.exceptions.ExpiredCodeException,
            self.cognito.exceptions.ResourceNotFoundException,
            ParamValidationError,
        ):
            raise SignInFailed from None
        return _tokens(answer)

    def start_totp(self, access_token: str) -> str:
        """Enrolment, first step: the secret the person adds to an authenticator app."""
        return str(self.cognito.associate_software_token(AccessToken=access_token)["SecretCode"])

    def confirm_totp(self, access_token: str, code: str) -> None:
        """Enrolment, second step: the app's first code; TOTP becomes the user's sign-in second factor."""
        try:
            answer = self.cognito.verify_software_token(
                AccessToken=access_token, UserCode=code, FriendlyDeviceName="console"
            )
        except (
            self.cognito.exceptions.CodeMismatchException,
            self.cognito.exceptions.EnableSoftwareTokenMFAException,
            self.cognito.exceptions.NotAuthorizedException,
            ParamValidationError,
        ):
            raise SignInFailed from None
        if answer.get("Status") != "SUCCESS":
            raise SignInFailed
        self.cognito.set_user_mfa_preference(
            AccessToken=access_token, SoftwareTokenMfaSettings={"Enabled": True, "PreferredMfa": True}
        )

    def current(self, username: str) -> frozenset[str] | None:
        """The user's groups now (not when its token was issued), or None when it no longer exists or is
        disabled: two Cognito admin reads (AdminGetUser, AdminListGroupsForUser)."""
        try:
            user = self.cognito.admin_get_user(UserPoolId=self.pool, Username=username)
        except self.cognito.exceptions.UserNotFoundException:
            return None
        if not user.get("Enabled", True):
            return None
        answer = self.cognito.admin_list_groups_for_user(UserPoolId=self.pool, Username=username, Limit=10)
        return frozenset(g["GroupName"] for g in answer.get("Groups", []) if g.get("GroupName") in GROUPS)

    # ------------------------------------------------------------ the person's language (docs/language.md)

    def locale(self, username: str) -> str | None:
        """The user's standard attribute `locale` (zh-CN, en), or None when not set or the user is gone."""
        try:
            user = self.cognito.admin_get_user(UserPoolId=self.pool, Username=username)
        except self.cognito.exceptions.UserNotFoundException:
            return None
        found = {a["Name"]: a.get("Value") for a in user.get("UserAttributes", [])}
        return found.get("locale") or None

    def set_locale(self, username: str, locale: str) -> None:
        """The language the console speaks to this user from now on (AdminUpdateUserAttributes)."""
        self.cognito.admin_update_user_attributes(
            UserPoolId=self.pool, Username=username, UserAttributes=[{"Name": "locale", "Value": locale}]
        )


def _tokens(answer: dict[str, Any]) -> Tokens:
    result = answer.get("AuthenticationResult")
    if not result:  # a challenge (NEW_PASSWORD_REQUIRED …): `tally console add-user` sets a permanent one
        raise SignInFailed
    return Tokens(
        result["IdToken"],
        int(result.get("ExpiresIn", 3600)),
        result.get("RefreshToken", ""),
        result.get("AccessToken", ""),
    )
