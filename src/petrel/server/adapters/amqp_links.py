"""AMQP 1.0 links: attach, flow, transfer, disposition and detach (a mixin of `AmqpAdapter`).

A link on which the client receives is a `Consumer` on the queue its source names (an anycast
queue, a topic subscription, or a durable one ``<container-id>.<link name>`` when the source is
durable); its credit is the link credit the client grants, one delivery each. Pre-settled links
(snd-settle-mode settled) acknowledge as they deliver; the others wait for the client's
disposition: accepted acknowledges, rejected dead-letters, released puts the message back as
not delivered, modified with delivery-failed puts it back with its delivery count one higher.

A link on which the client sends routes each transfer through the session; an unsettled
transfer is answered with an accepted disposition once the message is durable (or a rejected
one saying why it was refused), and credit is topped up as it is used. The transaction
coordinator is such a link: declare and discharge are messages on it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from petrel.codec.amqp.errors import (
    ERRANT_LINK, HANDLE_IN_USE, INTERNAL_ERROR, INVALID_FIELD, NOT_FOUND, NOT_IMPLEMENTED, TX_ROLLBACK,
    TX_UNKNOWN_ID, UNATTACHED_HANDLE, UNAUTHORIZED_ACCESS, AmqpError,
)
from petrel.codec.amqp.message import decode_message
from petrel.codec.amqp.performatives import (
    ROLE_RECEIVER, ROLE_SENDER, SND_SETTLED, Accepted, Attach, Coordinator, Declare, Declared, Detach,
    Discharge, Disposition, Error, Flow, Modified, Rejected, Released, Source, Target, TransactionalState,
    Transfer,
)
from petrel.codec.amqp.types import Described
from petrel.core.consumer import DELIVERING, Consumer
from petrel.core.message import RoutingType, now_ms
from petrel.security.errors import NotAuthorized as SecurityNotAuthorized
from petrel.server.adapters.amqp_convert import parse_address, to_amqp, to_petrel
from petrel.server.refusals import NotAuthorized, Refused, TransactionRolledBack, TransactionUnknown

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference
    from petrel.server.adapters.amqp import AmqpAdapter

__all__ = ["Channel", "Link", "LinkFrames", "LinkConsumer", "CREDIT"]

log = logging.getLogger("petrel.server.amqp")

#: Credit the broker grants a client's sending link, topped up when half is used.
CREDIT = 1000


class Channel:
    """One AMQP session: its links by handle and the deliveries it sent, unsettled."""

    __slots__ = ("number", "next_outgoing_id", "next_incoming_id", "incoming_window", "links", "unsettled",
                 "detached")

    def __init__(self, number: int, next_incoming_id: int) -> None:
        self.number = number
        self.next_outgoing_id = 0
        self.next_incoming_id = next_incoming_id
        self.incoming_window = 0x7FFFFFFF
        self.links: dict[int, Link] = {}
        self.unsettled: dict[int, tuple[Link, MessageReference]] = {}  # delivery id -> what it carried
        self.detached: set[int] = set()  # handles the broker detached, the client's detach still to come


class Link:
    __slots__ = ("channel", "handle", "name", "outgoing", "address", "routing_type", "credit", "delivery_count",
                 "consumer", "presettled", "durable_name", "coordinator", "live", "drain", "lookup", "dynamic")

    def __init__(self, channel: Channel, handle: int, name: str, outgoing: bool) -> None:
        self.channel = channel
        self.handle = handle
        self.name = name
        self.outgoing = outgoing  # the broker sends on it (the client receives)
        self.address: str | None = None
        self.routing_type: RoutingType | None = None
        self.credit = 0
        self.delivery_count = 0
        self.consumer: LinkConsumer | None = None
        self.presettled = False
        self.durable_name: str | None = None
        self.coordinator = False
        self.live = False  # our attach went out: deliveries may follow
        self.drain = False
        self.lookup = False  # a durable subscription looked up by name (no consumer)
        self.dynamic: str | None = None  # the temporary queue its dynamic node made


class LinkConsumer(Consumer):
    """A consumer whose credit is its link's: one message per unit of link credit."""

    link: Link

    def has_credit(self) -> bool:
        return self.link.credit > 0 and self.link.live and super().has_credit()


def _selector(source) -> str | None:
    for value in (source.filter or {}).values():
        if isinstance(value, Described) and isinstance(value.value, str):
            return value.value  # apache.org:selector-filter:string (jms-selector)
    return None


class LinkFrames:
    """attach, flow, transfer, disposition, detach."""

    # -- attach ----------------------------------------------------------------------------------

    def on_attach(self: AmqpAdapter, ch: Channel, a) -> None:
        handle = int(a.handle)
        ch.detached.discard(handle)
        if handle in ch.links:
            raise AmqpError(HANDLE_IN_USE, f"handle {handle} is already attached")
        try:
            if a.role == ROLE_RECEIVER:
                self._attach_outgoing(ch, a)
            else:
                self._attach_incoming(ch, a)
        except Refused as exc:
            self._refuse_attach(ch, a, _condition(exc), str(exc))
        except SecurityNotAuthorized as exc:
            self._refuse_attach(ch, a, UNAUTHORIZED_ACCESS, str(exc))

    def _refuse_attach(self: AmqpAdapter, ch: Channel, a, condition: str, why: str) -> None:
        log.info("AMQP link %r refused for %s: %s", a.name, self.conn.peer, why)
        role = ROLE_SENDER if a.role == ROLE_RECEIVER else ROLE_RECEIVER
        self.reply(ch.number, Attach(name=a.name, handle=a.handle, role=role))
        self.reply(ch.number, Detach(handle=a.handle, closed=True, error=Error(condition=condition, description=why)))
        ch.detached.add(int(a.handle))

    def _attach_outgoing(self: AmqpAdapter, ch: Channel, a) -> None:
        source = a.source
        if source is not None and not isinstance(source, Source):
            raise AmqpError(INVALID_FIELD, "an attach's source must be a source")
        link = Link(ch, int(a.handle), a.name, True)
        if source is None or (not source.address and not source.dynamic):
            self._lookup_durable(ch, a, link)
            return
        session = self.session
        if source.dynamic:
            name = link.dynamic = self._dynamic_queue()
            routing_type = RoutingType.ANYCAST
            source = Source(address=name, dynamic=True, capabilities=("temporary-queue",))
        else:
            name, routing_type = parse_address(source.address, source.capabilities)
        durable = bool(source.durable) or source.expiry_policy == "never"
        durable_name = a.name if durable and routing_type != RoutingType.ANYCAST else None
        queue, selector = session.open_queue(name, routing_type, selector=_selector(source),
                                             client_id=self.container_id, durable_name=durable_name)
        link.address, link.routing_type, link.durable_name = name, routing_type, durable_name
        link.presettled = a.snd_settle_mode == SND_SETTLED
        consumer = LinkConsumer(queue, self._deliver, selector=selector, auto_ack=link.presettled)
        consumer.link = link
        link.consumer = consumer
        ch.links[link.handle] = link
        session.add_consumer(consumer)
        self.reply(ch.number, Attach(
            name=a.name, handle=a.handle, role=ROLE_SENDER, snd_settle_mode=a.snd_settle_mode,
            rcv_settle_mode=a.rcv_settle_mode, source=source, target=a.target, initial_delivery_count=0))

        def live() -> None:  # deliveries only once our attach is out
            if self.closing or ch.links.get(link.handle) is not link:
                return  # detached, or the connection failed, meanwhile
            link.live = True
            if not queue.deleted:
                queue.add_consumer(consumer)
            self._after_flow(link)

        session.confirm(live)

    def _lookup_durable(self: AmqpAdapter, ch: Channel, a, link: Link) -> None:
        """An attach naming no address: Qpid JMS looking up a durable subscription by its link
        name (to unsubscribe: a detach with closed follows)."""
        qname = f"{self.container_id}.{a.name}"
        queue = self.office.queues.get(qname)
        if queue is None:
            self._refuse_attach(ch, a, NOT_FOUND, f"no durable subscription {qname!r}")
            return
        link.lookup, link.durable_name = True, a.name
        ch.links[link.handle] = link
        self.reply(ch.number, Attach(
            name=a.name, handle=a.handle, role=ROLE_SENDER, source=Source(
                address=queue.address, durable=2, expiry_policy="never", capabilities=("topic",)),
            target=a.target, initial_delivery_count=0))
        self.session.confirm(lambda: setattr(link, "live", True))  # frames for it only after our attach

    def _attach_incoming(self: AmqpAdapter, ch: Channel, a) -> None:
        link = Link(ch, int(a.handle), a.name, False)
        target = a.target
        if isinstance(target, Coordinator):
            link.coordinator = True
        elif target is not None and not isinstance(target, Target):
            raise AmqpError(INVALID_FIELD, "an attach's target must be a target or a coordinator")
        elif target is not None and target.dynamic:
            name = link.dynamic = self._dynamic_queue()
            link.address, link.routing_type = name, RoutingType.ANYCAST
            target = Target(address=name, dynamic=True, capabilities=("temporary-queue",))
        elif target is not None and target.address:
            link.address, link.routing_type = parse_address(target.address, target.capabilities)
            self.access.send(self.office, link.address, link.routing_type)
        ch.links[link.handle] = link
        link.live = True
        link.credit = CREDIT
        link.delivery_count = int(a.initial_delivery_count or 0)
        self.reply(ch.number, Attach(name=a.name, handle=a.handle, role=ROLE_RECEIVER,
                                     snd_settle_mode=a.snd_settle_mode, rcv_settle_mode=0,
                                     source=a.source, target=target))
        self._grant(link)

    def _dynamic_queue(self: AmqpAdapter) -> str:
        """A temporary queue for a dynamic source or target (JMS temporary queues): deleted when
        its link closes or the connection ends (delete-on-close)."""
        name = f"dyn.{uuid.uuid4()}"
        try:
            self.access.check("createNonDurableQueue", name)
        except SecurityNotAuthorized as exc:
            raise NotAuthorized(str(exc)) from None
        self.office.create_queue(name, name, RoutingType.ANYCAST, durable=False, temporary=True)
        self.temporary.add(name)
        return name

    def delete_temporary(self: AmqpAdapter, name: str) -> None:
        self.temporary.discard(name)
        if name in self.office.queues:
            self.office.delete_queue(name)
            if name in self.office.addresses and not self.office.addresses[name].queues():
                self.office.delete_address(name)

    def _grant(self: AmqpAdapter, link: Link) -> None:
        ch = link.channel
        self.reply(ch.number, Flow(
            next_incoming_id=ch.next_incoming_id, incoming_window=ch.incoming_window,
            next_outgoing_id=ch.next_outgoing_id, outgoing_window=0x7FFFFFFF, handle=link.handle,
            delivery_count=link.delivery_count, link_credit=link.credit))

    # -- flow ------------------------------------------------------------------------------------

    def on_flow(self: AmqpAdapter, ch: Channel, f) -> None:
        if f.handle is None:
            if f.echo:
                self.reply(ch.number, Flow(next_incoming_id=ch.next_incoming_id, incoming_window=ch.incoming_window,
                                           next_outgoing_id=ch.next_outgoing_id, outgoing_window=0x7FFFFFFF))
            return
        link = ch.links.get(int(f.handle))
        if link is None and int(f.handle) in ch.detached:
            return  # sent before the client saw the broker's detach
        if link is None:
            raise AmqpError(UNATTACHED_HANDLE, f"flow on handle {f.handle}, which is not attached")
        if not link.outgoing:
            if f.echo:
                self._grant(link)
            return
        if f.link_credit is not None:
            their_count = link.delivery_count if f.delivery_count is None else int(f.delivery_count)
            link.credit = max(0, their_count + int(f.link_credit) - link.delivery_count)
        link.drain = bool(f.drain)
        if link.live:
            self._after_flow(link, echo=bool(f.echo))

    def _after_flow(self: AmqpAdapter, link: Link, echo: bool = False) -> None:
        if self.closing:
            return
        consumer = link.consumer
        if consumer is not None and link.credit > 0 and not consumer.queue.deleted:
            consumer.queue.deliver()
        if (link.drain and link.credit > 0) or echo:
            if link.drain:  # nothing more to send: the credit is used up
                link.delivery_count += link.credit
                link.credit = 0
            ch = link.channel
            self.conn.write(self.codec.send(ch.number, Flow(
                next_incoming_id=ch.next_incoming_id, incoming_window=ch.incoming_window,
                next_outgoing_id=ch.next_outgoing_id, outgoing_window=0x7FFFFFFF, handle=link.handle,
                delivery_count=link.delivery_count, link_credit=link.credit, drain=link.drain)))

    # -- deliveries to the client -----------------------------------------------------------------

    def _deliver(self: AmqpAdapter, consumer: LinkConsumer, ref: MessageReference) -> None:
        if self.closing:  # (its consumer is being removed: the message goes back with the others)
            return
        link = consumer.link
        ch = link.channel
        link.credit -= 1
        link.delivery_count += 1
        delivery_id = ch.next_outgoing_id
        ch.next_outgoing_id = (delivery_id + 1) & 0xFFFFFFFF
        message = ref.message
        if message.large is not None:  # a large body from another protocol, read whole
            message = _with_body(message, self.broker.large.read(message.large))
        payload = to_amqp(message, ref.delivery_count)
        if not link.presettled:
            ch.unsettled[delivery_id] = (link, ref)
        self.conn.write(self.codec.send(ch.number, Transfer(
            handle=link.handle, delivery_id=delivery_id, delivery_tag=delivery_id.to_bytes(4, "big"),
            message_format=0, settled=link.presettled or None), payload))

    # -- dispositions --------------------------------------------------------------------------------

    def on_disposition(self: AmqpAdapter, ch: Channel, d) -> None:
        if d.role == ROLE_SENDER:
            return  # the client settles transfers it sent us: nothing is waiting on that here
        first = int(d.first)
        last = first if d.last is None else int(d.last)
        if last < first:
            raise AmqpError(INVALID_FIELD, f"disposition range {first}..{last}")
        unsettled = ch.unsettled
        if last - first < 64:
            ids = [i for i in range(first, last + 1) if i in unsettled]
        else:
            ids = sorted(i for i in unsettled if first <= i <= last)
        state = d.state
        for delivery_id in ids:
            link, ref = unsettled.pop(delivery_id) if d.settled else unsettled[delivery_id]
            self._settle(link, ref, state)
        if not d.settled and ids:
            for delivery_id in ids:
                unsettled.pop(delivery_id, None)
            self.reply(ch.number, Disposition(role=ROLE_SENDER, first=first, last=last, settled=True, state=state),
                       durable=True)

    def _settle(self: AmqpAdapter, link: Link, ref: MessageReference, state) -> None:
        consumer = link.consumer
        if consumer is None or ref.consumer is not consumer:
            return  # the message went back already (its link detached)
        session = self.session
        tx = None
        if isinstance(state, TransactionalState):
            tx = self._tx_name(state.txn_id)
            state = state.outcome if state.outcome is not None else Accepted()
        if state is None or isinstance(state, Accepted):
            session.acknowledge(consumer, [ref], tx)
        elif isinstance(state, Rejected):
            _dead_letter(consumer, ref)
        elif isinstance(state, Released):
            session.cancel(consumer, [ref], redelivered=False)
        elif isinstance(state, Modified):
            session.cancel(consumer, [ref], redelivered=bool(state.delivery_failed))
        else:
            raise AmqpError(INVALID_FIELD, f"disposition state {type(state).__name__} from a receiver")

    # -- transfers from the client --------------------------------------------------------------------

    def on_transfer(self: AmqpAdapter, ch: Channel, event) -> None:
        t = event.performative
        ch.next_incoming_id = (ch.next_incoming_id + event.frames) & 0xFFFFFFFF
        link = ch.links.get(int(t.handle))
        if link is None and int(t.handle) in ch.detached:
            return  # sent before the client saw the broker's detach
        if link is None:
            raise AmqpError(UNATTACHED_HANDLE, f"transfer on handle {t.handle}, which is not attached")
        if link.outgoing:
            raise AmqpError(ERRANT_LINK, f"transfer on handle {t.handle}, where the broker is the sender")
        if t.aborted:
            return
        if link.credit <= 0:
            raise AmqpError("amqp:link:transfer-limit-exceeded", f"transfer on link {link.name!r} without credit")
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
        if link.coordinator:
            self._coordinate(ch, t, event.payload)
        else:
            self._receive(ch, link, t, event.payload)
        if link.credit <= CREDIT // 2:
            link.credit = CREDIT
            self._grant(link)

    def _receive(self: AmqpAdapter, ch: Channel, link: Link, t, payload: bytes) -> None:
        session = self.session
        tx = None
        txn_id = None
        if isinstance(t.state, TransactionalState):
            txn_id = t.state.txn_id
            tx = self._tx_name(txn_id)
        message = to_petrel(payload, message_id=session.next_id(), address=link.address or "", now=now_ms())
        routing_type = link.routing_type
        if link.address is None:  # the anonymous relay: the message says where it goes
            name, routing_type = parse_address(_to_of(payload), None)
            if not name:
                self._reject(ch, t, NOT_FOUND, "a message on the anonymous relay needs properties.to")
                return
            message.address = name
        if routing_type is None:
            routing_type = _jms_dest(message.properties)
        large = self.broker.large
        if large is not None and len(message.body) > self.broker.config.min_large_message_size:
            self._store_large(ch, t, message, routing_type, tx, txn_id)
            return
        self._send(ch, t, message, routing_type, tx, txn_id)

    def _send(self: AmqpAdapter, ch: Channel, t, message, routing_type, tx, txn_id) -> None:
        try:
            self.session.send(message, routing_type, tx,
                              then=lambda result: self._accepted(ch, t, txn_id, message.durable))
        except Refused as exc:
            self._reject(ch, t, _condition(exc), str(exc))

    def _store_large(self: AmqpAdapter, ch: Channel, t, message, routing_type, tx, txn_id) -> None:
        """A body over min_large_message_size goes to its own file (not the journal, not memory);
        a durable one is fsynced off the loop while this connection handles nothing else."""
        large = self.broker.large
        writer = large.create(message.id)
        try:
            writer.write(message.body)
            if not (message.durable and large.sync):
                message.large, message.body = writer.finish(durable=False), b""
                self._send(ch, t, message, routing_type, tx, txn_id)
                return
        except BaseException:
            writer.abort()
            raise
        session = self.session
        session.track_large(writer)
        session.hold()
        future = asyncio.get_running_loop().run_in_executor(None, writer.finish)

        def finished(f: asyncio.Future) -> None:
            session.untrack_large(writer)
            try:
                body = f.result()
            except Exception as exc:
                writer.abort()
                log.error("cannot store a large message body from %s: %s", self.conn.peer, exc)
                session.resume_held(lambda: self._reject(ch, t, INTERNAL_ERROR, f"cannot store the body: {exc}"))
                return
            if self.conn.closed:
                large.delete(body)
                return
            message.large, message.body = body, b""
            session.resume_held(lambda: self._send(ch, t, message, routing_type, tx, txn_id))

        future.add_done_callback(finished)

    def _accepted(self: AmqpAdapter, ch: Channel, t, txn_id: bytes | None, durable: bool) -> None:
        if t.settled:
            return
        state = Accepted() if txn_id is None else TransactionalState(txn_id=txn_id, outcome=Accepted())
        self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True, state=state),
                   durable=durable and txn_id is None)

    def _reject(self: AmqpAdapter, ch: Channel, t, condition: str, why: str) -> None:
        log.info("AMQP transfer refused for %s: %s", self.conn.peer, why)
        if t.settled:
            return
        self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                          state=Rejected(error=Error(condition=condition, description=why[:1000]))))

    # -- transactions --------------------------------------------------------------------------------

    @staticmethod
    def _tx_name(txn_id: bytes) -> str:
        return "amqp-" + bytes(txn_id).hex()

    def _coordinate(self: AmqpAdapter, ch: Channel, t, payload: bytes) -> None:
        body = decode_message(payload).body
        session = self.session
        if isinstance(body, Declare):
            txn_id = self.new_txn_id()
            session.begin(self._tx_name(txn_id))
            self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                              state=Declared(txn_id=txn_id)))
        elif isinstance(body, Discharge):
            name = self._tx_name(body.txn_id)
            try:
                if body.fail:
                    session.rollback(name)
                    self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                                      state=Accepted()))
                else:
                    session.commit(name)
                    self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                                      state=Accepted()), durable=True, transactional=True)
            except TransactionUnknown as exc:
                self._reject(ch, t, TX_UNKNOWN_ID, str(exc))
            except TransactionRolledBack as exc:
                self._reject(ch, t, TX_ROLLBACK, str(exc))
        else:
            self._reject(ch, t, NOT_IMPLEMENTED, "the coordinator takes declare and discharge only")

    # -- detach ----------------------------------------------------------------------------------------

    def on_detach(self: AmqpAdapter, ch: Channel, d) -> None:
        link = ch.links.get(int(d.handle))
        if link is None and int(d.handle) in ch.detached:  # the answer to the broker's detach
            ch.detached.discard(int(d.handle))
            return
        if link is None:
            raise AmqpError(UNATTACHED_HANDLE, f"detach of handle {d.handle}, which is not attached")
        self.drop_link(ch, link, closed=bool(d.closed))
        self.reply(ch.number, Detach(handle=d.handle, closed=d.closed))

    def drop_link(self: AmqpAdapter, ch: Channel, link: Link, *, closed: bool) -> None:
        """Forget `link`: its consumer closes (what it held unsettled goes back); a closed durable
        link ends its subscription, a closed dynamic one its temporary queue."""
        ch.links.pop(link.handle, None)
        if not link.outgoing and link.dynamic is not None and closed:
            self.delete_temporary(link.dynamic)
        if link.outgoing:
            for delivery_id in [i for i, (lk, _) in ch.unsettled.items() if lk is link]:
                del ch.unsettled[delivery_id]
            if link.consumer is not None:
                self.session.remove_consumer(link.consumer)
            if link.dynamic is not None and closed:
                self.delete_temporary(link.dynamic)
            if closed and link.durable_name:
                try:
                    self.session.delete_durable(self.container_id, link.durable_name)
                except (Refused, NotAuthorized) as exc:
                    log.info("durable subscription %r of %s not deleted: %s", link.durable_name, self.conn.peer, exc)


def _condition(exc: Refused) -> str:
    from petrel.server.adapters.amqp import condition_of

    return condition_of(exc)


def _dead_letter(consumer: Consumer, ref: MessageReference) -> None:
    """A rejected delivery: to the dead-letter address now, whatever its delivery count.
    (The queue's own bookkeeping of a cancel, then `dead_letter`; a candidate for `Queue`.)"""
    queue = consumer.queue
    if queue.non_destructive:
        queue.acknowledge(ref, consumer=consumer)
        return
    if consumer.delivering.pop(ref.seq, None) is not None:
        consumer.bytes_in_flight -= ref.message.body_size
    if ref.state != DELIVERING:
        return
    queue.delivering_count -= 1
    queue.delivering_bytes -= ref.message.size
    ref.consumer = None
    queue.office.dead_letter(ref)
    queue.deliver()


def _to_of(payload: bytes) -> str | None:
    props = decode_message(payload).properties
    return None if props is None else props.to


def _jms_dest(properties: dict) -> RoutingType | None:
    """Qpid JMS's x-opt-jms-dest annotation: 0 queue, 1 topic, 2 temporary queue, 3 temporary topic."""
    kind = properties.get("_AMQP_MA_x-opt-jms-dest")
    if kind in (0, 2):
        return RoutingType.ANYCAST
    if kind in (1, 3):
        return RoutingType.MULTICAST
    return None


def _with_body(message, body: bytes):
    import dataclasses

    return dataclasses.replace(message, body=body, large=None, wire_cache=None)

