"""Redistribution: messages on a clustered queue without consumers move to nodes whose
same-named queue has consumers (`redistribution_delay` >= 0; Artemis `Redistributor`).

A queue is *idle* when it holds messages and has no consumer. After the address's
`redistribution_delay` (counted from when its last consumer left), its messages (available,
scheduled, and those read back from its page files as room frees) move in batches: each
batch is one store transaction that stores the forwarded copies and removes the originals,
so a crash moves a message entirely or not at all. A message moves only to a node whose
consumers would take it, and only while this queue still has no consumer of its own, so
messages never bounce between nodes while consumers stay put. A message no remote consumer
wants (their filters) stays, and those behind it still move (Artemis: NO_MATCH, go on);
which ones were unwanted is remembered until the remote demand changes, so an idle queue
full of them is not matched against the filters again at every pass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.core.message import RoutingType
from petrel.core.remote import RemoteBinding

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import MessageReference, Queue

__all__ = ["Redistributing", "INTERNAL_PREFIX"]

log = logging.getLogger("petrel.core.cluster")

#: Queues of the broker's own machinery (store-and-forward queues); never redistributed or advertised.
INTERNAL_PREFIX = "$.petrel."
BATCH = 256


class Redistributing:
    def init_redistribution(self: PostOffice) -> None:
        self._redistribute_timers: dict[int, object] = {}
        self._idle_since: dict[int, int] = {}
        # queue id -> (the remote demand, ids of its messages no consumer there wants)
        self._unwanted: dict[int, tuple[tuple, set[int]]] = {}
        self.messages_redistributed = 0

    def redistribution_delay(self: PostOffice, queue: Queue) -> int:
        if not self.balancing.redistributes or not self.remote_by_address:
            return -1
        if queue.non_destructive or queue.name.startswith(INTERNAL_PREFIX):
            return -1
        # read by cursors (core/cursors.py): its messages stay here, so a Spark query never reads
        # one twice (here, then where it moved). Not a `_PETREL_ORIGIN` hop instead: this node
        # stays and its offsets pass the numbers it moved, so the source could not tell a copy
        # it read here from one that left before it looked (petrel.spark.copies)
        if self.has_seq_cursors(queue):
            return -1
        return self.settings_for(queue.address).redistribution_delay

    def queue_idle(self: PostOffice, queue: Queue, since: int | None = None) -> None:
        """The queue has messages and no consumer (called by the queue, and on consumer changes)."""
        if since is not None:
            self._idle_since[queue.id] = since
        if queue.id in self._redistribute_timers or queue.deleted or queue.consumers:
            return
        if queue.message_count == 0:
            return
        delay = self.redistribution_delay(queue)
        if delay < 0 or not self._redistribution_targets(queue):
            return
        now = self.now()
        idle_since = self._idle_since.setdefault(queue.id, now)
        due = max(idle_since + delay, now)
        self._redistribute_timers[queue.id] = self.scheduler.call_at_ms(due, lambda: self._redistribute(queue))

    def _forget_idle(self: PostOffice, queue: Queue) -> None:
        timer = self._redistribute_timers.pop(queue.id, None)
        if timer is not None:
            timer.cancel()
        self._idle_since.pop(queue.id, None)
        self._unwanted.pop(queue.id, None)

    def remote_demand(self: PostOffice, binding: RemoteBinding) -> None:
        """A remote binding has consumers now: idle local queues of its address may send it messages."""
        if not self.balancing.redistributes:
            return
        address = self.addresses.get(binding.address)
        if address is None:
            return
        for queue in address.queues:
            if not queue.consumers and queue.message_count:
                self.queue_idle(queue)

    def _redistribution_targets(self: PostOffice, queue: Queue) -> list[RemoteBinding]:
        out = []
        for b in self.remote_by_address.get(queue.address, ()):
            if b.consumer_count <= 0 or not b.link.connected or b.routing_type != queue.routing_type:
                continue
            if queue.routing_type == RoutingType.MULTICAST and b.name != queue.name:
                continue  # a subscription moves only to the same subscription elsewhere
            out.append(b)
        return out

    def _redistribute(self: PostOffice, queue: Queue) -> None:
        self._redistribute_timers.pop(queue.id, None)
        if queue.deleted or queue.consumers or self.has_seq_cursors(queue):
            self._unwanted.pop(queue.id, None)
            return
        targets = self._redistribution_targets(queue)
        if not targets:
            return
        demand = _demand(targets)
        memo = self._unwanted.get(queue.id)
        known = memo[1] if memo is not None and memo[0] == demand else set()
        unwanted: set[int] = set()
        moves: list[tuple[MessageReference, RemoteBinding]] = []
        complete = True  # every reference looked at
        for ref in queue.iter_refs():
            message = ref.message
            if message.id in known:
                unwanted.add(message.id)
                continue
            takers = [b for b in targets if b.accepts(message) and b.has_demand(message)]
            if not takers:
                unwanted.add(message.id)
                continue
            moves.append((ref, takers[len(moves) % len(takers)]))
            if len(moves) >= BATCH:
                complete = False
                break
        # after a whole pass `unwanted` is exactly what is left unwanted; after a partial one,
        # what was known before still holds
        self._unwanted[queue.id] = (demand, unwanted if complete else known | unwanted)
        if not moves:
            return
        tx_id = self.store.begin()
        for ref, binding in moves:
            queue.take(ref)
            self.forward(ref.message, [binding], tx_id, sync_first=True, delivery_count=ref.delivery_count)
            self.reference_done(ref, tx_id)
        self.commit_store(tx_id)
        self.messages_redistributed += len(moves)
        log.debug("redistributed %d messages from %s", len(moves), queue.name)
        if not complete or (not unwanted and queue.message_count):
            # more to move (or read back from pages): go on after other work had its turn
            self._redistribute_timers[queue.id] = self.scheduler.call_at_ms(
                self.now(), lambda: self._redistribute(queue))


def _demand(targets: list[RemoteBinding]) -> tuple:
    """What decides which messages the remote consumers want (a change means: look again)."""
    return tuple(
        (b.key, b.consumer_count, b.selector.text if b.selector else None,
         tuple(s.text if s else None for s in b.consumer_selectors))
        for b in targets
    )
