"""The users of a local cluster: one users file for every node, made by `petrel cluster up`.

Every node's ``broker.toml`` names ``<data root>/users.toml``, so a user added with
``petrel user add --user-file <data root>/users.toml`` logs in on any node, and the cluster
has one ``admin``, not one per node with its password in that node's log.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from petrel.security.users import UserStore

__all__ = ["USERS_FILE", "ensure_users", "users_file"]

USERS_FILE = "users.toml"
ADMIN = "admin"


def users_file(data_root: Path | str) -> Path:
    return Path(data_root).resolve() / USERS_FILE


def ensure_users(data_root: Path | str) -> str | None:
    """Create the cluster's users file with user ``admin`` (role admin) and a generated password,
    unless it exists; the line that tells the password (shown once), or None when it existed."""
    path = users_file(data_root)
    if path.exists():
        return None
    store = UserStore(path)
    password = secrets.token_urlsafe(12)
    store.add(ADMIN, password, [ADMIN])
    if not store.save(exclusive=True):
        return None
    return (f'created the users file {path} with user "{ADMIN}" (role admin) and password "{password}" for '
            f"every node; it is shown only this once: change it with `petrel user reset {ADMIN} --user-file {path}`")
