"""`Security`: the broker's logins and permission checks (``broker.security``).

A login gives a `Subject`: from a user and password checked against the users file, from a
TLS client certificate mapped to a user, as anonymous (when allowed) or, for the cluster user
and password, as `INTERNAL`.  `check` raises `NotAuthorized` and writes one line on the
``petrel.audit`` logger for each refusal (allowed actions at DEBUG).  With security disabled,
every login succeeds and every check passes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import secrets
import sys
from pathlib import Path

from petrel.security.errors import AuthenticationFailed, NotAuthorized
from petrel.security.permissions import ADMIN_ROLE, Authorizer
from petrel.security.subject import INTERNAL, Subject
from petrel.security.users import UserStore

__all__ = ["Security", "users_file_of"]

log = logging.getLogger("petrel.security")
audit = logging.getLogger("petrel.audit")

_REFUSED = "invalid user or password"


def users_file_of(config) -> Path:
    """The users file a `BrokerConfig` names (default ``<data_dir>/users.toml``)."""
    users_file = config.security.users_file
    return Path(users_file) if users_file is not None else Path(config.data_dir) / "users.toml"


def _dn(subject_dn: str) -> str:
    return ",".join(part.strip() for part in subject_dn.split(","))


class Security:
    """Logins and permission checks for one broker."""

    def __init__(self, *, enabled: bool = True, users: UserStore | None = None, settings=None,
                 allow_anonymous: bool = False, anonymous_role: str = "anonymous",
                 certificate_users: dict[str, str] | None = None, cluster_user: str | None = None,
                 cluster_password: str | None = None, login_failure_delay: float = 1.0, ldap=None) -> None:
        self.enabled = enabled
        self.users = users if users is not None else UserStore()
        self.authorizer = Authorizer(settings or {})
        self.allow_anonymous = allow_anonymous
        self.anonymous_role = anonymous_role
        self.certificate_users = {_dn(dn): user for dn, user in (certificate_users or {}).items()}
        self.cluster_user = cluster_user
        self.cluster_password = cluster_password
        self.login_failure_delay = login_failure_delay
        self.ldap = ldap  # a petrel.security.ldap.LdapLogin ([security.ldap]), or None

    @classmethod
    def from_config(cls, config) -> Security:
        """The security a `BrokerConfig` describes (reads nothing yet: see `prepare`)."""
        from petrel.cluster.config import DEFAULT_CLUSTER_PASSWORD

        sec = config.security
        ldap = None
        if sec.ldap is not None and config.security_enabled:
            from petrel.security.ldap import LdapLogin

            ldap = LdapLogin(sec.ldap)
        return cls(
            enabled=config.security_enabled,
            users=UserStore(users_file_of(config)),
            settings=config.security_settings,
            allow_anonymous=sec.allow_anonymous,
            anonymous_role=sec.anonymous_role,
            certificate_users=sec.certificate_users,
            cluster_user=config.cluster_user,
            # the well-known default logs nobody in as the cluster
            cluster_password=None if config.cluster_password == DEFAULT_CLUSTER_PASSWORD else config.cluster_password,
            login_failure_delay=sec.login_failure_delay / 1000,
            ldap=ldap,
        )

    def close(self) -> None:
        """The broker stops: the LDAP login threads end (a login under way within its timeout)."""
        if self.ldap is not None:
            self.ldap.close()

    def prepare(self) -> str | None:
        """Read the users file; with none yet, create it with user ``admin`` and a generated
        password, shown once in the log (on stderr if the log level hides warnings) and
        returned. Nothing when disabled."""
        if not self.enabled or self.users.path is None:
            return None
        self.users.reload()
        if self.users.path.exists() or (self.ldap is not None and self.ldap.only):  # LDAP has the admins
            if not self.users.users and not self.allow_anonymous and self.ldap is None:
                log.warning("the users file %s has no users and allow_anonymous is false: no client can log in",
                            self.users.path, extra={"event": "security.no_users"})
            return None
        password = secrets.token_urlsafe(12)
        self.users.add(ADMIN_ROLE, password, [ADMIN_ROLE])
        if not self.users.save(exclusive=True):  # another process created it first
            self.users.reload()
            return None
        line = (f'created the users file {self.users.path} with user "admin" (role admin) and password '
                f'"{password}"; it is shown only this once: change it with '
                f"`petrel user reset admin --user-file {self.users.path}`")
        if log.isEnabledFor(logging.WARNING):  # `petrel run` logs to stderr
            log.warning("%s", line, extra={"event": "security.admin_created"})
        else:  # a log level that hides it: shown anyway
            print(f"Petrel: {line}", file=sys.stderr, flush=True)
        return password

    # -- logins -----------------------------------------------------------------------------

    def login(self, user: str | None, password: str | None, remote: str = "") -> Subject:
        """The subject for these credentials; raises `AuthenticationFailed` (logged).

        No user (None or "") is anonymous. The cluster user with the cluster password is
        `INTERNAL`. Blocking (scrypt): an event loop calls `login_async`."""
        if not self.enabled:
            return Subject(user or None, frozenset(), remote)
        if not user:
            if self.allow_anonymous:
                return Subject(None, frozenset({self.anonymous_role}), remote)
            self._refuse(None, remote, "anonymous access is not allowed: log in with a user and password")
        password = password or ""
        if user == self.cluster_user and user not in self.users.users:
            if self.cluster_password is None:
                self._refuse(user, remote, "the cluster user cannot log in while cluster_password is the "
                                           "well-known default: set the same secret cluster_password on every node")
            if hmac.compare_digest(password.encode(), self.cluster_password.encode()):
                return dataclasses.replace(INTERNAL, remote=remote)
            self._refuse(user, remote, _REFUSED)
        if self.ldap is not None and self.ldap.only:
            return self._login_ldap(user, password, remote)
        try:
            self.users.refresh()
        except Exception as exc:  # a broken users file refuses logins, never the broker
            log.error("cannot read the users file: %s", exc, extra={"event": "security.users_file"})
            self._refuse(user, remote, "the broker cannot read its users file")
        if self.ldap is not None and user not in self.users.users:
            return self._login_ldap(user, password, remote)
        found = self.users.authenticate(user, password)
        if found is None:
            self._refuse(user, remote, _REFUSED)
        return dataclasses.replace(found, remote=remote)

    async def login_async(self, user: str | None, password: str | None, remote: str = "") -> Subject:
        """`login` off the event loop (at once for a password verified before); a refusal comes
        after ``login_failure_delay``."""
        if not self.enabled:
            return Subject(user or None, frozenset(), remote)
        by_ldap = False
        if user and password and user != self.cluster_user:  # a password verified before: no thread
            try:
                self.users.refresh()
                by_ldap = self.ldap is not None and (self.ldap.only or user not in self.users.users)
                known = self.ldap.remembered(user, password) if by_ldap else self.users.remembered(user, password)
            except Exception:
                known = None  # (login says why)
            if known is not None:
                return dataclasses.replace(known, remote=remote)
        loop = asyncio.get_running_loop()
        try:  # LDAP logins wait on their own threads: a slow server holds up no other login
            return await loop.run_in_executor(self.ldap.executor if by_ldap else None, self.login, user, password,
                                              remote)
        except AuthenticationFailed:
            await asyncio.sleep(self.login_failure_delay)
            raise

    def _login_ldap(self, user: str, password: str, remote: str) -> Subject:
        from petrel.security.ldap import LdapRefused

        try:
            return dataclasses.replace(self.ldap.authenticate(user, password), remote=remote)
        except LdapRefused as exc:
            self._refuse(user, remote, str(exc))

    def login_certificate(self, subject_dn: str, remote: str = "") -> Subject:
        """The user a TLS client certificate's subject maps to (``[security] certificate_users``)."""
        if not self.enabled:
            return Subject(None, frozenset(), remote)
        user = self.certificate_users.get(_dn(subject_dn))
        if user is None:
            self._refuse(subject_dn, remote, f"no user is mapped to the certificate subject {subject_dn!r}")
        self.users.refresh()
        if user not in self.users.users:
            self._refuse(user, remote, f"the certificate's user {user!r} is not in the users file")
        return Subject(user, self.users.roles_of(user), remote)

    def _refuse(self, user: str | None, remote: str, why: str) -> None:
        log.warning("login refused for %s from %s: %s", repr(user) if user else "an anonymous client",
                    remote or "?", why, extra={"event": "security.login_failed"})
        audit.warning("user=%s remote=%s action=login result=refused", user or "<anonymous>", remote or "?")
        raise AuthenticationFailed(f"login refused: {why}")

    # -- permissions ------------------------------------------------------------------------

    def allowed(self, subject: Subject, permission: str, address: str) -> bool:
        """True if ``subject`` may do ``permission`` on ``address`` (no log)."""
        return not self.enabled or self.authorizer.allowed(subject, permission, address)

    def is_internal(self, subject: Subject | None) -> bool:
        """May ``subject`` send cluster frames (bridges, replication, scale-down)?"""
        return not self.enabled or (subject is not None and subject.internal)

    def check(self, subject: Subject, permission: str, address: str) -> None:
        """Raise `NotAuthorized` (and write an audit line) unless ``subject`` may do it."""
        if not self.enabled:
            return
        if self.authorizer.allowed(subject, permission, address):
            if audit.isEnabledFor(logging.DEBUG):
                audit.debug("user=%s remote=%s action=%s address=%s result=allowed", subject.name,
                            subject.remote or "?", permission, address)
            return
        audit.warning("user=%s remote=%s action=%s address=%s result=refused", subject.name,
                      subject.remote or "?", permission, address)
        raise NotAuthorized(permission, address, subject.user)
