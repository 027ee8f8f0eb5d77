"""Rebuilding the post office from what the store recovered after a restart."""

from __future__ import annotations

import itertools
import logging
import operator

from petrel.core.address import Address
from petrel.core.divert import Divert
from petrel.core.message import RoutingType
from petrel.core.queue import MessageReference, Queue
from petrel.core.selector import compile_selector
from petrel.core.staged import StagedRecovery
from petrel.storage.store import AddressRecord, QueueRecord, Recovered

log = logging.getLogger("petrel.core.recovery")

SEQ_RESERVATION = 10_000  # sequence numbers reserved in the bindings journal at a time
_by_seq = operator.attrgetter("seq")
QUEUE_ATTRIBUTES = ("exclusive", "last_value_key", "non_destructive", "ring_size", "group_rebalance", "group_buckets")


def address_record(address: Address) -> AddressRecord:
    """What the bindings journal keeps of an address."""
    return AddressRecord(address.id, address.name, sorted(int(rt) for rt in address.routing_types),
                         address.auto_created)


def queue_record(queue: Queue) -> QueueRecord:
    """What the bindings journal keeps of a durable queue (read back by `Recovery.recover`)."""
    attributes = {name: getattr(queue, name) for name in QUEUE_ATTRIBUTES}
    if queue.created_by is not None:  # max_queues_per_user
        attributes["created_by"] = queue.created_by
    return QueueRecord(queue.id, queue.name, queue.address, int(queue.routing_type),
                       queue.selector.text if queue.selector else None, queue.auto_created, queue.client_id,
                       queue.subscription, queue.seq_reserved, attributes)


class Recovery:
    """A mixin of `PostOffice`."""

    staged: StagedRecovery | None = None  # the drainer's recovered references still to admit

    # -- recovery -----------------------------------------------------------------------

    def recover(self, recovered: Recovered) -> None:
        for rec in recovered.addresses:
            address = Address(rec.id, rec.name, {RoutingType(r) for r in rec.routing_types}, rec.auto_created)
            self.addresses[rec.name] = address
            self.wildcard_address_added(address)
        for rec in recovered.queues:
            address = self.addresses.get(rec.address)
            if address is None:
                address = Address(self.store.next_id(), rec.address, {RoutingType(rec.routing_type)})
                self.addresses[rec.address] = address
                self.store.add_address(address_record(address))
            try:
                selector = compile_selector(rec.filter) if rec.filter else None
            except ValueError:
                log.error("queue %s has an invalid stored filter %r; ignoring it", rec.name, rec.filter)
                selector = None
            queue = Queue(
                self,
                rec.id,
                rec.name,
                rec.address,
                RoutingType(rec.routing_type),
                durable=True,
                selector=selector,
                auto_created=rec.auto_created,
                client_id=rec.client_id,
                subscription=rec.subscription,
                next_seq=rec.seq_reserved + 1,
                **{k: v for k, v in rec.attributes.items() if k in QUEUE_ATTRIBUTES},
            )
            queue.seq_reserved = rec.seq_reserved
            queue.created_by = rec.attributes.get("created_by")  # max_queues_per_user
            self._register(queue, address)
        for rec in recovered.diverts:
            try:
                selector = compile_selector(rec.filter) if rec.filter else None
            except ValueError:
                selector = None
            self.diverts[rec.name] = Divert(
                rec.id, rec.name, rec.address, rec.forwarding_address, rec.exclusive, selector, rec.routing_type
            )
        per_queue: dict[int, list[MessageReference]] = {}
        dead_large = []
        unsent: set[tuple[str, str]] = set()  # (address, duplicate ID) of messages with no queue here
        queues_by_id = self.queues_by_id
        now = self.now()
        messages = recovered.messages
        staged = self.staged = None
        if recovered.deferred:  # the drainer's: most messages are built as they move (core/staged.py)
            staged, built = StagedRecovery.stage(self, recovered, now)
            messages = itertools.chain(messages, built)
        for message, refs in messages:
            if len(refs) == 1:  # the usual case, one reference to a queue that is here
                r = refs[0]
                queue = queues_by_id.get(r.queue_id)
                if queue is not None:
                    message.ref_count = 1
                    if message.large is not None:
                        self.hold_large(message.large, 1)
                    held = per_queue.get(r.queue_id)
                    if held is None:
                        held = per_queue[r.queue_id] = []
                    held.append(MessageReference(message, queue, r.seq, r.delivery_count))
                    continue
            live = [r for r in refs if r.queue_id in queues_by_id]
            message.ref_count = len(live)
            if not live:
                if refs and message.duplicate_id is not None:
                    # Unacknowledged, for queues that are not here: their records were not written
                    # when the message's were (two journals, two writers), so its send was never
                    # confirmed (that waits for both) and the client sends it again: its ID goes.
                    # (Or the queue was deleted and the message with it: a resend is taken then.)
                    unsent.add((message.address, message.duplicate_id))
                self.store.delete_message(0, message.id)
                if message.large is not None:
                    dead_large.append(message.large)
                continue
            if message.large is not None:
                self.hold_large(message.large, len(live))
            for r in live:
                queue = self.queues_by_id[r.queue_id]
                per_queue.setdefault(r.queue_id, []).append(MessageReference(message, queue, r.seq, r.delivery_count))
        for body in dead_large:
            if body.name not in self.large_holders:  # no live message names the file
                self._drop_large(body, 0)
        # prepared transactions (prepared.py): what they acknowledge stays out of the queues' available messages
        held = self.recover_prepared(recovered.prepared, per_queue) if recovered.prepared else ()
        for queue_id, refs in per_queue.items():
            if staged is not None and staged.takes(queue_id):
                staged.add_built(queue_id, refs)
                continue
            queue = self.queues_by_id[queue_id]
            refs.sort(key=_by_seq)
            queue.add_all_recovered(refs, now)
            queue.messages_added += len(refs)
            top = refs[-1].seq
            if top >= queue.next_seq:
                queue.next_seq = top + 1
        if held:
            self.hold_recovered(held)
        if staged is not None and staged.seal():
            self.staged = staged
        for queue_id, (record_id, cursor) in recovered.page_cursors.items():
            queue = self.queues_by_id.get(queue_id)
            if queue is None:
                self.store.delete_pages(queue_id, record_id)
                continue
            queue.page_cursor_record = record_id
            queue.page_cursor = cursor
            queue.page_backlog = self.store.count_pages(queue_id, cursor)
            queue.paging = queue.page_backlog > 0
        if unsent:
            recovered.duplicate_ids = self._forget_unsent(recovered.duplicate_ids, unsent)
        for record_id, address, dup_id in recovered.duplicate_ids:
            cache = self._dup_cache(address, self.settings_for(address))
            evicted = cache.add(dup_id, record_id)
            if evicted is not None:
                self.store.delete_duplicate_id(0, evicted)
        for queue in list(self.queues.values()):
            if queue.paging:
                self.depage(queue)
        for queue in self.queues.values():
            if queue.next_seq > queue.seq_reserved:
                queue.seq_reserved = queue.next_seq + SEQ_RESERVATION
                self.store.reserve_queue_seq(queue.id, queue.seq_reserved)
        self.recover_seq_cursors(recovered.seq_cursors)  # core/cursors.py

    def _forget_unsent(self, entries: list[tuple[int, str, str]],
                       unsent: set[tuple[str, str]]) -> list[tuple[int, str, str]]:
        """``entries`` (record id, address, duplicate ID) without those of ``unsent``, whose
        records are deleted (a record of a batch of IDs only once none of it is kept)."""
        kept = [e for e in entries if (e[1], e[2]) not in unsent]
        still = {record_id for record_id, _, _ in kept}
        for record_id in {record_id for record_id, address, dup_id in entries if (address, dup_id) in unsent}:
            if record_id not in still:
                self.store.delete_duplicate_id(0, record_id)
        log.warning("forgot %d duplicate IDs of sends whose queue was not written before a crash (never "
                    "confirmed: their resends are taken)", len(entries) - len(kept),
                    extra={"event": "recovery.unsent_ids"})
        return kept

