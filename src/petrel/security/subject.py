"""Who is connected: a user (None when anonymous) and the roles permissions are granted to."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS_USER", "INTERNAL", "INTERNAL_ROLE", "Subject"]

#: The role only the cluster's own subject holds; names starting with ``$`` are reserved, so
#: no users file or ``security_settings`` entry can grant it.
INTERNAL_ROLE = "$internal"
#: How an anonymous subject's user shows in logs.
ANONYMOUS_USER = "<anonymous>"


@dataclass(frozen=True, slots=True)
class Subject:
    """A logged-in client; ``user is None`` is anonymous."""

    user: str | None
    roles: frozenset[str]
    remote: str = ""

    @property
    def internal(self) -> bool:
        """The cluster's own subject (bridges, replication, scale-down): allowed everything."""
        return INTERNAL_ROLE in self.roles

    @property
    def name(self) -> str:
        """The user as logs show it."""
        return self.user if self.user is not None else ANONYMOUS_USER


#: The cluster's own subject: a node that presented the cluster user and password.
INTERNAL = Subject("$cluster", frozenset({INTERNAL_ROLE}))
