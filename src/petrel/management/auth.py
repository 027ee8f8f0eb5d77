"""Who may use the management API: HTTP basic or a bearer token, then ``view`` or ``manage``.

With security enabled (``broker.security.enabled``), every request but ``/health`` (and
``/metrics`` when ``management_metrics_open``) names its user:

- ``Authorization: Basic <user:password>``: checked against the broker's users, as a STOMP or
  CORE login is (the cluster user and password log in as the cluster itself);
- ``Authorization: Bearer <token>``: a token from ``POST /api/v1/tokens`` (made with basic
  credentials), valid ``management_token_ttl`` seconds, kept in this process's memory only:
  a restart forgets every token. ``DELETE /api/v1/tokens`` revokes the token it is sent with.

No or bad credentials: 401 with ``WWW-Authenticate``. Then reads (GET) need ``view`` and
operations (POST, PUT, PATCH, DELETE) need ``manage``, on the address the request is about (a
queue's address, an address, the address a new queue or address has) or on ``#`` for the
broker as a whole (lists, status, the cluster, scale-down); a refusal is a 403 naming
the permission (and an audit line, see `petrel.security.guard`). With security disabled,
everything is open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import time
from collections import OrderedDict
from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from petrel.management.errors import ApiError
from petrel.management.keys import BROKER, TOKENS
from petrel.management.params import json_body
from petrel.security.errors import AuthenticationFailed, NotAuthorized

if TYPE_CHECKING:
    from petrel.security.subject import Subject

__all__ = ["SUBJECT", "TOKENS_PATH", "Tokens", "authenticate", "permitted", "require", "routes"]

#: Where a request's `Subject` is kept for the handlers.
SUBJECT = "petrel.subject"
TOKENS_PATH = "/api/v1/tokens"
_OPEN = ("/health",)
_READS = frozenset({"GET", "HEAD"})
_CHALLENGES = ('Basic realm="petrel", charset="UTF-8"', 'Bearer realm="petrel"')
_HOW = ("give a user and password with HTTP basic authentication (`petrel ... --user U --password P`, or "
        "PETREL_USER/PETREL_PASSWORD), or a bearer token from POST /api/v1/tokens")


class Tokens:
    """Bearer tokens of this process: the SHA-256 of each (never the token) -> subject and expiry."""

    def __init__(self, ttl: float, limit: int = 10_000) -> None:
        self.ttl = ttl
        self._limit = limit
        self._tokens: OrderedDict[bytes, tuple[Subject, float]] = OrderedDict()

    def issue(self, subject: Subject) -> tuple[str, float]:
        """A new token for `subject` and the seconds it is valid."""
        self._sweep()
        while len(self._tokens) >= self._limit:
            self._tokens.popitem(last=False)  # the oldest goes
        token = secrets.token_urlsafe(32)
        self._tokens[_digest(token)] = (subject, time.monotonic() + self.ttl)
        return token, self.ttl

    def subject(self, token: str) -> Subject | None:
        """The subject of a valid token, or None (unknown, revoked or expired)."""
        entry = self._tokens.get(_digest(token))
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            self._tokens.pop(_digest(token), None)
            return None
        return entry[0]

    def revoke(self, token: str) -> bool:
        return self._tokens.pop(_digest(token), None) is not None

    def _sweep(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, expires) in self._tokens.items() if expires <= now]:
            del self._tokens[key]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _unauthorized(message: str) -> ApiError:
    return ApiError(HTTPStatus.UNAUTHORIZED, message, headers=[("WWW-Authenticate", c) for c in _CHALLENGES])


def _credentials(header: str) -> tuple[str, str]:
    try:
        text = base64.b64decode(header.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise _unauthorized("malformed basic credentials (not base64 of UTF-8 user:password)") from None
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise _unauthorized("malformed basic credentials (expected user:password)")
    return user, password


async def _subject(request: web.Request) -> Subject:
    security = request.app[BROKER].security
    remote = request.remote or ""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "basic":
        user, password = _credentials(value)
        try:
            return await security.login_async(user, password, remote)
        except AuthenticationFailed as exc:
            raise _unauthorized(f"{exc}; {_HOW}") from None
    if scheme == "bearer":
        subject = request.app[TOKENS].subject(value.strip())
        if subject is None:
            raise _unauthorized("unknown or expired bearer token: get a new one with POST /api/v1/tokens")
        return subject
    if header:
        raise _unauthorized(f"unsupported authorization scheme {header.partition(' ')[0][:20]!r}: {_HOW}")
    if security.allow_anonymous:
        return security.login(None, None, remote)  # no password: nothing slow
    raise _unauthorized(f"authentication required: {_HOW}")


#: Creations, whose address is in the body (a queue's "address", else its "name"; an address's "name").
_CREATES = {"/api/v1/queues": ("address", "name"), "/api/v1/addresses": ("name",)}


async def _address(request: web.Request) -> str:
    """The address a request is about: its queue's or address's, else ``#`` (the whole broker)."""
    name = request.match_info.get("name")
    if name is None:
        fields = _CREATES.get(request.path) if request.method == "POST" else None
        if fields is None:
            return "#"
        body = await json_body(request)  # a bad body is the 400 the handler would give
        for field in fields:
            if isinstance(body.get(field), str) and body[field]:
                return body[field]
        return "#"
    if request.path.startswith("/api/v1/queues/"):
        office = request.app[BROKER].office
        queue = office.queues.get(name) if office is not None else None
        return queue.address if queue is not None else name
    return name


@web.middleware
async def authenticate(request: web.Request, handler) -> web.StreamResponse:
    broker = request.app[BROKER]
    security = getattr(broker, "security", None)
    if security is None or not security.enabled or request.path in _OPEN:
        return await handler(request)
    if request.path == "/metrics" and broker.config.management_metrics_open:
        return await handler(request)
    subject = await _subject(request)
    request[SUBJECT] = subject
    if request.path != TOKENS_PATH:
        permission = "view" if request.method in _READS else "manage"
        try:
            security.check(subject, permission, await _address(request))
        except NotAuthorized as exc:
            raise ApiError(HTTPStatus.FORBIDDEN, f"{exc} ({request.method} {request.path} needs {permission!r})") \
                from None
    return await handler(request)


def permitted(request: web.Request, permission: str, address: str) -> bool:
    """Whether the request's user holds `permission` on `address` (always, with security off)."""
    try:
        require(request, permission, address)
    except ApiError:
        return False
    return True


def require(request: web.Request, permission: str, address: str) -> None:
    """A handler's check beyond the middleware's (an operation that reaches a second address,
    such as a move's target): 403 unless the request's user holds `permission` on `address`."""
    security = getattr(request.app[BROKER], "security", None)
    subject = request.get(SUBJECT)
    if security is None or not security.enabled or subject is None:
        return
    try:
        security.check(subject, permission, address)
    except NotAuthorized as exc:
        raise ApiError(HTTPStatus.FORBIDDEN, f"{exc} ({request.method} {request.path} needs {permission!r} on "
                                             f"{address!r} too)") from None


routes = web.RouteTableDef()


@routes.post(TOKENS_PATH)
async def issue_token(request: web.Request) -> web.Response:
    """A bearer token for the user of the basic credentials this request carries."""
    if request.headers.get("Authorization", "").partition(" ")[0].lower() != "basic":
        raise _unauthorized("a token is issued for HTTP basic credentials (user and password) only")
    subject = request.get(SUBJECT)
    if subject is None:  # security disabled: nobody to vouch for
        raise ApiError(HTTPStatus.CONFLICT, "security is disabled on this broker: no token is needed")
    token, ttl = request.app[TOKENS].issue(subject)
    return web.json_response({"token": token, "token_type": "Bearer", "expires_in": int(ttl), "user": subject.user},
                             status=HTTPStatus.CREATED, headers={"Cache-Control": "no-store"})


@routes.delete(TOKENS_PATH)
async def revoke_token(request: web.Request) -> web.Response:
    """Forget the bearer token this request is made with."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        raise ApiError(HTTPStatus.BAD_REQUEST, "send the token to revoke as Authorization: Bearer <token>")
    return web.json_response({"revoked": request.app[TOKENS].revoke(value.strip())})
