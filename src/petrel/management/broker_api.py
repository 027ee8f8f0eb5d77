"""Routes about the broker as a whole: status, connections, consumers, scale-down."""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

from petrel.management.errors import ApiError, not_found
from petrel.management.keys import BROKER, SERVER
from petrel.management.usage import disk_usage, journals, rss_bytes
from petrel.management.views import connection_view, consumer_view, uptime

routes = web.RouteTableDef()

HA_ROLE = "live-only"  # until the HA issue brings live/backup pairs


def _journal_stats(store: object) -> dict[str, dict]:
    out = {}
    for name, journal in journals(store).items():
        stats = journal.stats()
        stats["position"] = list(stats.get("position", ()))
        out[name] = stats
    return out


@routes.get("/api/v1/broker", allow_head=False)
async def broker_status(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    office = broker.office
    loop = asyncio.get_running_loop()
    disk = await loop.run_in_executor(None, disk_usage, Path(broker.config.data_dir))
    journal = await loop.run_in_executor(None, _journal_stats, broker.store)
    stopping = request.app[SERVER].stopping
    return web.json_response({
        "name": broker.config.name,
        "version": broker.version,
        "node_id": broker.node_id,
        "state": "stopping" if stopping else "active",
        "ha_role": HA_ROLE,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(broker.started_at)),
        "uptime_seconds": uptime(broker.started_at),
        "ports": dict(broker.ports),
        "connection_count": len(broker.connections),
        "address_count": len(office.addresses),
        "queue_count": len(office.queues),
        "message_count": sum(q.message_count for q in office.queues.values()),
        "messages_routed": office.messages_routed,
        "messages_unrouted": office.unrouted,
        "messages_duplicate": office.duplicates,
        "persistence_enabled": broker.config.persistence_enabled,
        "memory": {"rss_bytes": rss_bytes()},
        "disk": disk,
        "journal": journal,
    })


@routes.post("/api/v1/broker/scale-down")
async def scale_down(request: web.Request) -> web.Response:
    raise ApiError(
        HTTPStatus.NOT_IMPLEMENTED,
        "scale-down is not available yet: it arrives with the scale-down issue "
        "(live-only scale-down with message migration)",
    )


@routes.get("/api/v1/connections", allow_head=False)
async def list_connections(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    views = [connection_view(c) for c in list(broker.connections)]
    views.sort(key=lambda v: v["remote_address"])
    return web.json_response({"connections": views, "count": len(views)})


@routes.get("/api/v1/consumers", allow_head=False)
async def list_consumers(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    office = broker.office
    owners = {}
    for conn in list(broker.connections):
        for consumer_id in getattr(conn.adapter, "by_consumer", None) or ():
            owners[consumer_id] = conn
    name = request.query.get("queue")
    if name:
        queue = office.queues.get(name)
        if queue is None:
            raise not_found("queue", name)
        queues = [queue]
    else:
        queues = list(office.queues.values())
    views = [consumer_view(c, owners.get(c.id)) for q in queues for c in q.consumers]
    return web.json_response({"consumers": views, "count": len(views)})
