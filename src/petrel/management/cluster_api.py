"""Routes about the cluster: members, bridges (state and backlog) and remote bindings."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from petrel.management.errors import ApiError
from petrel.management.keys import BROKER

routes = web.RouteTableDef()


@routes.get("/api/v1/cluster", allow_head=False)
async def cluster_status(request: web.Request) -> web.Response:
    cluster = request.app[BROKER].cluster
    if cluster is None:
        raise ApiError(HTTPStatus.NOT_FOUND, "this broker is not in a cluster (no [[cluster_connections]] in its config)")
    return web.json_response(cluster.describe())
