"""``/api/v1/ha``: this node's part in its live-backup pair (policy, role, state, replication)."""

from __future__ import annotations

from aiohttp import web

from petrel.management.keys import BROKER

routes = web.RouteTableDef()


def ha_view(broker) -> dict:
    activation = broker.activation
    if activation is None:
        return {"policy": broker.config.ha_policy.kind, "role": broker.config.ha_policy.role, "state": "starting",
                "node_id": broker.node_id}
    return activation.describe()


@routes.get("/api/v1/ha", allow_head=False)
async def ha_status(request: web.Request) -> web.Response:
    return web.json_response(ha_view(request.app[BROKER]))
