"""The users file: user names, salted scrypt password hashes and roles, in TOML.

::

    # Petrel users: edit with `petrel user add|list|rm|reset`
    [users.admin]
    password = "scrypt$16384$8$1$<salt, base64>$<hash, base64>"
    roles = ["admin"]

Passwords are never stored: only ``hashlib.scrypt`` of a random 16-byte salt (standard
library).  The file is written whole to a temporary file and renamed, readable by its owner
only, so a broker reading it meanwhile sees the old or the new version.  A store re-reads the
file when it changed on disk (`refresh`), so ``petrel user`` takes effect on the next login.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

from petrel.errors import ConfigError
from petrel.security.subject import Subject

__all__ = ["User", "UserStore", "hash_password", "verify_password"]

_SCHEME = "scrypt"
_N, _R, _P = 2 ** 14, 8, 1  # about 16 MiB and tens of milliseconds per hash
_SALT_BYTES = 16
_KEY_BYTES = 32
_HEADER = "# Petrel users: passwords are salted scrypt hashes; edit with `petrel user add|list|rm|reset`\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, n: int = _N, r: int = _R, p: int = _P) -> str:
    """A new salted hash of ``password``: ``scrypt$n$r$p$salt$key``."""
    salt = os.urandom(_SALT_BYTES)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=_KEY_BYTES, maxmem=256 * 1024 * 1024)
    return f"{_SCHEME}${n}${r}${p}${_b64(salt)}${_b64(key)}"


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` hashes to ``stored`` (a malformed ``stored`` is False)."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != _SCHEME:
            return False
        expected = base64.b64decode(key, validate=True)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt, validate=True), n=int(n), r=int(r),
                             p=int(p), dklen=len(expected), maxmem=256 * 1024 * 1024)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def _check_name(user: str) -> str:
    if not isinstance(user, str) or not user.strip() or any(ord(c) < 32 for c in user):
        raise ValueError(f"{user!r} is not a user name (a non-empty string without control characters)")
    return user


def _check_roles(roles: list[str] | tuple[str, ...] | frozenset[str]) -> tuple[str, ...]:
    names = []
    for role in roles:
        if not isinstance(role, str) or not role.strip() or role.startswith("$") or "," in role:
            raise ValueError(f"{role!r} is not a role name (a non-empty string, no comma, not starting with $)")
        if role not in names:
            names.append(role)
    return tuple(names)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    roles: tuple[str, ...]


class UserStore:
    """The users of one users file (or of none: an empty store kept in memory)."""

    def __init__(self, path: Path | str | None = None, users: dict[str, User] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.users: dict[str, User] = dict(users or {})
        self._seen: tuple[int, int, int] | None = None  # the file's (inode, size, mtime) when read
        self._key = os.urandom(32)  # keys the verified-password cache
        self._verified: dict[tuple[str, bytes], str] = {}  # (user, keyed digest of password) -> hash

    # -- the file ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | str) -> UserStore:
        """The users in ``path``; a missing file is an empty store (``ConfigError`` if unreadable)."""
        store = cls(path)
        store.reload()
        return store

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def reload(self) -> None:
        """Read the file again (``ConfigError`` naming the file and the bad entry)."""
        if self.path is None:
            return
        seen = self._stat()
        if seen is None:
            self.users, self._seen = {}, None
            return
        try:
            with self.path.open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read the users file: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: invalid TOML: {exc}") from None
        self.users = self._parse(data)
        self._seen = seen
        self._verified.clear()

    def _parse(self, data: dict) -> dict[str, User]:
        extra = set(data) - {"users"}
        if extra:
            raise ConfigError(f"{self.path}: {sorted(extra)[0]}: unknown key (a users file holds [users.<name>] tables)")
        users: dict[str, User] = {}
        for name, entry in data.get("users", {}).items():
            where = f"{self.path}: users.{json.dumps(name)}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: must be a table with password and roles")
            unknown = set(entry) - {"password", "roles"}
            if unknown:
                raise ConfigError(f"{where}.{sorted(unknown)[0]}: unknown key (password, roles)")
            password, roles = entry.get("password"), entry.get("roles", [])
            if not isinstance(password, str) or not password.startswith(_SCHEME + "$"):
                raise ConfigError(f"{where}.password: must be a scrypt hash written by `petrel user`")
            if not isinstance(roles, list):
                raise ConfigError(f"{where}.roles: must be a list of role names")
            try:
                users[_check_name(name)] = User(name, password, _check_roles(roles))
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        return users

    def refresh(self) -> None:
        """Re-read the file if it changed on disk since it was read."""
        if self.path is not None and self._stat() != self._seen:
            self.reload()

    def save(self, *, exclusive: bool = False) -> bool:
        """Write the file (atomically, mode 0600); with ``exclusive``, only if there is none yet
        (False if another process created it first)."""
        if self.path is None:
            raise ValueError("this user store has no file")
        lines = [_HEADER]
        for user in sorted(self.users.values(), key=lambda u: u.name):
            roles = ", ".join(json.dumps(role, ensure_ascii=False) for role in user.roles)
            lines.append(f"\n[users.{json.dumps(user.name, ensure_ascii=False)}]\n"
                         f"password = {json.dumps(user.password_hash)}\n"
                         f"roles = [{roles}]\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(lines))
                fh.flush()
                os.fsync(fh.fileno())
            if exclusive:
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    return False
                finally:
                    tmp.unlink(missing_ok=True)
            else:
                os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._seen = self._stat()
        self._verified.clear()
        return True

    # -- users ------------------------------------------------------------------------------

    def add(self, user: str, password: str, roles: list[str] | tuple[str, ...]) -> None:
        """A new user (``ValueError`` if it exists)."""
        if _check_name(user) in self.users:
            raise ValueError(f"user {user!r} already exists")
        self.users[user] = User(user, hash_password(password), _check_roles(roles))

    def remove(self, user: str) -> None:
        """Remove ``user`` (``KeyError`` if there is none)."""
        if user not in self.users:
            raise KeyError(f"no user {user!r}")
        del self.users[user]

    def reset(self, user: str, password: str | None = None, roles: list[str] | tuple[str, ...] | None = None) -> None:
        """A new password and/or new roles for ``user`` (``KeyError`` if there is none)."""
        old = self.users.get(user)
        if old is None:
            raise KeyError(f"no user {user!r}")
        self.users[user] = User(user, hash_password(password) if password is not None else old.password_hash,
                                _check_roles(roles) if roles is not None else old.roles)

    def roles_of(self, user: str) -> frozenset[str]:
        """``user``'s roles (empty for an unknown user)."""
        found = self.users.get(user)
        return frozenset(found.roles) if found is not None else frozenset()

    def remembered(self, user: str, password: str) -> Subject | None:
        """``user`` if this password was verified before and has not changed since (no scrypt)."""
        found = self.users.get(user)
        if found is None or not self._verified:
            return None
        digest = hmac.digest(self._key, password.encode(), "sha256")
        if self._verified.get((user, digest)) == found.password_hash:
            return Subject(user, frozenset(found.roles))
        return None

    def authenticate(self, user: str, password: str) -> Subject | None:
        """``user`` with its roles if ``password`` is right, else None.

        A successful check is remembered (keyed by a per-process keyed digest of the password,
        never the password) until the user's hash changes, so reconnecting costs no scrypt."""
        found = self.users.get(user)
        digest = hmac.digest(self._key, password.encode(), "sha256")
        if found is not None and self._verified.get((user, digest)) == found.password_hash:
            return Subject(user, frozenset(found.roles))
        if found is None:
            verify_password(password, _dummy_hash())  # the same work as for a known user
            return None
        if not verify_password(password, found.password_hash):
            return None
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[(user, digest)] = found.password_hash
        return Subject(user, frozenset(found.roles))


@functools.cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_hex(8))
