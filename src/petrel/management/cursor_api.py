"""Routes for the named sequence cursors of a queue (core/cursors.py): where each stands, with
the queue's earliest and tail sequence numbers on this node; deleting one releases its hold."""

from __future__ import annotations

from aiohttp import web

from petrel.core.cursors import CursorNotFound
from petrel.management.errors import not_found
from petrel.management.keys import BROKER
from petrel.management.queue_api import find_queue

routes = web.RouteTableDef()


@routes.get("/api/v1/queues/{name}/cursors", allow_head=False)
async def list_cursors(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    office = broker.office
    queue = find_queue(request)
    cursors = [c.info() for c in office.seq_cursors(queue.name)]
    return web.json_response({
        "node_id": broker.node_id,
        "queue": queue.name,
        "earliest_seq": office.earliest_seq(queue.name),
        "tail_seq": office.tail_seq(queue.name),
        "cursors": cursors,
        "count": len(cursors),
    })


@routes.delete("/api/v1/queues/{name}/cursors/{cursor}")
async def delete_cursor(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    queue = find_queue(request)
    cursor = request.match_info["cursor"]
    try:
        office.delete_seq_cursor(queue.name, cursor)
    except CursorNotFound:
        raise not_found("cursor", cursor) from None
    return web.json_response({"queue": queue.name, "deleted": cursor})
