"""Consumer frames of the CORE adapter: create/close, credit, delivery, acks and nacks.

A mixin of `CoreAdapter` (it uses the adapter's codec, connection, sessions and replies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from petrel.cluster.internal_names import internal_name_problem
from petrel.codec.core import (
    CREDIT_OVERHEAD,
    Ack,
    CloseConsumer,
    CreateConsumer,
    Credit,
    Deliver,
    DeliverChunk,
    ErrorCode,
    Nack,
    Result,
)
from petrel.codec.errors import LocalProtocolError
from petrel.core.message import WIRE_CACHE_LIMIT, Message, RoutingType
from petrel.core.message_props import INTERNAL_PREFIXES
from petrel.core.queue import MessageReference
from petrel.core.selector import compile_selector
from petrel.server.adapters.core import large
from petrel.server.adapters.core.session import CoreConsumer, RequestFailed

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["ConsumerFrames", "ROUTING", "delivery_properties", "scalars", "wire_properties"]

ROUTING = (None, RoutingType.ANYCAST, RoutingType.MULTICAST)  # indexed by routing_type + 1
_SCALARS = (type(None), bool, int, float, str, bytes)


_encode = msgspec.msgpack.Encoder().encode
_CACHE_KEY = "core"
_EMPTY = msgspec.Raw(_encode({}))  # the properties of a message without any


def scalars(props: dict[str, Any]) -> dict[str, Any]:
    """Properties as a CORE client gets them: other protocols' internal ones left out
    (`petrel.core.message_props`), values CORE cannot carry (lists, maps) as text."""
    return {k: v if type(v) in _SCALARS else str(v) for k, v in props.items() if not k.startswith(INTERNAL_PREFIXES)}


def wire_properties(m: Message) -> msgspec.Raw:
    """`scalars` of the message's properties, encoded once per message (its wire cache, key
    "core") and put into each DELIVER as they are."""
    cache = m.wire_cache
    if cache is not None:
        if cache[0] is _CACHE_KEY:
            value = cache[1]
            if type(value) is not dict:
                return value
            raw = _encoded(value)  # delivered once as they are (delivery_properties): now once for all
            if len(raw) <= WIRE_CACHE_LIMIT:
                m.wire_cache = (_CACHE_KEY, raw) + cache[2:]
            return raw
        value = m.wire_get(_CACHE_KEY)
        if value is not None:
            return value if type(value) is not dict else _encoded(value)  # type: ignore[return-value]
    props = m.properties
    if not props:
        return _EMPTY  # (nothing to encode nor to keep)
    for k, v in props.items():  # most are clean already: no copy
        if type(v) not in _SCALARS or k.startswith(INTERNAL_PREFIXES):
            props = scalars(props)
            break
    raw = _encoded(props)
    if cache is None and len(raw) <= WIRE_CACHE_LIMIT:
        m.wire_cache = (_CACHE_KEY, raw)  # (Message.wire_put's first entry, inlined)
    else:
        m.wire_put(_CACHE_KEY, raw, len(raw))
    return raw


def delivery_properties(m: Message) -> msgspec.Raw | dict[str, Any]:
    """What a DELIVER of `m` carries as its properties: `wire_properties`, except on the first
    delivery of a message whose properties are already what a CORE client gets (no other
    protocol's internal ones, only scalars): those go as they are, encoded with the DELIVER (a
    message delivered once needs no separate encoding), and the wire cache keeps them so a
    second delivery encodes them once for all later ones. The DELIVER falls back on
    `wire_properties` if they cannot be encoded (an integer over 64 bits)."""
    if m.wire_cache is None:
        props = m.properties
        if not props:
            return _EMPTY
        for k, v in props.items():
            if type(v) not in _SCALARS or k.startswith(INTERNAL_PREFIXES):
                return wire_properties(m)
        m.wire_cache = (_CACHE_KEY, props)
        return props
    return wire_properties(m)


def _encoded(props: dict[str, Any]) -> msgspec.Raw:
    try:
        return msgspec.Raw(_encode(props))
    except (TypeError, ValueError, OverflowError):  # (an integer over 64 bits): as text
        return msgspec.Raw(_encode({k: v if isinstance(v, (str, bytes)) else str(v) for k, v in props.items()}))


class ConsumerFrames:
    def on_create_consumer(self: CoreAdapter, e: CreateConsumer) -> None:
        session = self._session(e.session)
        if e.consumer in session.consumers:
            raise RequestFailed(ErrorCode.ALREADY_EXISTS, f"consumer {e.consumer} already exists on the session")
        if (refused := internal_name_problem(self, e.queue.rpartition("::")[2], e.address)) is not None:  # the cluster's $.petrel.* names
            raise RequestFailed(ErrorCode.UNAUTHORIZED, refused)
        office = self.office
        if e.queue:
            selector = compile_selector(e.filter) if e.filter else None
            name = e.queue.rpartition("::")[2]
            queue = office.queues.get(name)
            if queue is None:
                raise RequestFailed(ErrorCode.NOT_FOUND, f"queue {name!r} does not exist")
            self.access.check("consume", queue.address)
        else:
            if not e.address:
                raise RequestFailed(ErrorCode.INVALID, "a consumer needs a queue or an address")
            if not -1 <= e.routing_type <= 1:
                raise RequestFailed(ErrorCode.INVALID, f"bad routing type {e.routing_type}")
            # the address's anycast queue, or a (durable: <client id>.<subscription>) multicast subscription
            queue, selector = self.server_session.open_queue(
                e.address, ROUTING[e.routing_type + 1], selector=e.filter or None, client_id=self.client_id,
                durable_name=e.subscription or None)
            if queue.temporary and queue.routing_type == RoutingType.MULTICAST:  # our own subscription
                self.temporary_queues.add(queue.name)
        consumer = CoreConsumer(
            queue, self._deliver, session=session, cid=e.consumer, window=e.window,
            selector=selector, auto_ack=e.auto_ack,
        )
        self.server_session.add_consumer(consumer)  # (paused while the connection's writes are)
        session.consumers[e.consumer] = consumer
        self.by_consumer[consumer.id] = consumer
        self.reply(Result(e.corr, 0, "", {"queue": queue.name, "address": queue.address}))
        queue.add_consumer(consumer)

    def on_close_consumer(self, e: CloseConsumer) -> None:
        session = self._session(e.session)
        consumer = session.consumers.get(e.consumer)
        if consumer is not None:
            consumer.paused = True  # nothing more goes out to it
            queue = consumer.queue
            for ref in reversed(self._refs(consumer, e.returned, False)):
                queue.cancel(ref, redelivered=False)
            self._remove_consumer(consumer)
        self.reply(Result(e.corr))

    def _remove_consumer(self, consumer: CoreConsumer) -> None:
        consumer.session.consumers.pop(consumer.cid, None)
        self.by_consumer.pop(consumer.id, None)
        self.server_session.remove_consumer(consumer)
        queue = consumer.queue
        if queue.deleted:
            self.temporary_queues.discard(queue.name)

    def on_credit(self, e: Credit) -> None:
        session = self.sessions.get(e.session)
        consumer = session.consumers.get(e.consumer) if session is not None else None
        if consumer is None:
            return  # closed meanwhile
        was_empty = consumer.credit <= 0
        consumer.credit += e.credit
        if was_empty and consumer.credit > 0:
            consumer.queue.deliver()

    def _deliver(self: CoreAdapter, consumer: CoreConsumer, ref: MessageReference) -> None:
        m = ref.message
        if m.large is not None:
            consumer.credit -= m.large.size + CREDIT_OVERHEAD
            large.deliver(self, consumer, ref, scalars(m.properties), self.chunk_size)
            return
        body = m.body
        size = len(body)
        consumer.credit -= size + CREDIT_OVERHEAD  # credit_of(size)
        send = self.codec.send
        sid, cid = consumer.session.id, consumer.cid
        if size <= self.chunk_size or not self.large_ok:
            props = delivery_properties(m)
            try:
                data = send(Deliver(sid, cid, ref.seq, ref.delivery_count, m.id, m.address, m.durable, m.priority,
                                    m.expiration, m.timestamp, props, body, size, False))
            except LocalProtocolError:
                if type(props) is not dict:
                    raise
                data = send(Deliver(sid, cid, ref.seq, ref.delivery_count, m.id, m.address, m.durable, m.priority,
                                    m.expiration, m.timestamp, wire_properties(m), body, size, False))
            self.conn.write(data)
            return
        # a big body held in memory (it came from where files are not used): in chunks all the same
        chunk = self.chunk_size
        view = memoryview(body)
        write = self.conn.write
        write(send(Deliver(
            sid, cid, ref.seq, ref.delivery_count, m.id, m.address, m.durable, m.priority, m.expiration,
            m.timestamp, scalars(m.properties), view[:chunk], size, True)))
        for start in range(chunk, size, chunk):
            end = start + chunk
            write(send(DeliverChunk(sid, cid, view[start:end], end < size)))

    def _refs(self, consumer: CoreConsumer, seqs: list[int], cumulative: bool) -> list[MessageReference]:
        delivering = consumer.delivering
        if not cumulative:
            return [delivering[s] for s in seqs if s in delivering]
        if not seqs or seqs[-1] not in delivering:
            return []
        last = seqs[-1]
        refs = []
        for s, ref in delivering.items():
            refs.append(ref)
            if s == last:
                break
        return refs

    def _consumer_of(self, session_id: int, consumer_id: int, corr: int) -> CoreConsumer | None:
        session = self.sessions.get(session_id)
        consumer = session.consumers.get(consumer_id) if session is not None else None
        if consumer is None and corr:
            raise RequestFailed(ErrorCode.NOT_FOUND, f"no consumer {consumer_id} on session {session_id}")
        return consumer

    def on_ack(self, e: Ack) -> None:
        consumer = self._consumer_of(e.session, e.consumer, e.corr)
        if consumer is None:
            return
        refs = self._refs(consumer, e.seqs, e.cumulative)
        tx = consumer.session.tx
        self.server_session.acknowledge(consumer, refs, tx)
        if e.corr:
            self.reply(Result(e.corr, 0, "", len(refs)), sync=tx is None)

    def on_nack(self, e: Nack) -> None:
        consumer = self._consumer_of(e.session, e.consumer, e.corr)
        if consumer is None:
            return
        refs = self._refs(consumer, e.seqs, False)
        self.server_session.cancel(consumer, refs, redelivered=not e.undelivered)  # all back before any goes again
        if e.corr:
            self.reply(Result(e.corr, 0, "", len(refs)), sync=True)
