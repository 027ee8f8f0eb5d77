"""Routes about the broker as a whole: status, connections, consumers, scale-down."""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

from petrel.management.errors import ApiError, not_found
from petrel.management.keys import BROKER, SERVER
from petrel.management.params import json_body
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
    """Move every message to a live broker, send the clients there, and stop (Artemis's scaleDown)."""
    broker = request.app[BROKER]
    if not broker.config.ha_policy.is_live_only:
        raise ApiError(HTTPStatus.CONFLICT, f"a {broker.config.ha_policy.kind} broker does not scale down: its "
                                            "backup takes over when it stops (set failover_on_shutdown)")
    body = await json_body(request)  # {"target": "tcp://host:port"} or {}
    target = body.get("target")
    if target is not None:
        from petrel.cluster.config import parse_connector

        try:
            parse_connector(str(target))
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"target: {exc}") from None
    from petrel.ha.scale_down import scale_down_targets

    if target is None and not scale_down_targets(broker):
        raise ApiError(HTTPStatus.BAD_REQUEST, "no target: give {\"target\": \"tcp://host:port\"}, or configure "
                                               "[ha_policy] scale_down connectors or a cluster connection")
    broker.request_stop(scale_down_to=str(target) if target else None)
    chosen = str(target) if target else scale_down_targets(broker)[0]
    return web.json_response({"scaling_down_to": chosen, "status": "stopping"}, status=HTTPStatus.ACCEPTED)


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
