"""Routes acting on the messages in a queue: browse, count, purge, move, retry from a DLQ."""

from __future__ import annotations

from aiohttp import web

from petrel.core import operations
from petrel.core.browsing import QueueBrowse
from petrel.management.auth import permitted, require
from petrel.management.errors import bad_request, not_found
from petrel.management.keys import BROKER
from petrel.management.params import json_body, query_choice, query_int, selector_text, text_field
from petrel.management.queue_api import find_queue
from petrel.management.views import BODY_MODES, message_view

routes = web.RouteTableDef()

MAX_PAGE = 1000


@routes.get("/api/v1/queues/{name}/messages", allow_head=False)
async def browse_messages(request: web.Request) -> web.Response:
    queue = find_queue(request)
    filter = selector_text(request.query.get("filter"))
    offset = query_int(request, "offset", 0, 0, 1 << 62)
    limit = query_int(request, "limit", 100, 1, MAX_PAGE)
    body_mode = query_choice(request, "body", BODY_MODES)
    browse = QueueBrowse(request.app[BROKER].office, queue, filter)  # paged messages too, in bounded memory
    skip = offset
    while skip > 0 and not browse.finished and not browse.stalled:
        skip -= len(browse.next(min(skip, 10_000)))
    refs = browse.next(limit + 1) if skip <= 0 else []
    more = len(refs) > limit or browse.stalled
    views = [message_view(ref, body_mode) for ref in refs[:limit]]
    return web.json_response({
        "queue": queue.name,
        "offset": offset,
        "limit": limit,
        "count": len(views),
        "more": more,
        "messages": views,
    })


@routes.get("/api/v1/queues/{name}/count", allow_head=False)
async def count_messages(request: web.Request) -> web.Response:
    queue = find_queue(request)
    filter = selector_text(request.query.get("filter"))
    return web.json_response({"queue": queue.name, "filter": filter, "count": operations.count(queue, filter)})


@routes.post("/api/v1/queues/{name}/purge")
async def purge_queue(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    queue = find_queue(request)
    body = await json_body(request)
    filter = selector_text(text_field(body, "filter"))
    removed = operations.remove(office, queue, filter)
    return web.json_response({"queue": queue.name, "removed": removed})


@routes.post("/api/v1/queues/{name}/move")
async def move_messages(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    queue = find_queue(request)
    body = await json_body(request)
    target = text_field(body, "to", required=True)
    filter = selector_text(text_field(body, "filter"))
    if target not in office.queues:
        raise not_found("queue", target)
    if target == queue.name:
        raise bad_request("cannot move messages to the queue they are in")
    require(request, "manage", office.queues[target].address)  # the middleware checked the source's
    moved = operations.move(office, queue, target, filter)
    return web.json_response({"queue": queue.name, "to": target, "moved": moved})


@routes.post("/api/v1/queues/{name}/retry")
async def retry_messages(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    queue = find_queue(request)
    body = await json_body(request)
    filter = selector_text(text_field(body, "filter"))
    left = set()  # addresses the user may not manage: their messages stay in the queue

    def allowed(address: str) -> bool:
        if permitted(request, "manage", address):
            return True
        left.add(address)
        return False

    retried = operations.retry(office, queue, filter, allowed)
    body = {"queue": queue.name, "retried": retried}
    if left:
        body["not_permitted"] = sorted(left)  # manage is needed on each address a message goes back to
    return web.json_response(body)
