"""A migration's batch arriving here (`PostOffice.receive_migrated`): every message of it for the
one queue the batch names, in the order that queue would have delivered them.

A drain sends a queue's messages in batches of up to 1,024 for one queue, so what
`receive_forwarded(strict=True)` finds out for each message (the bindings its keys name, the
address's settings and whether it is full, whether the queue pages) is the same for every
message of the batch: it is found once per batch here (per address, for the rare batch whose
messages name several), and each message is then only checked against its origin's duplicate
IDs, given its sequence number and its reference, and journalled. Limits and paging cannot
change inside a batch (the references routed in a store transaction count only once it commits),
except where a message starts the queue paging, which is followed. A message that carries a
producer's duplicate ID or a large body, and a batch for several bindings or for none here,
take the general path (`_route_forwarded`), in order with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.errors import RoutingError
from petrel.core.limits import AddressFull
from petrel.core.message import DUPLICATE_ID, Message
from petrel.core.queue import MessageReference
from petrel.core.remote import bridge_dup_sender
from petrel.core.selector import SelectorError

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue
    from petrel.core.settings import AddressSettings

__all__ = ["receive_batch"]

_REFUSE = ("FAIL", "BLOCK")


def _full(office: PostOffice, address: str, settings: AddressSettings) -> str | None:
    """What `_route_forwarded` does with a message for `address` now: None (route it), or the
    policy that applies because the address (or the disk) is full."""
    limits = office.limits
    if limits.disk_full:
        return "BLOCK"
    if limits.is_full(address, settings):
        return settings.address_full_policy
    return None


def receive_batch(office: PostOffice, cache, batch: list[tuple[Message, str, int]], keys: list[str], tx_id: int,
                  pending: dict[str, tuple[int, int]] | None) -> tuple[int, Exception | None, list[str]]:
    """Route `batch` in `tx_id` (see `receive_migrated`): how many were taken before the first
    refusal, that refusal (or None), and the origin IDs of those routed (or dropped), in order."""
    origin = bridge_dup_sender(batch[0][1])
    queue: Queue | None = office.queues.get(keys[0]) if len(keys) == 1 and tx_id else None
    store = office.store
    fresh: list[str] = []
    seen: set[str] = set()
    known = cache.ids
    refs: list[MessageReference] = []  # routed since the last flush, in order
    added: list[tuple[Message, list[tuple[int, int]]]] = []  # ... the messages to journal, with their refs
    counts: list[tuple[int, int]] = []  # ... and the delivery counts to keep
    by_address: dict[str, tuple[AddressSettings, bool, str | None]] = {}
    pages = False
    durable_queue = False
    queue_id = 0
    if queue is not None:
        durable_queue, queue_id = queue.durable, queue.id
        can_page = store.supports_paging
        queue_address = office.addresses.get(queue.address)
        pages = can_page and office._pages(queue, queue_address)

    def flush() -> None:
        if added:
            store.add_messages(tx_id, added[:])
        for message_id, count in counts:
            store.update_delivery_count(message_id, queue_id, count, tx_id)
        if refs:
            office._held.setdefault(tx_id, []).extend(refs)
        refs.clear()
        added.clear()
        counts.clear()

    refusal: Exception | None = None
    taken = 0
    routed = 0
    for message, dup_id, delivery_count in batch:
        if dup_id in known or dup_id in seen:
            office.forwarded_duplicates += 1
            office.discard(message)
            taken += 1
            continue
        address = message.address
        entry = by_address.get(address)
        if entry is None:
            settings = office.settings_for(address)
            entry = by_address[address] = (settings, settings.address_full_policy in _REFUSE,
                                           _full(office, address, settings) if queue is not None else None)
        settings, refuses, full = entry
        if refuses and pending is not None:  # what earlier batches of the read took counts too
            held = pending.get(address, (0, 0))
            if held[1] and office.limits.is_full(address, settings, held):
                office.discard(message)
                refusal = AddressFull(f"address {address!r} is full ({settings.address_full_policy}): the "
                                      "forwarded message stays on the sending node for now")
                break
        if queue is None or message.large is not None or DUPLICATE_ID in message.properties:
            flush()
            try:
                office._route_forwarded(message, keys, tx_id, delivery_count, True, [], origin)
            except (AddressFull, RoutingError, SelectorError, ValueError) as exc:
                office.discard(message)
                refusal = exc
                break
            if queue is not None:
                pages = can_page and office._pages(queue, queue_address)
        elif full is not None and full != "PAGE":
            if full in _REFUSE:  # the origin keeps it and tries again later
                office.discard(message)
                refusal = AddressFull(f"address {address!r} is full ({full}): the forwarded message stays on "
                                      "the sending node for now")
                break
            if full == "DROP":
                office.drop(address, message)
        else:
            seq = office._take_seq(queue)
            routed += 1
            if pages:
                office._page(queue, seq, message)
                office.paged_routes += 1
            else:
                refs.append(MessageReference(message, queue, seq, delivery_count))
                if durable_queue and message.durable:
                    message.ref_count = 1
                    added.append((message, [(queue_id, seq)]))
                    if delivery_count:
                        counts.append((message.id, delivery_count))
        if refuses and pending is not None:
            pending[address] = (held[0] + message.size, held[1] + 1)
        seen.add(dup_id)
        fresh.append(dup_id)
        taken += 1
    if queue is not None:
        flush()
    office.messages_routed += routed
    return taken, refusal, fresh
