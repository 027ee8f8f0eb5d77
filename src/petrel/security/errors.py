"""Security errors: a failed login and a refused permission, each one line for the client."""

from __future__ import annotations

from petrel.errors import PetrelError

__all__ = ["AuthenticationFailed", "NotAuthorized", "SecurityError"]


class SecurityError(PetrelError):
    """Base class of the errors a client gets back from the security checks."""


class AuthenticationFailed(SecurityError):
    """The credentials were refused (unknown user, wrong password, anonymous not allowed)."""


class NotAuthorized(SecurityError):
    """``user`` lacks ``permission`` on ``address``."""

    def __init__(self, permission: str, address: str, user: str | None) -> None:
        self.permission = permission
        self.address = address
        self.user = user
        who = f"user {user!r}" if user is not None else "an anonymous user"
        super().__init__(f"{who} lacks permission {permission!r} on address {address!r}")
