"""`ManagementClient`: a small synchronous client of the management API (what the CLI uses).

Standard library only, so commands that use it start fast. Every failure is a
`ManagementError` whose text is one line an operator can act on.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from petrel.errors import PetrelError, UsageError

__all__ = ["DEFAULT_HTTP_PORT", "ManagementClient", "ManagementError", "basic_authorization", "default_url"]

DEFAULT_HTTP_PORT = 8161


class ManagementError(PetrelError):
    """The broker could not be reached, or it refused the request (``status`` then set)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def default_url(port_offset: int = 0, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{DEFAULT_HTTP_PORT + port_offset}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"the broker's certificate is not trusted: {exc.verify_message}; give its CA in "
                "PETREL_MANAGEMENT_CA=<PEM file>")
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())


class ManagementClient:
    def __init__(self, url: str, *, timeout: float = 30.0, user: str | None = None,
                 password: str | None = None, ca: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UsageError(f"--url must be an http:// URL such as {default_url()}, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.user = user or None
        #: HTTP basic credentials, sent with every request when a user is given
        self.authorization = basic_authorization(user, password) if user else None
        #: https: the broker's certificate must chain to ``ca`` (PEM; env PETREL_MANAGEMENT_CA), else
        #: to the system's CAs
        self.ssl = https_context(ca or os.environ.get("PETREL_MANAGEMENT_CA")) if parsed.scheme == "https" else None

    def at(self, url: str, *, timeout: float | None = None) -> ManagementClient:
        """A client of another broker (a member of this one's cluster) with these credentials."""
        other = ManagementClient(url, timeout=self.timeout if timeout is None else timeout)
        other.user, other.authorization = self.user, self.authorization
        if other.ssl is not None and self.ssl is not None:
            other.ssl = self.ssl  # the same CA
        return other

    def get(self, path: str, **query: object) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("POST", path, body=body if body is not None else {})

    def delete(self, path: str, **query: object) -> dict[str, Any]:
        return self.request("DELETE", path, query=query)

    def request(self, method: str, path: str, *, body: dict[str, Any] | None = None,
                query: dict[str, object] | None = None) -> dict[str, Any]:
        url = self.url + path
        if query:
            pairs = {k: _query_value(v) for k, v in query.items() if v is not None}
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if self.authorization is not None:
            req.add_header("Authorization", self.authorization)
        if data is not None or method != "GET":  # the server takes operations only as JSON
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl) as resp:
                return self._decode(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {exc.code} {exc.reason} from {self.url}"
            raise ManagementError(_refusal(str(message), exc.code, self.user), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ManagementError(
                f"cannot reach the broker at {self.url} ({_reason(exc)}); is it running?"
            ) from None

    def _decode(self, status: int, raw: bytes) -> dict[str, Any]:
        try:
            value = json.loads(raw)
        except ValueError:
            raise ManagementError(f"unexpected answer from {self.url} (HTTP {status}, not JSON)", status) from None
        if not isinstance(value, dict):
            raise ManagementError(f"unexpected answer from {self.url} (HTTP {status})", status)
        return value


def https_context(ca: str | None) -> ssl.SSLContext:
    """The context for an https:// management URL; a CA file it cannot read is a UsageError."""
    try:
        return ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"management CA {ca}: {getattr(exc, 'strerror', None) or exc}") from None


def basic_authorization(user: str, password: str | None) -> str:
    """The ``Authorization`` header value of HTTP basic credentials."""
    return "Basic " + base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")


def _refusal(message: str, status: int, user: str | None) -> str:
    """The server's message, with what to do next when it refused the credentials or the user."""
    if status == 401:
        if user is None:
            return (f"the broker requires a login ({message.split(':')[0]}): give --user and --password, "
                    "or set PETREL_USER and PETREL_PASSWORD")
        return (f"the broker refused the login of user {user!r}: check --user and --password "
                "(PETREL_USER, PETREL_PASSWORD)")
    if status == 403 and "lacks permission" in message:
        return (f"{message}; use a user with that permission, or grant it to one of the user's roles in "
                "[security_settings] of the broker's config")
    return message


def _query_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
