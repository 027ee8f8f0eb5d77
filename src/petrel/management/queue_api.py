"""Routes for queues: list, show, create, delete, pause and resume."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from petrel.core.postoffice import RoutingError
from petrel.core.queue import Queue
from petrel.management.errors import bad_request, conflict, not_found
from petrel.management.keys import BROKER
from petrel.management.params import (
    bool_field,
    json_body,
    query_bool,
    routing_type,
    selector_text,
    text_field,
)
from petrel.management.views import queue_view

routes = web.RouteTableDef()


def find_queue(request: web.Request, name: str | None = None) -> Queue:
    name = request.match_info["name"] if name is None else name
    queue = request.app[BROKER].office.queues.get(name)
    if queue is None:
        raise not_found("queue", name)
    return queue


@routes.get("/api/v1/queues", allow_head=False)
async def list_queues(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    contains = request.query.get("name", "")
    address = request.query.get("address")
    internal = query_bool(request, "temporary", default=True)
    views = [
        queue_view(q)
        for q in office.queues.values()
        if contains in q.name and (address is None or q.address == address) and (internal or not q.temporary)
    ]
    views.sort(key=lambda v: v["name"])
    return web.json_response({"queues": views, "count": len(views)})


@routes.post("/api/v1/queues")
async def create_queue(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    body = await json_body(request)
    name = text_field(body, "name", required=True)
    address = text_field(body, "address") or name
    kind = routing_type(body.get("routing_type", "ANYCAST"))
    durable = bool_field(body, "durable", True)
    filter = selector_text(text_field(body, "filter"))
    if name in office.queues:
        raise conflict(f"queue {name!r} already exists")
    try:
        queue = office.create_queue(name, address, kind, durable=durable, filter=filter)
    except RoutingError as exc:
        raise bad_request(str(exc)) from None
    return web.json_response(queue_view(queue), status=HTTPStatus.CREATED)


@routes.get("/api/v1/queues/{name}", allow_head=False)
async def show_queue(request: web.Request) -> web.Response:
    return web.json_response(queue_view(find_queue(request)))


@routes.delete("/api/v1/queues/{name}")
async def delete_queue(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    queue = find_queue(request)
    if queue.consumers and not query_bool(request, "remove_consumers"):
        raise conflict(
            f"queue {queue.name!r} has {len(queue.consumers)} consumer(s); use remove_consumers=true to delete it anyway"
        )
    removed = queue.message_count
    office.delete_queue(queue.name)
    return web.json_response({"deleted": queue.name, "messages_removed": removed})


@routes.post("/api/v1/queues/{name}/pause")
async def pause_queue(request: web.Request) -> web.Response:
    queue = find_queue(request)
    queue.pause()
    return web.json_response(queue_view(queue))


@routes.post("/api/v1/queues/{name}/resume")
async def resume_queue(request: web.Request) -> web.Response:
    queue = find_queue(request)
    queue.resume()
    return web.json_response(queue_view(queue))
