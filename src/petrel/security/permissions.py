"""Per-address permissions: which roles may do what on the addresses a pattern matches.

``security_settings`` maps an address pattern (the address-settings wildcards, `petrel.core.wildcard`)
to ``{permission: [roles]}``.  For an address, the most specific matching pattern wins outright,
with no inheritance from less specific ones (Artemis ``security-setting``): a permission that
pattern omits is refused.  Unless the settings name ``#`` themselves, ``#`` grants every
permission to role ``admin``, so the administrator keeps every address no pattern covers.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping

from petrel.core.wildcard import compile_pattern, specificity
from petrel.security.subject import Subject

__all__ = ["ADMIN_ROLE", "PERMISSIONS", "Authorizer", "default_settings", "validate_settings"]

#: Artemis's permission names.
PERMISSIONS = (
    "send", "consume", "browse",
    "createAddress", "deleteAddress",
    "createDurableQueue", "deleteDurableQueue",
    "createNonDurableQueue", "deleteNonDurableQueue",
    "manage", "view", "edit",
)
ADMIN_ROLE = "admin"
_CACHE_SIZE = 10_000
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def default_settings(role: str = ADMIN_ROLE) -> dict[str, list[str]]:
    """Every permission granted to ``role``."""
    return {permission: [role] for permission in PERMISSIONS}


def validate_settings(settings: Mapping[str, Mapping[str, Iterable[str]]]) -> dict[str, dict[str, frozenset[str]]]:
    """``settings`` checked and normalised; a ``ValueError`` names the bad pattern and key."""
    out: dict[str, dict[str, frozenset[str]]] = {}
    for pattern, grants in settings.items():
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("an address pattern must be a non-empty string")
        where = json.dumps(pattern, ensure_ascii=False)
        if not isinstance(grants, Mapping):
            raise ValueError(f"{where}: must be a table of permission = [roles]")
        table: dict[str, frozenset[str]] = {}
        for permission, roles in grants.items():
            key = f"{where}.{permission if _BARE.fullmatch(str(permission)) else json.dumps(str(permission))}"
            if permission not in PERMISSIONS:
                close = difflib.get_close_matches(str(permission), PERMISSIONS, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else f" (one of: {', '.join(PERMISSIONS)})"
                raise ValueError(f"{key}: unknown permission{hint}")
            if isinstance(roles, str) or not isinstance(roles, Iterable):
                raise ValueError(f"{key}: must be a list of role names")
            names = list(roles)
            for role in names:
                if not isinstance(role, str) or not role or role.startswith("$"):
                    shown = json.dumps(role) if isinstance(role, str) else repr(role)
                    raise ValueError(f"{key}: {shown} is not a role name (a non-empty string not starting with $)")
            table[permission] = frozenset(names)
        out[pattern] = table
    return out


class Authorizer:
    """Decides ``allowed(subject, permission, address)`` from ``security_settings``.

    Decisions are cached per (roles, permission, address): a subject's roles are part of the
    key, so a user given other roles (a new login) never sees a stale decision.
    """

    def __init__(self, settings: Mapping[str, Mapping[str, Iterable[str]]] | None = None) -> None:
        self._cache: dict[tuple[frozenset[str], str, str], bool] = {}
        self._patterns: list[tuple[object, dict[str, frozenset[str]]]] = []
        self.settings: dict[str, dict[str, frozenset[str]]] = {}
        self.update(settings or {})

    def update(self, settings: Mapping[str, Mapping[str, Iterable[str]]]) -> None:
        """Replace the settings (a reload); forgets every cached decision."""
        table = validate_settings(settings)
        if "#" not in table:
            table["#"] = validate_settings({"#": default_settings()})["#"]
        self.settings = table
        self._patterns = [(compile_pattern(p), table[p]) for p in sorted(table, key=specificity)]
        self._cache.clear()

    def grants(self, address: str) -> tuple[str, dict[str, frozenset[str]]]:
        """The pattern that decides for ``address`` and its table."""
        for pattern in sorted(self.settings, key=specificity):
            if compile_pattern(pattern)(address):
                return pattern, self.settings[pattern]
        return "", {}

    def allowed(self, subject: Subject, permission: str, address: str) -> bool:
        """True if one of ``subject``'s roles holds ``permission`` on ``address``."""
        key = (subject.roles, permission, address)
        decision = self._cache.get(key)
        if decision is None:
            decision = subject.internal or self._decide(subject.roles, permission, address)
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, roles: frozenset[str], permission: str, address: str) -> bool:
        if permission not in PERMISSIONS:
            raise ValueError(f"unknown permission {permission!r}")
        for match, table in self._patterns:
            if match(address):
                granted = table.get(permission)
                return granted is not None and not granted.isdisjoint(roles)
        return False
