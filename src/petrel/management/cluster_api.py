"""Routes about the cluster: members, bridges (state and backlog) and remote bindings.

Each route is a slice of ``ClusterConnection.describe()``, the one view of the cluster, so
the slices and the whole never disagree.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web

from petrel.management.errors import ApiError
from petrel.management.keys import BROKER

routes = web.RouteTableDef()


def _view(request: web.Request) -> dict[str, Any]:
    cluster = request.app[BROKER].cluster
    if cluster is None:
        raise ApiError(HTTPStatus.NOT_FOUND, "this broker is not in a cluster (no [[cluster_connections]] in its "
                                             "config); ask a clustered node, or add a cluster connection")
    return cluster.describe()


def _slice(view: dict[str, Any], key: str, items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": view["name"], "node_id": view["node_id"], key: items, "count": len(items), **extra}


@routes.get("/api/v1/cluster", allow_head=False)
async def cluster_status(request: web.Request) -> web.Response:
    return web.json_response(_view(request))


@routes.get("/api/v1/cluster/members", allow_head=False)
async def cluster_members(request: web.Request) -> web.Response:
    view = _view(request)
    members = view["members"]
    return web.json_response(_slice(view, "members", members, connected=sum(m["connected"] for m in members)))


@routes.get("/api/v1/cluster/bridges", allow_head=False)
async def cluster_bridges(request: web.Request) -> web.Response:
    view = _view(request)
    bridges = view["bridges"]
    return web.json_response(_slice(view, "bridges", bridges, up=sum(b["connected"] for b in bridges),
                                    backlog=sum(b["backlog"] for b in bridges)))


@routes.get("/api/v1/cluster/bindings", allow_head=False)
async def cluster_bindings(request: web.Request) -> web.Response:
    view = _view(request)
    bindings = view["remote_bindings"]
    address = request.query.get("address")
    if address is not None:
        bindings = [b for b in bindings if b["address"] == address]
    return web.json_response(_slice(view, "remote_bindings", bindings))
