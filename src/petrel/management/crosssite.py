"""Cross-site protection: a web page in an operator's browser cannot drive the management API.

A page on another site can make the browser send a request to ``http://127.0.0.1:8161``
(a form, an image, ``fetch`` without CORS), with the operator's cookies or cached basic
credentials. Two rules stop that, with or without authentication:

- a request whose ``Origin`` header is present and names another origin than the server's own
  (``scheme://host:port`` of the request) is refused with 403 — browsers send ``Origin`` on
  every cross-origin ``fetch`` and every ``POST``; command-line clients send none;
- an operation (``POST``, ``PUT``, ``PATCH``, ``DELETE``) must say ``Content-Type:
  application/json`` (415 otherwise): a form can only send ``text/plain``,
  ``application/x-www-form-urlencoded`` or ``multipart/form-data``, and a page that asks for
  ``application/json`` across origins must pass a CORS preflight, which this server never
  grants.

``/health`` is left alone: probes read it.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from petrel.management.errors import ApiError

__all__ = ["OPERATIONS", "cross_site", "own_origin"]

#: Methods that change something (the rest are reads).
OPERATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN = ("/health",)


def own_origin(request: web.Request) -> str:
    """The origin a page served by this server has: ``scheme://host[:port]`` of the request."""
    return f"{request.scheme}://{request.host}".lower()


@web.middleware
async def cross_site(request: web.Request, handler) -> web.StreamResponse:
    if request.path in _OPEN or request.match_info.http_exception is not None:
        return await handler(request)  # open, or a 404/405 to answer as such
    origin = request.headers.get("Origin")
    if origin is not None and origin.strip().lower().rstrip("/") != own_origin(request):
        raise ApiError(HTTPStatus.FORBIDDEN,
                       f"cross-origin request refused: Origin {origin[:100]!r} is not this server's "
                       f"({own_origin(request)}); call the management API from a command-line client "
                       "or from a page this server serves")
    if request.method in OPERATIONS and request.content_type != "application/json":
        shown = request.headers.get("Content-Type") or "none"
        raise ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                       f"{request.method} {request.path} needs Content-Type: application/json "
                       f"(got {shown[:100]}); send a JSON body, or {{}} when there is nothing to say")
    return await handler(request)
