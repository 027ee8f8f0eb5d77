"""Operator actions on queues: browse, count, remove, move, retry from the dead-letter queue.

They act on messages waiting in a queue (not on those out with a consumer), each message
moved in its own store transaction so a crash never loses or doubles one.
"""

from __future__ import annotations

from collections.abc import Callable

from petrel.core.message import ORIGINAL_ADDRESS, ORIGINAL_QUEUE, Message, RoutingType
from petrel.core.postoffice import PostOffice, RoutingError
from petrel.core.queue import MessageReference, Queue
from petrel.core.remote import KEY_SEPARATOR, MIGRATED_DELIVERY_COUNT, ROUTE_TO, SYNC_FIRST
from petrel.core.selector import compile_selector


def _select(queue: Queue, filter: str | None) -> list[MessageReference]:
    selector = compile_selector(filter) if filter else None
    return [r for r in queue.iter_refs() if selector is None or selector.matches(r.message)]


def browse(queue: Queue, *, filter: str | None = None, limit: int = 100, offset: int = 0) -> list[MessageReference]:
    """Waiting messages in dispatch order, without consuming them."""
    refs = _select(queue, filter)
    return refs[offset : offset + limit]


def count(queue: Queue, filter: str | None = None) -> int:
    if not filter:
        return queue.message_count
    return len(_select(queue, filter))


def remove(office: PostOffice, queue: Queue, filter: str | None = None) -> int:
    """Delete waiting messages matching the filter (all of them without one)."""
    refs = _select(queue, filter)
    for ref in refs:
        queue.take(ref)
        queue.messages_acked += 1
        office.reference_done(ref, 0)
    office.queue_idle_check(queue)
    return len(refs)


def move(office: PostOffice, queue: Queue, target: str, filter: str | None = None) -> int:
    """Move waiting messages to another queue (by name), keeping their order."""
    destination = office.queues.get(target)
    if destination is None:
        raise RoutingError(f"queue {target!r} does not exist")
    if destination is queue:
        raise RoutingError("cannot move messages to the queue they are in")
    moved = 0
    for ref in _select(queue, filter):
        _transfer(office, queue, ref, destination.address, destination, {ORIGINAL_QUEUE: queue.name})
        moved += 1
    office.queue_idle_check(queue)
    return moved


def retry(office: PostOffice, queue: Queue, filter: str | None = None,
          allowed: Callable[[str], bool] = lambda address: True) -> int:
    """Send dead-lettered (or expired) messages back to the address they came from; those whose
    address is not `allowed` (the caller may not manage it) stay."""
    moved = 0
    for ref in _select(queue, filter):
        original = ref.message.properties.get(ORIGINAL_ADDRESS)
        if not original or not allowed(str(original)):
            continue
        original_queue = ref.message.properties.get(ORIGINAL_QUEUE)
        target_queue = office.queues.get(str(original_queue)) if original_queue else None
        if target_queue is not None and target_queue.address != original:
            target_queue = None
        _transfer(office, queue, ref, str(original), target_queue, {})
        moved += 1
    office.queue_idle_check(queue)
    return moved


def absorb(office: PostOffice, queue: Queue, arrived=lambda message: False) -> int:
    """Empty a store-and-forward queue toward a node whose queues are here now (it scaled down
    into this one): each waiting copy goes to the queues it was on its way to (those gone stay);
    a copy that had ``arrived`` there already (and moved here with that node's messages) is done."""
    moved = 0
    for ref in list(queue.iter_refs()):
        if arrived(ref.message):
            queue.take(ref)
            queue.messages_acked += 1
            office.reference_done(ref, 0)
            continue
        keys = str(ref.message.properties.get(ROUTE_TO, "")).split(KEY_SEPARATOR)
        targets = [office.queues[k] for k in keys if k in office.queues and office.queues[k] is not queue]
        if targets:
            _transfer(office, queue, ref, targets[0].address, targets, {})
            moved += 1
    return moved


def _transfer(
    office: PostOffice, source: Queue, ref: MessageReference, address: str, only: Queue | list[Queue] | None,
    extra: dict
) -> None:
    old = ref.message
    drop = (ORIGINAL_ADDRESS, ORIGINAL_QUEUE, ROUTE_TO, SYNC_FIRST)
    props = {k: v for k, v in old.properties.items() if k not in drop}
    props.pop("_AMQ_DUPL_ID", None)
    # a store-and-forward copy of a redistributed message: deliveries it had before it left
    delivery_count = int(props.pop(MIGRATED_DELIVERY_COUNT, 0) or 0)
    props.update(extra)
    copy = Message(
        id=office.store.next_id(),
        address=address,
        body=old.body,
        properties=props,
        durable=old.durable,
        priority=old.priority,
        expiration=old.expiration,
        timestamp=old.timestamp,
        user_id=old.user_id,
    )
    office.link_large(copy, old)  # a large body gets its own file name for the copy's id
    tx_id = office.store.begin()
    source.take(ref)
    source.messages_acked += 1
    if only is not None:
        office.route_to(copy, only if isinstance(only, list) else [only], tx_id, delivery_count=delivery_count)
    else:
        existing = office.addresses.get(address)
        target, routing_type = office.ensure_address_for(
            address, RoutingType.ANYCAST if existing is None or not existing.queues else None
        )
        if routing_type == RoutingType.ANYCAST:
            office.ensure_anycast_queue(target)
        office.route_to(copy, None, tx_id, delivery_count=delivery_count)
    office.reference_done(ref, tx_id)
    office.commit_store(tx_id)
