"""Queues: ordered references to messages, handed to consumers within their credit.

A queue keeps one FIFO per priority (9 first). Consumers with a selector scan for the first
match; a reference taken out of the middle is marked and skipped when it reaches the head,
so dispatch stays O(1) for plain consumers. Cancelled references (nack, rollback, a consumer
that closes) go back to the head in their original order, with their delivery count raised;
too many attempts send them to the dead-letter address.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from typing import TYPE_CHECKING

from petrel.core.consumer import AVAILABLE, DELIVERING, DONE, SCHEDULED, Consumer, MessageReference
from petrel.core.message import GROUP_ID, Message, RoutingType

GROUP_SEQ = "JMSXGroupSeq"

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.selector import Selector

log = logging.getLogger("petrel.core.queue")



class Queue:
    created_by: str | None = None  # the user whose connection made the broker create it (max_queues_per_user)

    def __init__(
        self,
        office: PostOffice,
        id: int,
        name: str,
        address: str,
        routing_type: RoutingType,
        *,
        durable: bool = True,
        selector: Selector | None = None,
        auto_created: bool = False,
        temporary: bool = False,
        client_id: str | None = None,
        subscription: str | None = None,
        next_seq: int = 1,
        exclusive: bool = False,
        last_value_key: str | None = None,
        non_destructive: bool = False,
        ring_size: int = -1,
        group_rebalance: bool = False,
        group_buckets: int = -1,
    ) -> None:
        self.office = office
        self.id = id
        self.name = name
        self.address = address
        self.routing_type = routing_type
        self.durable = durable
        self.selector = selector
        self.auto_created = auto_created
        self.temporary = temporary
        self.client_id = client_id
        self.subscription = subscription
        self.next_seq = next_seq
        self.seq_reserved = next_seq - 1
        self._buckets: list[deque[MessageReference]] = [deque() for _ in range(10)]
        self._available = 0
        self._scheduled: list[tuple[int, int, MessageReference]] = []
        self._scheduled_timer = None
        self._scheduled_timer_at = 0
        self.consumers: list[Consumer] = []
        self._rr = 0
        self._delivering = False
        self._again = False
        self.delivering_count = 0
        self.delivering_bytes = 0  # memory of the references out with consumers (their credit bounds it)
        self.messages_added = 0
        self.messages_acked = 0
        self.messages_expired = 0
        self.messages_killed = 0
        self.deleted = False
        self.paused = False  # management: no dispatch while paused
        self.exclusive = exclusive
        self.last_value_key = last_value_key
        self.non_destructive = non_destructive
        self.ring_size = ring_size
        self.group_rebalance = group_rebalance
        self.group_buckets = group_buckets
        self.groups: dict[object, Consumer] = {}  # group (or bucket) -> the consumer it is pinned to
        self._grouped = False  # a grouped message was seen: dispatch must check owners
        self._last_values: dict[object, MessageReference] = {}
        self._log: list[MessageReference] = []  # non-destructive: every ref in order
        # memory and paging (see core/limits.py and storage/paging.py)
        self.memory_bytes = 0
        self.paging = False  # new references go to page files until the backlog is read back
        self.page_backlog = 0
        self.page_cursor = None  # PagePosition of the next paged record to read
        self.page_cursor_record = 0
        self.depage_waiting = False  # depaging waits for the journal writer to catch up
        self.depage_retry = None  # timer: paged records still on their way to disk
        # producer flow control (core/flow.py): a check armed while this queue throttles, and
        # whether it stayed behind (then it no longer throttles, and pages under PAGE)
        self.stall_check = None
        self.stalled = False
        self.seq_index = None  # core/cursors.py: its references by sequence number, once ranges are read
        self.recovering = 0  # recovered references not admitted yet (the drainer's: core/staged.py)

    # -- counters ----------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        return self._available + len(self._scheduled) + self.delivering_count + self.page_backlog + self.recovering

    @property
    def scheduled_count(self) -> int:
        return len(self._scheduled)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    # -- adding --------------------------------------------------------------------------

    def add(self, ref: MessageReference, *, head: bool = False, now: int = 0) -> None:
        """Make a reference available (or scheduled), then dispatch."""
        self._admit(ref, now or self.office.now(), head=head)
        self.deliver()

    def add_recovered(self, ref: MessageReference, now: int) -> None:
        """Recovery adds in sequence order without dispatching (no consumers yet)."""
        self._admit(ref, now, head=False)

    def add_all_recovered(self, refs: list[MessageReference], now: int) -> None:
        """`add_recovered` for each of `refs` (in sequence order): a plain queue (no last values,
        ring, sequence index or log) admits them in one pass, its memory counted once."""
        if self.seq_index is not None or self.last_value_key is not None or self.ring_size > 0 \
                or self.non_destructive:
            for ref in refs:
                self._admit(ref, now, head=False)
            return
        buckets = self._buckets
        total = available = 0
        grouped = self._grouped
        for ref in refs:
            message = ref.message
            total += message.size
            if not grouped and message.properties.get(GROUP_ID) is not None:
                grouped = True
            scheduled = message.scheduled
            if scheduled and scheduled > now:
                self._schedule(ref, scheduled)
                continue
            ref.state = AVAILABLE  # as _make_available does for a reference not yet in place
            ref.consumer = None
            ref.in_deque = True
            buckets[min(max(message.priority, 0), 9)].append(ref)
            available += 1
        self._available += available
        self._grouped = grouped
        self.memory_bytes += total
        self.office.limits.added_many(self.address, total, len(refs))

    def add_all(self, refs: list[MessageReference], now: int) -> None:
        """`add` of each of `refs` (new references, in sequence order), dispatching once after the
        last: the references a store transaction routed to this queue, as it commits."""
        self.add_all_recovered(refs, now)
        self.deliver()

    def _admit(self, ref: MessageReference, now: int, *, head: bool) -> None:
        if self.seq_index is not None:
            self.seq_index.add(ref)
        message = ref.message
        size = message.size
        self.memory_bytes += size
        self.office.limits.added(self.address, size)
        if self.last_value_key is not None:
            value = message.properties.get(self.last_value_key)
            if value is not None:
                older = self._last_values.get(value)
                if older is not None and older.state in (AVAILABLE, SCHEDULED):
                    self.take(older)
                    self.messages_acked += 1
                    self.office.reference_done(older, 0)
                self._last_values[value] = ref
        group = message.properties.get(GROUP_ID)
        if group is not None:
            self._grouped = True
        if message.scheduled and message.scheduled > now:
            self._schedule(ref, message.scheduled)
        else:
            self._make_available(ref, head=head)
        if self.ring_size > 0:
            while self._available + len(self._scheduled) > self.ring_size:
                oldest = self._oldest_available()
                if oldest is None:
                    break
                self.take(oldest)
                self.messages_acked += 1
                self.office.reference_done(oldest, 0)

    def _oldest_available(self) -> MessageReference | None:
        best = None
        for bucket in self._buckets:
            for ref in bucket:
                if ref.state == AVAILABLE:
                    if best is None or ref.seq < best.seq:
                        best = ref
                    break
        if best is None and self._scheduled:
            best = min(self._scheduled)[2]
        return best

    def _make_available(self, ref: MessageReference, *, head: bool) -> None:
        ref.state = AVAILABLE
        ref.consumer = None
        self._available += 1
        if ref.in_deque:  # still in place where a selector consumer took it from
            return
        ref.in_deque = True
        if self.non_destructive:
            self._log.append(ref)
        bucket = self._buckets[min(max(ref.message.priority, 0), 9)]
        if head:
            bucket.appendleft(ref)
        else:
            bucket.append(ref)

    def _schedule(self, ref: MessageReference, when: int) -> None:
        ref.state = SCHEDULED
        heapq.heappush(self._scheduled, (when, ref.seq, ref))
        self._arm_scheduled_timer()

    def _arm_scheduled_timer(self) -> None:
        if not self._scheduled:
            return
        when = self._scheduled[0][0]
        if self._scheduled_timer is not None and self._scheduled_timer_at <= when:
            return
        if self._scheduled_timer is not None:
            self._scheduled_timer.cancel()
        self._scheduled_timer_at = when
        self._scheduled_timer = self.office.scheduler.call_at_ms(when, self._release_scheduled)

    def _release_scheduled(self) -> None:
        self._scheduled_timer = None
        now = self.office.now()
        released = []
        while self._scheduled and self._scheduled[0][0] <= now:
            released.append(heapq.heappop(self._scheduled)[2])
        # Keep sequence order among messages released together.
        released.sort(key=lambda r: r.seq)
        for ref in released:
            if ref.state == SCHEDULED:
                self._make_available(ref, head=False)
        self._arm_scheduled_timer()
        if released:
            self.deliver()

    def unschedule_all(self) -> int:
        """Every scheduled message available now, keeping its time on the message (a migration
        moves it to a queue that schedules it again); the number released."""
        released = sorted((entry[2] for entry in self._scheduled), key=lambda r: r.seq)
        self._scheduled.clear()
        for ref in released:
            if ref.state == SCHEDULED:
                self._make_available(ref, head=False)
        return len(released)

    # -- dispatch ------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if self.group_rebalance:
            self.groups.clear()
        if self.paging:
            self.office.depage(self)
        self.office.consumers_changed(self)
        self.deliver()

    def remove_consumer(self, consumer: Consumer) -> None:
        """The consumer leaves: everything it held unacknowledged is redelivered."""
        consumer.closed = True
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if self.groups:
            for key in [k for k, c in self.groups.items() if c is consumer]:
                del self.groups[key]
        refs = list(consumer.delivering.values())
        consumer.delivering.clear()
        consumer.bytes_in_flight = 0
        if not self.non_destructive:
            for ref in reversed(refs):
                self._cancel(ref, consumer, redelivered=True)
        self.office.consumers_changed(self)
        self.deliver()
        self.office.queue_idle_check(self)

    def deliver(self) -> None:
        """Hand available messages to consumers with credit, round-robin."""
        if self._delivering:
            self._again = True
            return
        if not self.consumers or self._available == 0 or self.paused:
            if not self.consumers and self.office.remote_by_address:
                self.office.queue_idle(self)
            return
        self._delivering = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._deliver_round()
                if self.paging:
                    # Refill from the page files as consumers take messages (their credit bounds
                    # what is out with them), not only as acknowledgements come back.
                    self.office.depage(self)
        finally:
            self._delivering = False

    def _deliver_round(self) -> None:
        now = self.office.now()
        consumers = self.consumers[:1] if self.exclusive else self.consumers
        if self.non_destructive:
            self._deliver_non_destructive(consumers, now)
            return
        if len(consumers) == 1:  # one consumer (a migration, a bridge): no round-robin per message
            consumer = consumers[0]
            next_for, hand_over = self._next_for, self._hand_over
            while self._available and len(consumers) == 1 and consumers[0] is consumer:
                if not consumer.has_credit():
                    return
                ref = next_for(consumer, now)
                if ref is None:
                    return
                self._rr = 1
                hand_over(consumer, ref)
            # the consumers changed under a delivery: the general way
        while self._available and consumers:
            progressed = False
            n = len(consumers)
            for i in range(n):
                if not consumers:
                    break
                idx = (self._rr + i) % len(consumers)
                consumer = consumers[idx]
                if not consumer.has_credit():
                    continue
                ref = self._next_for(consumer, now)
                if ref is None:
                    continue
                self._rr = idx + 1
                self._hand_over(consumer, ref)
                progressed = True
                break
            if not progressed:
                return

    def _deliver_non_destructive(self, consumers: list[Consumer], now: int) -> None:
        """Every consumer reads the whole queue in order; acknowledging removes nothing."""
        log_ = self._log
        if any(r.state == DONE for r in log_[:64]):
            self._log = log_ = [r for r in log_ if r.state != DONE]
            for c in consumers:
                c.nd_position = 0
                c.nd_seen = max(c.nd_seen, 0)
        for consumer in consumers:
            i = consumer.nd_position
            while consumer.has_credit() and i < len(log_):
                ref = log_[i]
                i += 1
                if ref.state != AVAILABLE or ref.seq <= consumer.nd_seen:
                    continue
                if ref.message.expiration and ref.message.expired(now):
                    self.take(ref)
                    self.office.expire(ref)
                    continue
                if consumer.selector is not None and not consumer.selector.matches(ref.message):
                    consumer.nd_seen = ref.seq
                    continue
                consumer.nd_seen = ref.seq
                if not consumer.auto_ack:
                    consumer.delivering[ref.seq] = ref
                    consumer.bytes_in_flight += ref.message.body_size
                consumer.sink(consumer, ref)
            consumer.nd_position = i

    def _group_key(self, message: Message) -> object | None:
        group = message.properties.get(GROUP_ID)
        if group is None:
            return None
        if self.group_buckets > 0:
            return hash(str(group)) % self.group_buckets
        return group

    def _eligible(self, consumer: Consumer, ref: MessageReference) -> bool:
        key = self._group_key(ref.message)
        if key is not None:
            owner = self.groups.get(key)
            if owner is not None and owner is not consumer:
                return False
        return consumer.selector is None or consumer.selector.matches(ref.message)

    def _next_for(self, consumer: Consumer, now: int) -> MessageReference | None:
        selector = consumer.selector
        grouped = self._grouped
        for bucket in reversed(self._buckets):
            if not bucket:
                continue
            if selector is None and not grouped:
                while bucket:
                    ref = bucket[0]
                    if ref.state != AVAILABLE:
                        bucket.popleft()
                        ref.in_deque = False
                        continue
                    if ref.message.expiration and ref.message.expired(now):
                        bucket.popleft()
                        ref.in_deque = False
                        self._available -= 1
                        self.office.expire(ref)
                        continue
                    bucket.popleft()
                    ref.in_deque = False
                    return ref
            else:
                expired = []
                found = None
                for ref in bucket:
                    if ref.state != AVAILABLE:
                        continue
                    if ref.message.expiration and ref.message.expired(now):
                        expired.append(ref)
                        continue
                    if self._eligible(consumer, ref):
                        found = ref
                        break
                for ref in expired:
                    ref.state = DONE
                    self._available -= 1
                    self.office.expire(ref)
                while bucket and bucket[0].state != AVAILABLE:
                    bucket.popleft().in_deque = False
                if found is not None:
                    if bucket and bucket[0] is found:
                        bucket.popleft()
                        found.in_deque = False
                    return found
        return None

    def _hand_over(self, consumer: Consumer, ref: MessageReference) -> None:
        if self._grouped:
            key = self._group_key(ref.message)
            if key is not None:
                if str(ref.message.properties.get(GROUP_SEQ, "")) == "-1":
                    self.groups.pop(key, None)  # the last message of the group closes it
                else:
                    self.groups[key] = consumer
        self._available -= 1
        ref.state = DELIVERING
        ref.consumer = consumer
        self.delivering_count += 1
        self.delivering_bytes += ref.message.size
        if consumer.auto_ack:
            consumer.sink(consumer, ref)
            self.acknowledge(ref)
            return
        consumer.delivering[ref.seq] = ref
        consumer.bytes_in_flight += ref.message.body_size
        consumer.sink(consumer, ref)

    # -- acknowledgement -----------------------------------------------------------------

    def acknowledge(self, ref: MessageReference, tx_id: int = 0, consumer: Consumer | None = None, *,
                    deliver: bool = True, consumed: bool = False) -> None:
        """The consumer is done with the message: forget it here and in the store.

        ``deliver=False``: the caller acknowledges several at once and calls `deliver` after;
        ``consumed``: a consumer's own ack, not one at dispatch (`reference_done`)."""
        if self.non_destructive:  # the message stays; only the consumer's credit comes back
            if consumer is not None and consumer.delivering.pop(ref.seq, None) is not None:
                consumer.bytes_in_flight -= ref.message.body_size
                self.deliver()
            return
        if ref.state == DONE:
            return
        consumer = ref.consumer
        if consumer is not None and consumer.delivering.pop(ref.seq, None) is not None:
            consumer.bytes_in_flight -= ref.message.body_size
        if ref.state == DELIVERING:
            self.delivering_count -= 1
            self.delivering_bytes -= ref.message.size
        elif ref.state == AVAILABLE:
            self._available -= 1
        ref.state = DONE
        ref.consumer = None
        self.messages_acked += 1
        self.office.reference_done(ref, tx_id, consumed)
        if deliver and consumer is not None and not consumer.closed:
            self.deliver()

    def cancel(self, ref: MessageReference, *, redelivered: bool = True, consumer: Consumer | None = None,
               dead_letter: bool = False) -> None:
        """Negative acknowledgement or rollback: the message goes back (or to the DLA: at once
        when `dead_letter`, the consumer's verdict, as a JMS client's poison ack)."""
        if self.non_destructive:
            self.acknowledge(ref, consumer=consumer)
            return
        consumer = ref.consumer
        if consumer is not None and consumer.delivering.pop(ref.seq, None) is not None:
            consumer.bytes_in_flight -= ref.message.body_size
        self._cancel(ref, consumer, redelivered=redelivered or dead_letter, dead_letter=dead_letter)
        self.deliver()

    def _cancel(self, ref: MessageReference, consumer: Consumer | None, *, redelivered: bool,
                dead_letter: bool = False) -> None:
        if ref.state != DELIVERING:
            return
        self.delivering_count -= 1
        self.delivering_bytes -= ref.message.size
        ref.consumer = None
        if redelivered:
            ref.delivery_count += 1
        settings = self.office.settings_for(self.address)
        attempts = settings.max_delivery_attempts
        if dead_letter or (redelivered and attempts >= 0 and ref.delivery_count >= attempts):
            ref.state = DONE
            self.office.dead_letter(ref)
            return
        if redelivered:
            self.office.delivery_count_changed(ref)
        delay = _redelivery_delay(settings, ref.delivery_count) if redelivered else 0
        if delay > 0:
            self._schedule(ref, self.office.now() + delay)
        else:
            self._make_available(ref, head=True)

    # -- removal -------------------------------------------------------------------------

    def iter_refs(self):
        """Every reference not yet acknowledged, in dispatch order (for browsing and purge)."""
        for bucket in reversed(self._buckets):
            for ref in bucket:
                if ref.state == AVAILABLE:
                    yield ref
        for _, _, ref in sorted(self._scheduled):
            if ref.state == SCHEDULED:
                yield ref

    def take(self, ref: MessageReference) -> None:
        """Take an available or scheduled reference out of the queue (expiry scan, purge)."""
        if ref.state == AVAILABLE:
            self._available -= 1
        elif ref.state == SCHEDULED:
            self._scheduled = [e for e in self._scheduled if e[2] is not ref]
            heapq.heapify(self._scheduled)
        ref.state = DONE

    def expire_scan(self, now: int) -> int:
        expired = [r for r in self.iter_refs() if r.message.expiration and r.message.expired(now)]
        for ref in expired:
            self.take(ref)
            self.office.expire(ref)
        return len(expired)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.deliver()

    def purge(self) -> int:
        refs = list(self.iter_refs())
        for ref in refs:
            self.take(ref)
            self.messages_acked += 1
            self.office.reference_done(ref, 0)
        return len(refs)

    def __repr__(self) -> str:
        return f"<Queue {self.name} address={self.address} {self.routing_type.name} count={self.message_count}>"


def _redelivery_delay(settings, delivery_count: int) -> int:
    delay = settings.redelivery_delay
    if delay <= 0:
        return 0
    multiplier = settings.redelivery_multiplier
    delay = delay * (multiplier ** max(delivery_count - 1, 0))
    cap = settings.max_redelivery_delay
    if cap is None:
        cap = settings.redelivery_delay * 10
    return int(min(delay, cap))
