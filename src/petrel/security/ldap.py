"""`LdapLogin`: users log in by binding to an LDAP server as themselves; their roles are the
groups they are a member of (``[security.ldap]``, `petrel.security.config.LdapModel`).

A login finds the user's DN (``user_dn_template``, or a search under ``user_search_base``
with ``bind_dn``), binds as that DN with the password, then searches ``group_search_base``
for the user's groups: the values of ``role_attribute`` (``cn``) are its roles.  User input is
escaped into DNs (RFC 4514) and filters (RFC 4515); an empty password is refused before any
bind (an LDAP "unauthenticated bind" succeeds with any DN).  Every call is blocking and bounded
by ``timeout``: `Security.login_async` runs it on this module's own threads, so a slow server
never holds up users-file logins.  A server that cannot be reached refuses the login with a
message naming it, logged once until it answers again.  A successful login is remembered
``cache_seconds`` (keyed by a keyed digest of the password, never the password).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import socket
import ssl
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

with warnings.catch_warnings():  # ldap3 2.9 imports names pyasn1 0.6 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    from ldap3 import BASE, NONE, SUBTREE, Connection, Server, Tls
    from ldap3.core.exceptions import LDAPException, LDAPSASLPrepError
    from ldap3.utils.conv import escape_filter_chars
    from ldap3.utils.dn import escape_rdn

from petrel.security.config import LdapModel
from petrel.security.subject import Subject

__all__ = ["LdapLogin", "LdapRefused"]

log = logging.getLogger("petrel.security.ldap")

_INVALID_CREDENTIALS = 49
_UNAVAILABLE = frozenset({51, 52, 80})  # busy, unavailable, other (the server's own trouble)
_MAX_USER = 256
_WORKERS = 8
_CACHE_MAX = 10_000


class LdapRefused(Exception):
    """The login is refused; the message says why (for the client and the log)."""


class _Unavailable(Exception):
    pass


def _role(value: object) -> str | None:
    role = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if not role.strip() or role.startswith("$") or "," in role or any(ord(c) < 32 for c in role):
        return None  # not a role name ($ names are reserved for the cluster)
    return role


def _name_attributes(pattern: str) -> list[str]:
    """The attributes ``pattern`` (a DN template or a filter) matches ``{user}`` with: uid in
    ``uid={user},ou=people`` and ``(&(objectClass=person)(uid={user}))``."""
    return re.findall(r"([A-Za-z][\w.;-]*)=\{user\}", pattern)


def _names(entry: dict, attributes: list[str], user: str) -> bool:
    """Is ``user`` exactly (case and spaces included) a value of one of ``attributes`` of ``entry``?"""
    if not attributes:
        return True
    found = {key.lower(): values for key, values in entry.get("raw_attributes", {}).items()}
    for attribute in attributes:
        for value in found.get(attribute.lower(), ()):
            if (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)) == user:
                return True
    return False


class LdapLogin:
    """Logins against one LDAP server."""

    def __init__(self, model: LdapModel) -> None:
        self.model = model
        self.only = model.ldap_only
        self.url = model.url
        #: LDAP logins wait on these threads, not on the event loop's default executor.
        self.executor = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="petrel-ldap")
        self._key = os.urandom(32)
        self._cache: dict[tuple[str, bytes], tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()
        self._down = False  # an episode of failures is being reported
        # LDAP matches names ignoring case and extra spaces: the name given must be the entry's
        # own value of the attribute it was matched by (uid), so one entry has one Petrel user
        self._template_names = _name_attributes(model.user_dn_template or "")
        self._search_names = _name_attributes(model.user_search_filter)
        self._tls = None
        if model.url.startswith("ldaps://"):
            self._tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(model.ca_file) if model.ca_file else None)

    # -- the cache ----------------------------------------------------------------------------

    def _digest(self, password: str) -> bytes:
        return hmac.digest(self._key, password.encode(), "sha256")

    def remembered(self, user: str, password: str) -> Subject | None:
        """``user`` if this password logged in less than ``cache_seconds`` ago (no LDAP call)."""
        if not self._cache or not password:
            return None
        found = self._cache.get((user, self._digest(password)))
        if found is None or found[0] < time.monotonic():
            return None
        return Subject(user, found[1])

    def _remember(self, user: str, password: str, roles: frozenset[str]) -> None:
        if self.model.cache_seconds <= 0:
            return
        now = time.monotonic()
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache = {k: v for k, v in self._cache.items() if v[0] >= now}
                if len(self._cache) >= _CACHE_MAX:
                    self._cache.clear()
            self._cache[(user, self._digest(password))] = (now + self.model.cache_seconds, roles)

    # -- the login ----------------------------------------------------------------------------

    def authenticate(self, user: str, password: str) -> Subject:
        """``user`` with the roles of its groups; raises `LdapRefused` (blocking, bounded by
        ``timeout`` per LDAP operation)."""
        if not password:
            raise LdapRefused("invalid user or password (an empty password never logs in through LDAP)")
        if not user or len(user) > _MAX_USER or any(ord(c) < 32 for c in user):
            raise LdapRefused("invalid user or password")
        known = self.remembered(user, password)
        if known is not None:
            return known
        try:
            roles = self._bind_and_search(user, password)
        except _Unavailable as exc:
            self._report_down(str(exc))
            raise LdapRefused(str(exc)) from None
        self._report_up()
        if roles is None:
            raise LdapRefused("invalid user or password")
        self._remember(user, password, roles)
        return Subject(user, roles)

    def _bind_and_search(self, user: str, password: str) -> frozenset[str] | None:
        model = self.model
        service = None
        try:
            if model.bind_dn is not None:
                service = self._bound(model.bind_dn, model.bind_password or "")
                if service is None:
                    raise _Unavailable(f"the LDAP server at {self.url} refused bind_dn {model.bind_dn!r}: "
                                       "check [security.ldap] bind_dn and bind_password")
            if model.user_dn_template is not None:
                dn = model.user_dn_template.replace("{user}", escape_rdn(user))
            else:
                dn = self._find_user(service, user)
                if dn is None:
                    return None
            own = self._bound(dn, password)
            if own is None:
                return None
            try:
                if model.user_dn_template is not None and not self._named(own, dn, user):
                    return None
                return self._groups(service or own, dn)
            finally:
                own.unbind()
        finally:
            if service is not None:
                service.unbind()

    def _connection(self, dn: str | None, password: str | None) -> Connection:
        # a new Server each time: ldap3 marks an address that failed once unavailable for a while
        server = Server(self.url, use_ssl=self._tls is not None, tls=self._tls, get_info=NONE,
                        connect_timeout=self.model.timeout)
        return Connection(server, user=dn, password=password, receive_timeout=self.model.timeout,
                          raise_exceptions=False, read_only=True, auto_referrals=False, auto_bind=False)

    def _bound(self, dn: str, password: str) -> Connection | None:
        """A connection bound as ``dn``, or None if the server refused the credentials."""
        conn = self._connection(dn, password)
        try:
            if conn.bind():
                return conn
            result = conn.result or {}
        except LDAPSASLPrepError:  # a password no LDAP bind can carry (control characters...)
            conn.unbind()
            return None
        except (LDAPException, OSError) as exc:
            conn.unbind()
            raise _Unavailable(self._why(exc)) from None
        conn.unbind()
        code = result.get("result")
        if code in _UNAVAILABLE:
            raise _Unavailable(f"the LDAP server at {self.url} cannot serve logins now: "
                               f"{result.get('description')} {result.get('message') or ''}".rstrip())
        if code != _INVALID_CREDENTIALS:
            log.info("LDAP bind as %r refused: %s %s", dn, result.get("description"), result.get("message") or "")
        return None

    def _search(self, conn: Connection, base: str, search_filter: str, attributes: list[str], *,
                scope: str = SUBTREE) -> list:
        try:
            ok = conn.search(base, search_filter, scope, attributes=attributes, size_limit=1000,
                             time_limit=self.model.timeout)
        except (LDAPException, OSError) as exc:
            raise _Unavailable(self._why(exc)) from None
        result = conn.result or {}
        if not ok and result.get("result") in _UNAVAILABLE:
            raise _Unavailable(f"the LDAP server at {self.url} cannot serve logins now: {result.get('description')}")
        return [entry for entry in conn.response or () if entry.get("type") == "searchResEntry"]

    def _find_user(self, service: Connection | None, user: str) -> str | None:
        conn = service or self._connection(None, None)  # without bind_dn: an anonymous search
        search_filter = self.model.user_search_filter.replace("{user}", escape_filter_chars(user))
        try:
            if service is None:
                conn.open()
            entries = self._search(conn, self.model.user_search_base or "", search_filter, self._search_names)
        except (LDAPException, OSError) as exc:
            raise _Unavailable(self._why(exc)) from None
        finally:
            if service is None:
                conn.unbind()
        if len(entries) != 1:
            if len(entries) > 1:
                log.warning("LDAP: %d entries match %s under %s: refusing the login", len(entries), search_filter,
                            self.model.user_search_base)
            return None
        if not _names(entries[0], self._search_names, user):
            return None
        return entries[0]["dn"]

    def _named(self, conn: Connection, dn: str, user: str) -> bool:
        """Does the entry at ``dn`` have ``user`` exactly as its name (see `_names`)?"""
        if not self._template_names:
            return True
        entries = self._search(conn, dn, "(objectClass=*)", self._template_names, scope=BASE)
        if not entries:
            log.warning("LDAP: %r cannot read its own entry's %s: refusing the login", dn, self._template_names)
        return bool(entries) and _names(entries[0], self._template_names, user)

    def _groups(self, conn: Connection, dn: str) -> frozenset[str]:
        if self.model.group_search_base is None:
            return frozenset()
        search_filter = self.model.group_search_filter.replace("{dn}", escape_filter_chars(dn))
        attribute = self.model.role_attribute
        roles = set()
        for entry in self._search(conn, self.model.group_search_base, search_filter, [attribute]):
            values = entry.get("raw_attributes", {}).get(attribute, [])
            roles.update(role for role in map(_role, values) if role is not None)
        return frozenset(roles)

    # -- the server's health ------------------------------------------------------------------

    def _why(self, exc: Exception) -> str:
        text = re.sub(r"""^[("',\s]+|[)"',\s]+$""", "", str(exc))  # ldap3 nests the cause in tuples
        verify = re.search(r"certificate verify failed: ([^(]*[^( ])", text)
        if verify:
            return (f"the LDAP server at {self.url} presented a certificate that does not verify "
                    f"({verify.group(1)}): check [security.ldap] ca_file")
        if "doesn't match any name" in text or "hostname mismatch" in text.lower():
            return f"the LDAP server at {self.url} presented a certificate for another host name"
        if isinstance(exc.__context__, socket.timeout) or "timed out" in text or "timeout" in text.lower():
            return f"the LDAP server at {self.url} did not answer within {self.model.timeout} s"
        if "refused" in text.lower():
            return f"the LDAP server at {self.url} refused the connection (is it running?)"
        return f"the LDAP server at {self.url} cannot be reached: {text}"

    def _report_down(self, why: str) -> None:
        with self._lock:
            first, self._down = not self._down, True
        if first:
            log.error("%s: LDAP logins are refused until it answers", why, extra={"event": "security.ldap_down"})

    def _report_up(self) -> None:
        if self._down:
            with self._lock:
                was, self._down = self._down, False
            if was:
                log.warning("the LDAP server at %s answers again", self.url, extra={"event": "security.ldap_up"})

    def close(self) -> None:
        """Let the login threads end (a login under way finishes within ``timeout``)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
