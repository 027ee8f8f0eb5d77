"""AMQP 1.0 links: attach, flow, disposition and detach (a mixin of `AmqpAdapter`).

A link on which the client receives is a `Consumer` on the queue its source names (an anycast
queue, a topic subscription, or a durable one ``<container-id>.<link name>`` when the source is
durable); its credit is the link credit the client grants, one delivery each. Pre-settled links
(snd-settle-mode settled) acknowledge as they deliver; the others wait for the client's
disposition: accepted acknowledges, rejected dead-letters, released puts the message back as
not delivered, modified with delivery-failed puts it back with its delivery count one higher.

Transfers on links where the client sends, and the transaction coordinator, are in
`amqp_incoming`.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING

from petrel.codec.amqp.errors import (
    HANDLE_IN_USE, INVALID_FIELD, NOT_FOUND, RESOURCE_LIMIT_EXCEEDED, UNATTACHED_HANDLE, UNAUTHORIZED_ACCESS,
    AmqpError,
)
from petrel.codec.amqp.performatives import (
    ROLE_RECEIVER, ROLE_SENDER, SND_SETTLED, Accepted, Attach, Coordinator, Detach, Disposition, Error, Flow,
    Modified, Rejected, Released, Source, Target, TransactionalState,
)
from petrel.codec.amqp.types import Described
from petrel.core.consumer import DELIVERING, Consumer
from petrel.core.errors import RoutingError
from petrel.core.message import RoutingType
from petrel.core.selector import SelectorError
from petrel.security.errors import NotAuthorized as SecurityNotAuthorized
from petrel.server.adapters.amqp_convert import parse_address, to_amqp
from petrel.server.refusals import NotAuthorized, Refused, RoutingRefused, refusal_of

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference
    from petrel.server.adapters.amqp import AmqpAdapter

__all__ = ["Channel", "Link", "LinkFrames", "LinkConsumer", "CREDIT", "HANDLE_MAX", "condition_of"]

log = logging.getLogger("petrel.server.amqp")

#: Credit the broker grants a client's sending link, topped up when half is used.
CREDIT = 1000
#: The highest link handle a session takes (the broker's begin says so).
HANDLE_MAX = 0xFFFF
#: The "client id" of subscriptions whose source has the "global" capability.
GLOBAL = "global"


class Channel:
    """One AMQP session: its links by handle and the deliveries it sent, unsettled."""

    __slots__ = ("number", "next_outgoing_id", "next_incoming_id", "incoming_window", "links", "unsettled",
                 "detached", "remote_window")

    def __init__(self, number: int, next_incoming_id: int, remote_incoming_window: int = 0x7FFFFFFF) -> None:
        self.number = number
        self.next_outgoing_id = 0
        self.next_incoming_id = next_incoming_id
        self.incoming_window = 0x7FFFFFFF
        self.remote_window = remote_incoming_window  # transfers the client takes before its next flow
        self.links: dict[int, Link] = {}
        self.unsettled: dict[int, tuple[Link, MessageReference]] = {}  # delivery id -> what it carried
        self.detached: set[int] = set()  # handles the broker detached, the client's detach still to come


class Link:
    __slots__ = ("channel", "handle", "name", "outgoing", "address", "routing_type", "credit", "delivery_count",
                 "consumer", "presettled", "durable_name", "coordinator", "live", "drain", "lookup", "dynamic",
                 "shared", "client_id")

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
        self.shared: str | None = None  # the queue of a shared non-durable subscription
        self.client_id: str | None = None  # whose durable subscription (a container id, or GLOBAL)


class LinkConsumer(Consumer):
    """A consumer whose credit is its link's: one message per unit of link credit."""

    link: Link

    def has_credit(self) -> bool:
        link = self.link
        return link.credit > 0 and link.live and link.channel.remote_window > 0 and super().has_credit()


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
        if handle > HANDLE_MAX:
            raise AmqpError(RESOURCE_LIMIT_EXCEEDED, f"handle {handle} is over handle-max {HANDLE_MAX}")
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
        caps = set(source.capabilities or ())
        # a subscription is named by its link (Qpid JMS: "name", "name|2"... for one shared by
        # several links); "global": shared beyond this container id
        subscription = a.name.split("|", 1)[0] if "shared" in caps else a.name
        client_id = GLOBAL if "global" in caps else self.container_id
        durable_name = subscription if durable and routing_type != RoutingType.ANYCAST else None
        if "shared" in caps and not durable and routing_type != RoutingType.ANYCAST:
            queue, selector = self._shared_volatile(name, f"{client_id}.{subscription}", _selector(source))
            link.shared = queue.name
        else:
            queue, selector = session.open_queue(name, routing_type, selector=_selector(source),
                                                 client_id=client_id, durable_name=durable_name)
        link.address, link.routing_type, link.durable_name = name, routing_type, durable_name
        link.client_id = client_id
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

    def _shared_volatile(self: AmqpAdapter, address: str, qname: str, selector: str | None):
        """The queue of a shared non-durable subscription: made by its first link, deleted
        with its last (`drop_link`)."""
        office = self.office
        try:
            self.access.subscribe(office, address, RoutingType.MULTICAST, filter=selector)
        except SecurityNotAuthorized as exc:
            raise NotAuthorized(str(exc)) from None
        queue = office.queues.get(qname)
        if queue is None:
            try:
                office.ensure_address_for(address, RoutingType.MULTICAST)
                queue = office.create_queue(qname, address, RoutingType.MULTICAST, durable=False, filter=selector,
                                            temporary=True)
            except (RoutingError, SelectorError) as exc:
                raise refusal_of(exc) from None
        elif queue.address != address:
            raise RoutingRefused(f"shared subscription {qname!r} is on address {queue.address!r}")
        return queue, None

    def _lookup_durable(self: AmqpAdapter, ch: Channel, a, link: Link) -> None:
        """An attach naming no address: Qpid JMS looking up a durable subscription by its link
        name (to unsubscribe: a detach with closed follows)."""
        caps = set(a.source.capabilities or ()) if isinstance(a.source, Source) else set()
        client_id = GLOBAL if "global" in caps else self.container_id
        subscription = a.name.split("|", 1)[0] if "shared" in caps else a.name
        qname = f"{client_id}.{subscription}"
        queue = self.office.queues.get(qname)
        if queue is None:
            self._refuse_attach(ch, a, NOT_FOUND, f"no durable subscription {qname!r}")
            return
        link.lookup, link.durable_name, link.client_id = True, subscription, client_id
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
                                     source=a.source, target=target, max_message_size=self.codec.max_message_size))
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
        # the session's window: what the client takes, counted from our next transfer id
        received = ch.next_outgoing_id if f.next_incoming_id is None else int(f.next_incoming_id)
        window = max(0, received + int(f.incoming_window) - ch.next_outgoing_id)
        opened = ch.remote_window <= 0 < window
        ch.remote_window = window
        if opened:  # deliveries held for the window go on
            for other in list(ch.links.values()):
                if other.outgoing and other.live and other is not ch.links.get(f.handle):
                    self._after_flow(other)
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
        ch.remote_window -= 1
        message = ref.message
        if message.large is not None:  # a large body from another protocol, read whole
            message = _with_body(message, self.broker.large.read(message.large))
        payload = to_amqp(message, ref.delivery_count)
        if not link.presettled:
            ch.unsettled[delivery_id] = (link, ref)
        self.conn.write(self.codec.send_transfer(ch.number, link.handle, delivery_id, link.presettled, payload))

    # -- dispositions --------------------------------------------------------------------------------

    def on_disposition(self: AmqpAdapter, ch: Channel, d) -> None:
        if d.role == ROLE_SENDER:
            return  # the client settles transfers it sent us: nothing is waiting on that here
        first = int(d.first)
        last = first if d.last is None else int(d.last)
        if last < first:
            raise AmqpError(INVALID_FIELD, f"disposition range {first}..{last}")
        unsettled = ch.unsettled
        if last - first < 64 or last - first <= len(unsettled):  # (in order: no sort)
            ids = [i for i in range(first, last + 1) if i in unsettled]
        else:
            ids = sorted(i for i in unsettled if first <= i <= last)
        state = d.state
        if state is None or type(state) is Accepted:
            self._accept_all(ch, ids, d.settled)
        else:
            for delivery_id in ids:
                link, ref = unsettled.pop(delivery_id) if d.settled else unsettled[delivery_id]
                self._settle(link, ref, state)
        if not d.settled and ids:
            for delivery_id in ids:
                unsettled.pop(delivery_id, None)
            self.reply(ch.number, Disposition(role=ROLE_SENDER, first=first, last=last, settled=True, state=state),
                       durable=True)

    def _accept_all(self: AmqpAdapter, ch: Channel, ids: list[int], settled: bool) -> None:
        """`_settle` with accepted for each of `ids`: one acknowledgement per run of one consumer's."""
        unsettled = ch.unsettled
        acknowledge = self.session.acknowledge
        consumer, refs = None, []
        for delivery_id in ids:
            link, ref = unsettled.pop(delivery_id) if settled else unsettled[delivery_id]
            owner = link.consumer
            if owner is None or ref.consumer is not owner:
                continue  # the message went back already (its link detached)
            if owner is not consumer:
                if refs:
                    acknowledge(consumer, refs)
                consumer, refs = owner, []
            refs.append(ref)
        if refs:
            acknowledge(consumer, refs)

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
            if link.shared is not None:
                queue = self.office.queues.get(link.shared)
                if queue is not None and not queue.consumers:  # its last link
                    self.office.delete_queue(link.shared)
            if closed and link.durable_name:
                queue = self.office.queues.get(f"{link.client_id}.{link.durable_name}")
                if queue is not None and queue.consumers:
                    return  # a shared subscription other links still use
                try:
                    self.session.delete_durable(link.client_id, link.durable_name)
                except (Refused, NotAuthorized) as exc:
                    log.info("durable subscription %r of %s not deleted: %s", link.durable_name, self.conn.peer, exc)


_CONDITIONS = {
    "not-authorized": UNAUTHORIZED_ACCESS,
    "address-full": RESOURCE_LIMIT_EXCEEDED,
    "routing": "amqp:not-found",
    "selector": "amqp:invalid-field",
    "rolled-back": "amqp:transaction:rollback",
    "no-transaction": "amqp:transaction:unknown-id",
    "not-found": "amqp:not-found",
    "invalid": "amqp:invalid-field",
    "not-durable": "amqp:internal-error",
}


def condition_of(refusal: Refused) -> str:
    """The AMQP error condition for one of the session's refusals."""
    return _CONDITIONS.get(refusal.kind, "amqp:internal-error")


def _condition(exc: Refused) -> str:
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


def _with_body(message, body: bytes):
    return dataclasses.replace(message, body=body, large=None, wire_cache=None)

