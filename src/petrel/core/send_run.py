"""A run of sends to one address, routed in one pass (`PostOffice.send_run`).

A producer's read often holds many messages for one address (an MQTT client's PUBLISHes to one
topic). What `PostOffice.send` finds out for each of them (the address and its settings, whether
it or the disk is full, the queues it reaches, whether they page) is the same for every message
of such a run as long as no message changes it, so it is found once here: each message then only
gets its expiry, a sequence number and a reference per queue (and its journal record), and the
references join their queues together, each queue dispatching once.

The run takes this path only when nothing could make a message of it go differently from the one
before: the address has room for the whole run (so none of it is refused, dropped, blocked or
paged, whatever is delivered meanwhile), no target queue pages or stalls, every target takes
every message (no queue filter, at most one anycast queue), no message carries a duplicate ID or
a large body, and nothing diverts or forwards the address to another node. Otherwise `send_run`
changes nothing and answers None, and the caller sends the messages one by one.

Deliveries keep their order: a queue receives the run's messages in sequence order; with several
target queues the references join them message by message, as separate sends would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.core.outcome import SendOutcome, SendResult
from petrel.core.queue import MessageReference

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice

__all__ = ["send_run"]


def send_run(office: PostOffice, messages: list[Message], routing_type: RoutingType | None) -> SendResult | None:
    """Route `messages` (all for one address, in order, outside a transaction) as `office.send`
    would route each; the one result that stands for each of them, or None (nothing done)."""
    if office.diverts or office.remote_wildcards:
        return None
    name = messages[0].address
    if name in office.remote_by_address:
        return None
    total = 0
    for message in messages:
        if message.address != name or message.large is not None or DUPLICATE_ID in message.properties:
            return None
        total += message.size
    address, routing_type = office.ensure_address_for(name, routing_type)
    if routing_type == RoutingType.ANYCAST:
        office.ensure_anycast_queue(address)
    settings = office.settings_for(address.name)
    limits = office.limits
    if limits.disk_full or limits.is_full(address.name, settings, (total, len(messages))):
        return None
    if len(address.anycast) > 1 and routing_type != RoutingType.MULTICAST:
        return None  # one queue per message, in turn
    first = messages[0]
    if _filters(address.anycast) or _filters(address.multicast):
        return None  # (a queue's filter takes some messages and not others)
    targets = address.targets(first, routing_type)
    if office.wildcard_addresses:
        targets = office.wildcard_targets(first, routing_type, targets)
        for pattern in office._wildcard_cache.get(name, ()):  # (filled by wildcard_targets)
            if _filters(pattern.multicast):
                return None
    for queue in targets:
        if queue.paging or queue.stalled:
            return None
    n = len(messages)
    if settings.expiry_delay >= 0:
        now = office.now()
        for message in messages:
            if message.expiration == 0:
                message.expiration = (message.timestamp or now) + settings.expiry_delay
    if not targets:
        for message in messages:
            office.discard(message)
        office.unrouted += n
        return SendResult(SendOutcome.UNROUTED)
    store = office.store
    take_seq = office._take_seq
    durable = [q for q in targets if q.durable]
    if len(targets) == 1:
        queue = targets[0]
        qid = queue.id
        first_seq = queue.next_seq
        if durable and first_seq + n - 1 > queue.seq_reserved:  # a reservation on the way: one by one
            seqs = [take_seq(queue) for _ in range(n)]
        else:  # (`_take_seq` of each, at once)
            seqs = range(first_seq, first_seq + n)
            queue.next_seq = first_seq + n
        refs = [MessageReference(message, queue, seq, 0) for message, seq in zip(messages, seqs)]
        if durable:
            for message, seq in zip(messages, seqs):
                if message.durable:
                    message.ref_count = 1
                    store.add_message(0, message, [(qid, seq)])
        admitted = [(queue, refs)]
    else:
        admitted = []
        for message in messages:
            refs = [MessageReference(message, queue, take_seq(queue), 0) for queue in targets]
            if durable and message.durable:
                message.ref_count = len(durable)
                store.add_message(0, message, [(r.queue.id, r.seq) for r in refs if r.queue.durable])
            admitted.append((None, refs))
    now = office.now()
    for queue, refs in admitted:
        if queue is not None:  # one queue: the run joins it at once
            queue.messages_added += len(refs)
            queue.add_all(refs, now)
            if queue.deleted:
                queue.purge()
            continue
        for ref in refs:  # several: message by message, as separate sends
            q = ref.queue
            q.messages_added += 1
            q.add(ref, now=now)
            if q.deleted:
                q.purge()
    office.messages_routed += n
    result = SendResult(SendOutcome.ROUTED, len(targets))
    if limits.flow_control_bytes >= 0 and office.throttles(address):
        result.throttled = True
    return result


def _filters(queues: list) -> bool:
    """Whether one of `queues` has a filter."""
    for queue in queues:
        if queue.selector is not None:
            return True
    return False
