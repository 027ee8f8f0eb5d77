"""Routes for the migrations to this node that began and have not finished (a drainer killed
part way, a node that died scaling down): readers of those nodes' messages, such as the Spark
source, wait while one is open (core/migrations_open.py). Running the drain again to the end
closes it; deleting it here gives up on an origin that is never coming back (what it had not
moved is lost to those readers, which then read what arrived)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from petrel.management.errors import not_found
from petrel.management.keys import BROKER

routes = web.RouteTableDef()


@routes.get("/api/v1/migrations", allow_head=False)
async def list_migrations(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    open_ = list(broker.migrations_open)
    return web.json_response({"node_id": broker.node_id, "open": open_, "count": len(open_)})


@routes.delete("/api/v1/migrations/{node}")
async def close_migration(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    node = request.match_info["node"]
    if node not in broker.migrations_open:
        raise not_found("open migration from node", node)
    broker.migrations_open.close(node)
    synced = asyncio.get_running_loop().create_future()
    broker.store.sync(lambda: synced.done() or synced.set_result(None),
                      failed=lambda exc: synced.done() or synced.set_exception(exc))
    await synced  # durable before the answer
    return web.json_response({"node_id": broker.node_id, "closed": node})
