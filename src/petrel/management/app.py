"""The aiohttp application: JSON errors, cross-site checks, authentication, /health, /metrics, the
OpenAPI document and /api/v1."""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from petrel.core.selector import SelectorError
from petrel.management import address_api, auth, broker_api, cluster_api, cursor_api, ha_api, message_api, migration_api, queue_api
from petrel.management.auth import Tokens, authenticate
from petrel.management.crosssite import cross_site
from petrel.management.errors import ApiError
from petrel.management.keys import BROKER, SERVER, TOKENS
from petrel.management.metrics import CONTENT_TYPE
from petrel.management.openapi import document
from petrel.management.views import uptime

if TYPE_CHECKING:
    from petrel.management.server import ManagementServer

__all__ = ["create_app"]

log = logging.getLogger("petrel.management")

MAX_BODY = 1 << 20


def error_response(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    for name, value in headers or ():
        response.headers.add(name, value)
    return response


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    """Every failure becomes ``{"error": message}`` with its status."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message, exc.headers)
    except SelectorError as exc:
        return error_response(HTTPStatus.BAD_REQUEST, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == HTTPStatus.NOT_FOUND:
            message = f"no such resource: {request.path}"
        elif exc.status == HTTPStatus.METHOD_NOT_ALLOWED:
            message = f"{request.method} is not allowed on {request.path}"
        else:
            message = exc.text or exc.reason
        return error_response(exc.status, message)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("management request %s %s failed", request.method, request.path)
        return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")


#: Routes that answer while the broker does not serve (a backup waiting, a node starting).
ALWAYS = ("/health", "/metrics", "/api/v1/ha", "/api/v1/openapi.json", "/api/v1/tokens")


@web.middleware
async def serving_only(request: web.Request, handler) -> web.StreamResponse:
    """Routes about queues, addresses, connections... need a serving broker: 503 otherwise."""
    broker = request.app[BROKER]
    if broker.office is None and not request.path.startswith(ALWAYS):
        from petrel.management.ha_api import ha_view

        ha = ha_view(broker)
        raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE,
                       f"this broker does not serve now ({ha['policy']} {ha['role']}, {ha['state']}): ask its live; "
                       "GET /api/v1/ha says more")
    return await handler(request)


routes = web.RouteTableDef()


@routes.get("/health", allow_head=False)
async def health(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    server = request.app[SERVER]
    serving = broker.office is not None and broker.started_at > 0  # recovered and listening
    reason = None if server.stopping or not serving else broker.cannot_persist()
    ready = not server.stopping and serving and reason is None
    if server.stopping:
        status = "stopping"
    elif not serving:
        # not serving (yet): starting, a backup waiting for its live, a node giving way
        ha = ha_api.ha_view(broker)
        status = ha["state"] if ha["state"] != "live" else "starting"
        reason = f"{ha['policy']} {ha['role']}: {status}"
    else:
        status = "ok" if ready else "cannot persist"
    body = {
        "status": status,
        "live": True,
        "ready": ready,
        "name": broker.config.name,
        "node_id": broker.node_id,
        "uptime_seconds": uptime(broker.started_at),
    }
    if reason:
        body["reason"] = reason
    return web.json_response(body, status=HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE)


@routes.get("/metrics", allow_head=False)
async def metrics(request: web.Request) -> web.Response:
    m = request.app[SERVER].metrics
    await asyncio.get_running_loop().run_in_executor(None, m.read_journal_stats)
    return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})


@routes.get("/api/v1/openapi.json", allow_head=False)
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document(request.app[BROKER].version))


def create_app(server: ManagementServer) -> web.Application:
    app = web.Application(middlewares=[json_errors, cross_site, authenticate, serving_only],
                          client_max_size=MAX_BODY)
    app[BROKER] = server.broker
    app[SERVER] = server
    app[TOKENS] = Tokens(server.broker.config.management_token_ttl)
    for table in (routes, auth.routes, broker_api.routes, address_api.routes, queue_api.routes, message_api.routes,
                  cluster_api.routes, ha_api.routes, cursor_api.routes, migration_api.routes):
        app.router.add_routes(table)
    return app
