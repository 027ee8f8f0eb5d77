"""OpenWire consumers: ConsumerInfo on queues and topics, dispatch, MessageAck and the
consumer's end. A mixin of `OpenWireAdapter` (browsers: `openwire_browsers`).

The prefetch is the consumer's window; selectors; durable topic subscribers by client id +
subscription name; topic wildcards (`openwire_destinations`). A prefetch 0 consumer gets
nothing pushed: each MessagePull (its receive) opens room for one message, and when its timeout
passes with nothing dispatched (at once for a receiveNoWait's -1; never for 0, a receive without
timeout) a MessageDispatch without a message says so, as ActiveMQ does.

MessageAck: standard and individual acks settle; delivered acks widen the window by what the
client holds, as ActiveMQ does; acks in a local transaction settle at its commit
(`OpenWireAdapter.on_transaction`); a poison ack (the client's redelivery policy gave up on a
message) sends it to the dead-letter address at once; a redelivered ack changes nothing (the
client redelivers what it holds itself). A message's redelivery counter is the number of
deliveries that failed before (Petrel's delivery count): one that goes back to its queue when
its consumer closes counts only if the client delivered it (RemoveInfo's lastDeliveredSequenceId),
and one that failed `max_delivery_attempts` times goes to the dead-letter address. Advisory
consumers (``ActiveMQ.Advisory.*``) are accepted and never fed.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import TYPE_CHECKING

from petrel.codec.openwire import (
    AckType,
    ConsumerId,
    ConsumerInfo,
    MessageAck,
    MessageDispatch,
    MessagePull,
    OpenWireLocalError,
    ProducerId,
)
from petrel.core.consumer import Consumer
from petrel.core.message import RoutingType
from petrel.server.adapters.openwire_destinations import consumer_address
from petrel.server.adapters.openwire_messages import to_openwire, with_whole_body
from petrel.server.refusals import Refused

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference
    from petrel.server.adapters.openwire import OpenWireAdapter

log = logging.getLogger("petrel.server.openwire")

ADVISORY_PREFIX = "ActiveMQ.Advisory."
LAST_DELIVERED_UNKNOWN = -2  # RemoveInfo.lastDeliveredSequenceId when the client does not say


def dispatched_up_to(delivering: dict[int, MessageReference], order: dict[int, int], limit: int) -> list:
    """The held messages dispatched no later than dispatch number `limit`: a prefix of
    `delivering`, which is in delivery order (as the dispatch numbers), so the walk stops at the
    first later one instead of reading all that the consumer holds (up to its prefetch) per ack."""
    refs = []
    for s, ref in delivering.items():
        if order.get(s, 0) > limit:
            break
        refs.append(ref)
    return refs


class Sub:
    """One OpenWire consumer: its ConsumerInfo, its Petrel consumer (None for an advisory one),
    and what it was dispatched (acks name messages by id)."""

    __slots__ = ("info", "consumer", "by_message", "order", "dispatched", "prefetch", "extension", "pull", "timer")

    def __init__(self, info: ConsumerInfo, consumer: Consumer | None) -> None:
        self.info = info
        self.consumer = consumer
        self.prefetch = consumer.window if consumer is not None else 0
        self.extension = 0  # messages delivered-acked (held by a client-ack session): the window grows by them
        self.by_message: dict[int, int] = {}  # Petrel message id -> its reference's seq (acks name messages)
        self.order: dict[int, int] = {}  # seq -> dispatch number: a standard ack covers all dispatched up to its last
        self.dispatched = 0
        self.pull = 0  # the number of the last MessagePull (a prefetch 0 consumer)
        self.timer = None  # its timeout


class OpenWireConsumers:
    def init_consumers(self: OpenWireAdapter) -> None:
        self.subs: dict[ConsumerId, Sub] = {}
        self.by_consumer: dict[int, Sub] = {}  # Consumer.id -> its Sub
        self.producer = ProducerId(self.node, 0, 0)  # the producer id of what the broker dispatches

    def on_consumer(self: OpenWireAdapter, c: ConsumerInfo) -> None:
        dest = c.destination
        if dest is None or not dest.name:
            raise Refused("a consumer without a destination")
        if c.consumer_id in self.subs:
            raise Refused(f"consumer {c.consumer_id} exists already")
        if dest.name.startswith(ADVISORY_PREFIX):  # no advisories: the consumer waits for nothing
            self.subs[c.consumer_id] = Sub(c, None)
            self.respond(c)
            return
        if c.browser:
            self.on_browser(c)
            return
        routing = RoutingType.MULTICAST if dest.is_topic else RoutingType.ANYCAST
        durable_name = c.subscription_name if dest.is_topic else None
        address, pattern = consumer_address(dest)
        with self.office.names_from_elsewhere() if pattern else nullcontext():  # (its words checked)
            queue, selector = self.session.open_queue(address, routing, selector=c.selector,
                                                      client_id=c.client_id or self.client_id, durable_name=durable_name)
        prefetch = max(0, c.prefetch_size)
        consumer = Consumer(queue, self._deliver, selector=selector, window=0 if self.holding() else prefetch)
        self.session.add_consumer(consumer)
        sub = Sub(c, consumer)
        sub.prefetch = prefetch
        self.subs[c.consumer_id] = sub
        self.by_consumer[consumer.id] = sub
        self.respond(c)
        queue.add_consumer(consumer)

    def _deliver(self: OpenWireAdapter, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        if sub is None:
            return
        m = ref.message
        sub.by_message[m.id] = ref.seq
        sub.dispatched += 1
        sub.order[ref.seq] = sub.dispatched
        if sub.prefetch == 0:  # the pull is answered: no more until the next
            consumer.window = 0
            if sub.timer is not None:
                sub.timer.cancel()
                sub.timer = None
        info = sub.info
        if m.large is not None:
            m = with_whole_body(m, self.broker.large)
        try:
            frame = self.codec.send(MessageDispatch(
                consumer_id=info.consumer_id, destination=info.destination,
                message=to_openwire(m, info.destination.kind, self.producer, ref.delivery_count),
                redelivery_counter=ref.delivery_count))
        except OpenWireLocalError as exc:  # (it goes back to its queue with this connection)
            self.fail(f"message {m.id} cannot be dispatched: {exc}")
            return
        self.conn.write(frame)

    def on_pull(self: OpenWireAdapter, p: MessagePull) -> None:
        sub = self.subs.get(p.consumer_id)
        if sub is None:
            browse = self.browsers.get(p.consumer_id)
            if browse is not None:
                self.browser_pull(browse, p)
                return
        self.respond(p)
        if sub is None or sub.consumer is None or sub.prefetch != 0:
            return  # (a consumer with a prefetch has its messages pushed)
        if self.moving_to is not None:  # on its way to another node: nothing here (see openwire_cluster)
            self.write(MessageDispatch(consumer_id=sub.info.consumer_id, destination=sub.info.destination))
            return
        consumer = sub.consumer
        sub.pull += 1
        pull, before = sub.pull, sub.dispatched
        if sub.timer is not None:
            sub.timer.cancel()
            sub.timer = None
        consumer.window = len(consumer.delivering) + 1
        consumer.queue.deliver()
        if sub.dispatched != before:
            return
        if p.timeout < 0:  # receiveNoWait
            self._pull_timeout(sub, pull, before)
        elif p.timeout > 0:
            sub.timer = self.conn.call_later(p.timeout / 1000, lambda: self._run(
                lambda: self._pull_timeout(sub, pull, before)))

    def _pull_timeout(self: OpenWireAdapter, sub: Sub, pull: int, before: int) -> None:
        """Nothing came for a pull: the client hears so (a dispatch without a message)."""
        if sub.pull != pull or sub.dispatched != before or self.subs.get(sub.info.consumer_id) is not sub:
            return
        sub.timer = None
        sub.consumer.window = 0
        info = sub.info
        self.write(MessageDispatch(consumer_id=info.consumer_id, destination=info.destination))

    def on_ack(self: OpenWireAdapter, a: MessageAck) -> None:
        sub = self.subs.get(a.consumer_id)
        if sub is None:
            browse = self.browsers.get(a.consumer_id)
            if browse is not None:
                self.browser_ack(browse, a)
                return
        if sub is None or sub.consumer is None:
            self.respond(a)
            return
        consumer = sub.consumer
        kind = a.ack_type
        if kind == AckType.DELIVERED:  # the client holds them unacknowledged: room for as many more
            if sub.prefetch == 0:  # (a pulling consumer's room is its pulls')
                self.respond(a)
                return
            sub.extension += max(0, a.message_count)
            if not self.holding():
                consumer.window = sub.prefetch + sub.extension
                consumer.queue.deliver()
            self.respond(a)
            return
        if kind in (AckType.REDELIVERED, AckType.UNMATCHED) or a.last_message_id is None:
            self.respond(a)
            return
        if a.last_message_id.producer_id != self.producer:
            # another node's message (a failover client's ack replayed here after it moved): its
            # id may be one of this node's, which the ack must not settle
            self.respond(a)
            return
        seq = sub.by_message.get(a.last_message_id.producer_sequence_id)
        if seq is None or seq not in consumer.delivering:
            self.respond(a)  # settled already (a repeated ack)
            return
        delivering = consumer.delivering
        if kind == AckType.INDIVIDUAL:
            refs = [delivering[seq]]
        else:  # everything dispatched up to the last one (a rolled-back transaction's acks come back unordered)
            refs = dispatched_up_to(delivering, sub.order, sub.order.get(seq, 0))
        if a.transaction_id is None:
            for ref in refs:
                sub.by_message.pop(ref.message.id, None)
                sub.order.pop(ref.seq, None)
        elif len(sub.order) > 2 * len(delivering) + 1024:  # forget what transactions settled
            sub.order = {s: n for s, n in sub.order.items() if s in delivering}
            sub.by_message = {i: s for i, s in sub.by_message.items() if s in delivering}
        if sub.extension:
            sub.extension = max(0, sub.extension - len(refs))
            if not self.holding():
                consumer.window = sub.prefetch + sub.extension
        tx = self.tx_name(a.transaction_id)
        if kind == AckType.POISON:  # the client gave up on them (its redelivery policy): to the DLA
            cause = a.poison_cause.message if a.poison_cause is not None else None
            log.info("OpenWire consumer %s poisoned %d message(s) of %s: %s", a.consumer_id, len(refs),
                     consumer.queue.name, cause)
            self.session.cancel(consumer, refs, dead_letter=True)
        elif tx is not None:
            # settled at the commit; a rollback leaves them with the client, which redelivers them itself
            self.session.transaction(tx)
            self.tx_acks.setdefault(tx, []).append((consumer, refs))
        else:
            self.session.acknowledge(consumer, refs)
        self.respond(a, durable=a.response_required and tx is None)

    def remove_consumer(self: OpenWireAdapter, cid: ConsumerId, last_delivered: int = LAST_DELIVERED_UNKNOWN) -> None:
        """The consumer closes: what it holds unacknowledged goes back, counted as a delivery
        only when the client delivered it to the application (`last_delivered`: the broker
        sequence id, here Petrel's message id, of the last it delivered, -1 none, -2 unknown;
        as ActiveMQ, those with a greater id were only prefetched)."""
        self.browsers.pop(cid, None)
        sub = self.subs.pop(cid, None)
        if sub is None:
            return
        if sub.timer is not None:
            sub.timer.cancel()
        consumer = sub.consumer
        if consumer is None:
            return
        self.by_consumer.pop(consumer.id, None)
        if last_delivered != LAST_DELIVERED_UNKNOWN and not consumer.queue.deleted:
            prefetched = [ref for ref in consumer.delivering.values() if ref.message.id > last_delivered]
            if prefetched:
                consumer.closed = True  # (nothing more for it while they go back, last first: their order stays)
                self.session.cancel(consumer, prefetched[::-1], redelivered=False)
        self.session.remove_consumer(consumer)
