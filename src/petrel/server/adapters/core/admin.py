"""Address, queue, query and browse requests of the CORE adapter (a mixin of `CoreAdapter`)."""

from __future__ import annotations

from collections import deque
from typing import Any

from petrel.cluster.internal_names import internal_name_problem
from petrel.codec.core import (
    Browse,
    Browsed,
    BrowseResult,
    CreateAddress,
    CreateQueue,
    DeleteAddress,
    DeleteQueue,
    ErrorCode,
    Query,
    Result,
)
from petrel.core.browsing import QueueBrowse
from petrel.core.message import RoutingType
from petrel.core.queue import Queue
from petrel.core.wildcard import compile_pattern
from petrel.server.adapters.core import large
from petrel.server.adapters.core.consuming import scalars
from petrel.server.adapters.core.session import RequestFailed

__all__ = ["AdminFrames", "queue_info"]


class AdminFrames:
    def on_create_address(self, e: CreateAddress) -> None:
        if (refused := internal_name_problem(self, e.name)) is not None:  # the cluster's $.petrel.* names
            raise RequestFailed(ErrorCode.UNAUTHORIZED, refused)
        try:
            types = {RoutingType(r) for r in e.routing_types} or {RoutingType.MULTICAST}
        except ValueError:
            raise RequestFailed(ErrorCode.INVALID, f"bad routing types {e.routing_types}") from None
        self.access.check("createAddress", e.name)
        self.office.create_address(e.name, types)
        self.reply(Result(e.corr), sync=True)

    def on_delete_address(self, e: DeleteAddress) -> None:
        if (refused := internal_name_problem(self, e.name)) is not None:  # the cluster's $.petrel.* names
            raise RequestFailed(ErrorCode.UNAUTHORIZED, refused)
        if e.name not in self.office.addresses:
            raise RequestFailed(ErrorCode.NOT_FOUND, f"address {e.name!r} does not exist")
        self.access.check("deleteAddress", e.name)
        self.office.delete_address(e.name)
        self.reply(Result(e.corr), sync=True)

    def on_create_queue(self, e: CreateQueue) -> None:
        if (refused := internal_name_problem(self, e.name, e.address)) is not None:  # the cluster's $.petrel.* names
            raise RequestFailed(ErrorCode.UNAUTHORIZED, refused)
        office = self.office
        if e.name in office.queues:
            if not e.exists_ok:
                raise RequestFailed(ErrorCode.ALREADY_EXISTS, f"queue {e.name!r} already exists")
            self.reply(Result(e.corr, 0, "", queue_info(office.queues[e.name])))
            return
        if e.routing_type not in (0, 1):
            raise RequestFailed(ErrorCode.INVALID, f"bad routing type {e.routing_type}")
        address = e.address or e.name
        if address not in office.addresses:
            self.access.check("createAddress", address)
        self.access.check("createDurableQueue" if e.durable and not e.temporary else "createNonDurableQueue", address)
        try:
            queue = office.create_queue(
                e.name, e.address or e.name, RoutingType(e.routing_type), durable=e.durable,
                filter=e.filter or None, temporary=e.temporary, attributes=e.attributes or None,
            )
        except (TypeError, ValueError) as exc:  # a bad attribute value
            raise RequestFailed(ErrorCode.INVALID, f"cannot create queue {e.name!r}: {exc}") from None
        if queue.temporary:
            self.temporary_queues.add(queue.name)
        self.reply(Result(e.corr, 0, "", queue_info(queue)), sync=True)

    def on_delete_queue(self, e: DeleteQueue) -> None:
        if (refused := internal_name_problem(self, e.name)) is not None:  # the cluster's $.petrel.* names
            raise RequestFailed(ErrorCode.UNAUTHORIZED, refused)
        if e.name not in self.office.queues:
            raise RequestFailed(ErrorCode.NOT_FOUND, f"queue {e.name!r} does not exist")
        self.access.delete_queue(self.office.queues[e.name])
        self.office.delete_queue(e.name)
        self.temporary_queues.discard(e.name)
        self.reply(Result(e.corr), sync=True)

    def on_query(self, e: Query) -> None:
        office = self.office
        if e.kind == "queue":
            queue = office.queues.get(e.name)
            value = queue_info(queue) if queue is not None else None
            if value is not None:  # nodes moving their messages here now, or that began and are not done
                value["migrating_from"] = sorted({source for conn in self.broker.connections
                                                  if (source := getattr(conn.adapter, "migration_source", None))}
                                                 | set(self.broker.migrations_open))
        elif e.kind == "address":
            address = office.addresses.get(e.name)
            value = None if address is None else {
                "name": address.name,
                "routing_types": sorted(rt.name for rt in address.routing_types),
                "queues": [q.name for q in address.queues],
                "auto_created": address.auto_created,
            }
        elif e.kind == "queues":  # the names of the queues matching a wildcard pattern ("" or "#": all)
            match = compile_pattern(e.name or "#")
            value = sorted(q.name for q in office.queues.values() if not q.temporary and match(q.name))
        else:
            raise RequestFailed(ErrorCode.INVALID, f"can query a queue, an address or queues, not {e.kind!r}")
        self.reply(Result(e.corr, 0, "", value))

    def on_browse(self, e: Browse) -> None:
        """A page of a browse (offset, limit): paged messages included. The connection keeps
        its last browse going, so a client asking for the page after the one it got continues
        it (`QueueBrowse`: the page files are read once, a chunk at a time) instead of
        starting over and skipping `offset` messages."""
        queue = self.office.queues.get(e.queue.rpartition("::")[2])
        if queue is None:
            raise RequestFailed(ErrorCode.NOT_FOUND, f"queue {e.queue!r} does not exist")
        self.access.check("browse", queue.address)
        limit = max(0, min(e.limit, 10_000))
        offset = max(e.offset, 0)
        state = self.__dict__.get("_browse")
        if state is None or state.queue is not queue or state.filter != e.filter or state.offset != offset:
            state = self._browse = _BrowseState(queue, e.filter, QueueBrowse(self.office, queue, e.filter or None))
            skip = offset
            while skip > 0 and not state.source.finished:  # a page asked for out of turn: from the start
                skip -= len(state.source.next(min(skip, 10_000)))
            state.offset = offset
        left = state.left
        if len(left) < limit and not state.source.finished:
            left.extend(state.source.next(limit - len(left)))
        budget = self.broker.config.max_frame_size // 2
        out = []
        while left and len(out) < limit:
            h = left[0]
            m = h.message
            budget -= m.body_size + 256
            if out and budget < 0:
                break
            left.popleft()
            body = m.body if m.large is None else large.read_whole(self, m)
            out.append(Browsed(h.seq, m.id, m.address, m.durable, m.priority, m.expiration, m.timestamp,
                               m.scheduled, h.delivery_count, scalars(m.properties), body))
        state.offset += len(out)
        more = bool(left) or not state.source.finished
        if not more:
            self._browse = None  # (what it held goes)
        self._out.append(self.codec.send(BrowseResult(e.corr, out, more)))


class _BrowseState:
    """A CORE connection's browse in progress: the next offset it serves and what it has read
    ahead."""

    __slots__ = ("queue", "filter", "source", "offset", "left")

    def __init__(self, queue: Queue, filter: str | None, source: QueueBrowse) -> None:
        self.queue = queue
        self.filter = filter
        self.source = source
        self.offset = 0
        self.left: deque = deque()


def queue_info(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "address": queue.address,
        "routing_type": queue.routing_type.name,
        "durable": queue.durable,
        "temporary": queue.temporary,
        "filter": queue.selector.text if queue.selector is not None else None,
        "message_count": queue.message_count,
        "consumer_count": queue.consumer_count,
        "delivering_count": queue.delivering_count,
        "scheduled_count": queue.scheduled_count,
        "messages_added": queue.messages_added,
        "messages_acked": queue.messages_acked,
        **{name: getattr(queue, name) for name in _ATTRIBUTES if hasattr(queue, name)},
    }


_ATTRIBUTES = ("exclusive", "last_value_key", "non_destructive", "ring_size", "group_rebalance", "group_buckets")
