"""Routes for addresses: list, show, create, delete."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from petrel.core.address import Address
from petrel.core.errors import RoutingError
from petrel.management.errors import bad_request, conflict, not_found
from petrel.management.keys import BROKER
from petrel.management.params import json_body, query_bool, routing_type, text_field
from petrel.management.views import address_view

routes = web.RouteTableDef()


def find_address(request: web.Request) -> Address:
    name = request.match_info["name"]
    address = request.app[BROKER].office.addresses.get(name)
    if address is None:
        raise not_found("address", name)
    return address


@routes.get("/api/v1/addresses", allow_head=False)
async def list_addresses(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    views = [address_view(a) for a in sorted(office.addresses.values(), key=lambda a: a.name)]
    return web.json_response({"addresses": views, "count": len(views)})


@routes.post("/api/v1/addresses")
async def create_address(request: web.Request) -> web.Response:
    office = request.app[BROKER].office
    body = await json_body(request)
    name = text_field(body, "name", required=True)
    kinds = body.get("routing_types", ["ANYCAST"])
    if isinstance(kinds, str):
        kinds = [kinds]
    if not isinstance(kinds, list) or not kinds:
        raise bad_request("'routing_types' must be a non-empty list of ANYCAST and/or MULTICAST")
    types = {routing_type(k, "routing_types") for k in kinds}
    if name in office.addresses:
        raise conflict(f"address {name!r} already exists")
    try:
        address = office.create_address(name, types)
    except RoutingError as exc:  # an invalid name (petrel.core.names)
        raise bad_request(str(exc)) from None
    return web.json_response(address_view(address, detail=True), status=HTTPStatus.CREATED)


@routes.get("/api/v1/addresses/{name}", allow_head=False)
async def show_address(request: web.Request) -> web.Response:
    return web.json_response(address_view(find_address(request), detail=True))


@routes.delete("/api/v1/addresses/{name}")
async def delete_address(request: web.Request) -> web.Response:
    address = find_address(request)
    name = address.name
    queues = [q.name for q in address.queues]
    if queues and not query_bool(request, "force"):
        raise conflict(
            f"address {name!r} has queues ({', '.join(sorted(queues))}); delete them first or use force=true"
        )
    request.app[BROKER].office.delete_address(name)
    return web.json_response({"deleted": name, "queues_deleted": queues})
