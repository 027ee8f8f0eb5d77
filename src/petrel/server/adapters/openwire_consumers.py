"""OpenWire consumers: ConsumerInfo on queues and topics, dispatch, MessageAck and the
consumer's end. A mixin of `OpenWireAdapter` (browsers: `openwire_browsers`).

The prefetch is the consumer's window; selectors; durable topic subscribers by client id +
subscription name; topic wildcards (`openwire_destinations`); queue wildcards: one OpenWire
consumer over a core consumer per matching anycast queue, one more for each such queue created
later (the post office's `queue_listeners`), the prefetch shared by them all. A prefetch 0 consumer gets
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
from petrel.core.wildcard import matches
from petrel.server.adapters.openwire_destinations import consumer_parts
from petrel.server.adapters.openwire_messages import to_openwire, with_whole_body
from petrel.server.refusals import Refused

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference
    from petrel.server.adapters.openwire import OpenWireAdapter

log = logging.getLogger("petrel.server.openwire")

ADVISORY_PREFIX = "ActiveMQ.Advisory."
LAST_DELIVERED_UNKNOWN = -2  # RemoveInfo.lastDeliveredSequenceId when the client does not say


def dispatched_up_to(sub: Sub, limit: int) -> list[tuple[Consumer, MessageReference]]:
    """The held messages dispatched no later than dispatch number `limit`, with the consumer of
    each: a prefix of each core consumer's `delivering`, which is in delivery order (as the
    dispatch numbers), so each walk stops at the first later one instead of reading all that
    the consumer holds (up to its prefetch) per ack."""
    out = []
    order = sub.order
    for consumer in sub.consumers:
        cid = consumer.id
        for s, ref in consumer.delivering.items():
            if order.get((cid, s), 0) > limit:
                break
            out.append((consumer, ref))
    return out


class Sub:
    """One OpenWire consumer: its ConsumerInfo, its Petrel consumers (none for an advisory one;
    one per queue it takes from: a wildcard queue consumer has one per matching queue, more as
    such queues are created) and what it was dispatched (acks name messages by id)."""

    __slots__ = ("info", "consumers", "by_message", "order", "dispatched", "prefetch", "extension", "pull", "timer",
                 "patterns", "selector")

    def __init__(self, info: ConsumerInfo, consumers: list[Consumer]) -> None:
        self.info = info
        self.consumers = consumers
        self.prefetch = max(0, info.prefetch_size)
        self.extension = 0  # messages delivered-acked (held by a client-ack session): the window grows by them
        # Petrel message id -> its consumer and its reference's seq (acks name messages)
        self.by_message: dict[int, tuple[Consumer, int]] = {}
        # (consumer id, seq) -> dispatch number: a standard ack covers all dispatched up to its last
        self.order: dict[tuple[int, int], int] = {}
        self.dispatched = 0
        self.pull = 0  # the number of the last MessagePull (a prefetch 0 consumer)
        self.timer = None  # its timeout
        self.patterns: list[str] = []  # wildcard queue patterns: a matching queue created later joins
        self.selector = None

    def held(self) -> int:
        return sum(len(c.delivering) for c in self.consumers)

    def open_windows(self, allowed: int) -> None:
        """Room for `allowed` unacknowledged messages in all: the prefetch is the OpenWire
        consumer's, shared by its core consumers."""
        if len(self.consumers) == 1:
            self.consumers[0].window = allowed
            return
        room = max(0, allowed - self.held())
        for c in self.consumers:
            c.window = len(c.delivering) + room

    def deliver(self) -> None:
        for c in list(self.consumers):
            c.queue.deliver()


class OpenWireConsumers:
    def init_consumers(self: OpenWireAdapter) -> None:
        self.subs: dict[ConsumerId, Sub] = {}
        self.by_consumer: dict[int, Sub] = {}  # Consumer.id -> its Sub
        self.producer = ProducerId(self.node, 0, 0)  # the producer id of what the broker dispatches
        self.following = False  # listening for new queues (a wildcard queue consumer)

    def on_consumer(self: OpenWireAdapter, c: ConsumerInfo) -> None:
        dest = c.destination
        if dest is None or not dest.name:
            raise Refused("a consumer without a destination")
        if c.consumer_id in self.subs:
            raise Refused(f"consumer {c.consumer_id} exists already")
        if dest.name.startswith(ADVISORY_PREFIX):  # no advisories: the consumer waits for nothing
            self.subs[c.consumer_id] = Sub(c, [])
            self.respond(c)
            return
        if c.browser:
            self.on_browser(c)
            return
        parts = consumer_parts(dest)
        durable_name = c.subscription_name if dest.is_topic else None
        if durable_name and len(parts) > 1:
            raise Refused(f"a durable subscription takes one topic, not the composite {dest.name!r}")
        client_id = c.client_id or self.client_id
        opened = []
        sub = Sub(c, [])
        for address, routing, pattern in parts:
            if pattern and routing == RoutingType.ANYCAST:
                sub.patterns.append(address)
                sub.selector = c.selector
                for queue in list(self.office.queues.values()):
                    if self._follows(queue, address):
                        opened.append(self._open_existing(queue, c.selector))
                continue
            with self.office.names_from_elsewhere() if pattern else nullcontext():  # (its words checked)
                opened.append(self.session.open_queue(address, routing, selector=c.selector,
                                                      client_id=client_id, durable_name=durable_name))
        window = 0 if self.holding() else sub.prefetch
        for queue, selector in opened:
            if queue is None or any(x.queue is queue for x in sub.consumers):
                continue
            consumer = Consumer(queue, self._deliver, selector=selector, window=window)
            self.session.add_consumer(consumer)
            sub.consumers.append(consumer)
            self.by_consumer[consumer.id] = sub
        if len(sub.consumers) > 1 and not self.holding():
            sub.open_windows(sub.prefetch)
        self.subs[c.consumer_id] = sub
        if sub.patterns and not self.following:
            self.following = True
            self.office.queue_listeners.append(self._queue_created)
        self.respond(c)
        for consumer in list(sub.consumers):
            consumer.queue.add_consumer(consumer)

    @staticmethod
    def _follows(queue, pattern: str) -> bool:
        """Whether a wildcard queue consumer's `pattern` takes from `queue`: an anycast queue
        (not one of Petrel's own, ``$``) whose name it matches."""
        return (queue.routing_type == RoutingType.ANYCAST and not queue.deleted
                and not queue.name.startswith("$") and matches(pattern, queue.name))

    def _open_existing(self: OpenWireAdapter, queue, selector: str | None):
        """A queue a wildcard matched, opened as a consumer of it by name (its permission checked:
        one the user may not consume from is left out, as ActiveMQ leaves it out)."""
        try:
            return self.session.open_queue(queue.name, RoutingType.ANYCAST, selector=selector)
        except Refused as exc:
            log.info("OpenWire wildcard consumer leaves out queue %s: %s", queue.name, exc)
            return None, None

    def _queue_created(self, queue) -> None:
        """The post office made a queue: a wildcard queue consumer it matches takes from it."""
        if self._closing or queue.routing_type != RoutingType.ANYCAST:
            return
        for sub in list(self.subs.values()):
            if not any(self._follows(queue, p) for p in sub.patterns):
                continue
            if any(x.queue is queue for x in sub.consumers):
                continue
            try:
                opened, selector = self._open_existing(queue, sub.selector)
            except Exception:  # (another connection's send made the queue: it must not fail for this one)
                log.exception("OpenWire wildcard consumer %s cannot follow queue %s", sub.info.consumer_id, queue.name)
                continue
            if opened is None:
                continue
            consumer = Consumer(opened, self._deliver, selector=selector, window=0)
            self.session.add_consumer(consumer)
            sub.consumers.append(consumer)
            self.by_consumer[consumer.id] = sub
            if not self.holding():
                sub.open_windows(sub.prefetch + sub.extension if sub.prefetch else 0)
            opened.add_consumer(consumer)

    def stop_following(self: OpenWireAdapter) -> None:
        if self.following:
            self.following = False
            try:
                self.office.queue_listeners.remove(self._queue_created)
            except ValueError:
                pass

    def _deliver(self: OpenWireAdapter, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        if sub is None:
            return
        m = ref.message
        sub.by_message[m.id] = (consumer, ref.seq)
        sub.dispatched += 1
        sub.order[(consumer.id, ref.seq)] = sub.dispatched
        if sub.prefetch == 0:  # the pull is answered: no more until the next
            for c in sub.consumers:
                c.window = 0
            if sub.timer is not None:
                sub.timer.cancel()
                sub.timer = None
        elif len(sub.consumers) > 1 and not self.holding():  # (the prefetch is shared)
            sub.open_windows(sub.prefetch + sub.extension)
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
        if sub is None or not (sub.consumers or sub.patterns) or sub.prefetch != 0:
            return  # (a consumer with a prefetch has its messages pushed)
        if self.moving_to is not None:  # on its way to another node: nothing here (see openwire_cluster)
            self.write(MessageDispatch(consumer_id=sub.info.consumer_id, destination=sub.info.destination))
            return
        sub.pull += 1
        pull, before = sub.pull, sub.dispatched
        if sub.timer is not None:
            sub.timer.cancel()
            sub.timer = None
        for consumer in list(sub.consumers):
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
        for consumer in sub.consumers:
            consumer.window = 0
        info = sub.info
        self.write(MessageDispatch(consumer_id=info.consumer_id, destination=info.destination))

    def on_ack(self: OpenWireAdapter, a: MessageAck) -> None:
        sub = self.subs.get(a.consumer_id)
        if sub is None:
            browse = self.browsers.get(a.consumer_id)
            if browse is not None:
                self.browser_ack(browse, a)
                return
        if sub is None or not sub.consumers:
            self.respond(a)
            return
        kind = a.ack_type
        if kind == AckType.DELIVERED:  # the client holds them unacknowledged: room for as many more
            if sub.prefetch == 0:  # (a pulling consumer's room is its pulls')
                self.respond(a)
                return
            sub.extension += max(0, a.message_count)
            if not self.holding():
                sub.open_windows(sub.prefetch + sub.extension)
                sub.deliver()
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
        held = sub.by_message.get(a.last_message_id.producer_sequence_id)
        if held is None or held[1] not in held[0].delivering:
            self.respond(a)  # settled already (a repeated ack)
            return
        consumer, seq = held
        if kind == AckType.INDIVIDUAL:
            pairs = [(consumer, consumer.delivering[seq])]
        else:  # everything dispatched up to the last one (a rolled-back transaction's acks come back unordered)
            pairs = dispatched_up_to(sub, sub.order.get((consumer.id, seq), 0))
        if a.transaction_id is None:
            for c, ref in pairs:
                sub.by_message.pop(ref.message.id, None)
                sub.order.pop((c.id, ref.seq), None)
        elif len(sub.order) > 2 * sub.held() + 1024:  # forget what transactions settled
            live = {(c.id, s) for c in sub.consumers for s in c.delivering}
            sub.order = {k: n for k, n in sub.order.items() if k in live}
            sub.by_message = {i: h for i, h in sub.by_message.items() if (h[0].id, h[1]) in live}
        if sub.extension:
            sub.extension = max(0, sub.extension - len(pairs))
            if not self.holding():
                sub.open_windows(sub.prefetch + sub.extension)
        tx = self.tx_name(a.transaction_id)
        groups: dict[int, tuple[Consumer, list]] = {}
        for c, ref in pairs:
            groups.setdefault(c.id, (c, []))[1].append(ref)
        for c, refs in groups.values():
            if kind == AckType.POISON:  # the client gave up on them (its redelivery policy): to the DLA
                cause = a.poison_cause.message if a.poison_cause is not None else None
                log.info("OpenWire consumer %s poisoned %d message(s) of %s: %s", a.consumer_id, len(refs),
                         c.queue.name, cause)
                self.session.cancel(c, refs, dead_letter=True)
            elif tx is not None:
                # settled at the commit; a rollback leaves them with the client, which redelivers them itself
                self.session.transaction(tx)
                self.tx_acks.setdefault(tx, []).append((c, refs))
            else:
                self.session.acknowledge(c, refs)
        if len(sub.consumers) > 1 and not self.holding() and sub.prefetch:  # (freed room is shared)
            sub.open_windows(sub.prefetch + sub.extension)
            sub.deliver()
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
        for consumer in sub.consumers:
            self.by_consumer.pop(consumer.id, None)
            if last_delivered != LAST_DELIVERED_UNKNOWN and not consumer.queue.deleted:
                prefetched = [ref for ref in consumer.delivering.values() if ref.message.id > last_delivered]
                if prefetched:
                    consumer.closed = True  # (nothing more for it while they go back, last first: their order stays)
                    self.session.cancel(consumer, prefetched[::-1], redelivered=False)
            self.session.remove_consumer(consumer)
        if self.following and not any(s.patterns for s in self.subs.values()):
            self.stop_following()
