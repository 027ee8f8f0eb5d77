"""The JSON shapes of the API: plain dicts built from live broker objects, cheap to encode."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.queue import Consumer, MessageReference, Queue
    from petrel.server.connection import Connection

__all__ = [
    "address_view",
    "connection_id",
    "connection_view",
    "consumer_view",
    "message_view",
    "queue_view",
    "uptime",
]

BODY_MODES = ("auto", "text", "base64", "none")


def queue_view(q: Queue) -> dict[str, Any]:
    return {
        "name": q.name,
        "address": q.address,
        "consumer_count": len(q.consumers),
        "message_count": q.message_count,
        "messages_added": q.messages_added,
        "delivering_count": q.delivering_count,
        "messages_acked": q.messages_acked,
        "scheduled_count": q.scheduled_count,
        "messages_expired": q.messages_expired,
        "messages_killed": q.messages_killed,
        "routing_type": q.routing_type.name,
        "durable": q.durable,
        "filter": q.selector.text if q.selector is not None else None,
        "paused": q.paused,
        "temporary": q.temporary,
        "auto_created": q.auto_created,
        "id": q.id,
    }


def address_view(a: Address, *, detail: bool = False) -> dict[str, Any]:
    queues = a.queues
    view: dict[str, Any] = {
        "name": a.name,
        "routing_types": sorted(rt.name for rt in a.routing_types),
        "auto_created": a.auto_created,
        "queue_count": len(queues),
        "queues": [q.name for q in queues],
        "message_count": sum(q.message_count for q in queues),
        "id": a.id,
    }
    if detail:
        view["queues"] = [queue_view(q) for q in queues]
    return view


def _json_value(value: object) -> object:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def message_view(ref: MessageReference, body_mode: str) -> dict[str, Any]:
    m = ref.message
    view: dict[str, Any] = {
        "seq": ref.seq,
        "message_id": m.id,
        "address": m.address,
        "durable": m.durable,
        "priority": m.priority,
        "timestamp": m.timestamp,
        "expiration": m.expiration,
        "scheduled": m.scheduled,
        "delivery_count": ref.delivery_count,
        "user_id": m.user_id,
        "properties": {k: _json_value(v) for k, v in m.properties.items()},
        "body_size": m.body_size,
    }
    if body_mode == "none":
        return view
    body = m.body
    if body_mode in ("auto", "text"):
        try:
            view["body"] = body.decode("utf-8")
            view["body_encoding"] = "text"
            return view
        except UnicodeDecodeError:
            if body_mode == "text":
                view["body"] = body.decode("utf-8", errors="replace")
                view["body_encoding"] = "text"
                return view
    view["body"] = base64.b64encode(body).decode("ascii")
    view["body_encoding"] = "base64"
    return view


def connection_id(conn: Connection) -> str:
    return getattr(conn, "id", None) or format(id(conn), "x")


def _protocol(conn: Connection) -> str | None:
    adapter = conn.adapter
    if adapter is None:
        return None
    name = getattr(adapter, "protocol", None)
    if isinstance(name, str):
        return name
    return type(adapter).__name__.removesuffix("Adapter").lower()


def connection_view(conn: Connection) -> dict[str, Any]:
    adapter = conn.adapter
    consumers = getattr(adapter, "by_consumer", None) if adapter is not None else None
    return {
        "id": connection_id(conn),
        "remote_address": conn.peer,
        "protocol": _protocol(conn),
        "client_id": getattr(adapter, "client_id", None),
        "consumer_count": len(consumers) if consumers is not None else 0,
        "writing_paused": conn.writing_paused,
    }


def consumer_view(consumer: Consumer, owner: Connection | None) -> dict[str, Any]:
    queue = consumer.queue
    return {
        "id": consumer.id,
        "queue": queue.name,
        "address": queue.address,
        "routing_type": queue.routing_type.name,
        "filter": consumer.selector.text if consumer.selector is not None else None,
        "connection_id": connection_id(owner) if owner is not None else None,
        "remote_address": owner.peer if owner is not None else None,
        "delivering_count": len(consumer.delivering),
        "bytes_in_flight": consumer.bytes_in_flight,
        "window": consumer.window,
        "window_bytes": consumer.window_bytes,
        "auto_ack": consumer.auto_ack,
        "paused": consumer.paused,
    }


def uptime(started_at: float) -> float:
    return round(time.time() - started_at, 3) if started_at else 0.0
