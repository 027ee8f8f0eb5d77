"""Redistribution: messages on a clustered queue without consumers move to nodes whose
same-named queue has consumers (`redistribution_delay` >= 0; Artemis `Redistributor`).

A queue is *idle* when it holds messages and has no consumer. After the address's
`redistribution_delay` (counted from when its last consumer left), its messages (available,
scheduled, and those read back from its page files as room frees) move in batches: each
batch is one store transaction that stores the forwarded copies and removes the originals,
so a crash moves a message entirely or not at all. A message moves only to a node whose
consumers would take it, and only while this queue still has no consumer of its own, so
messages never bounce between nodes while consumers stay put.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.core.message import RoutingType
from petrel.core.remote import RemoteBinding

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue

__all__ = ["Redistributing", "INTERNAL_PREFIX"]

log = logging.getLogger("petrel.core.cluster")

#: Queues of the broker's own machinery (store-and-forward queues); never redistributed or advertised.
INTERNAL_PREFIX = "$.petrel."
BATCH = 256


class Redistributing:
    def init_redistribution(self: PostOffice) -> None:
        self._redistribute_timers: dict[int, object] = {}
        self._idle_since: dict[int, int] = {}
        self.messages_redistributed = 0

    def redistribution_delay(self: PostOffice, queue: Queue) -> int:
        if not self.balancing.redistributes or not self.remote_by_address:
            return -1
        if queue.non_destructive or queue.name.startswith(INTERNAL_PREFIX):
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
        if queue.deleted or queue.consumers:
            return
        targets = self._redistribution_targets(queue)
        if not targets:
            return
        refs = []
        for ref in queue.iter_refs():
            refs.append(ref)
            if len(refs) >= BATCH:
                break
        if not refs:
            return
        tx_id = self.store.begin()
        moved = 0
        turn = 0
        for ref in refs:
            message = ref.message
            takers = [b for b in targets if b.accepts(message) and b.has_demand(message)]
            if not takers:
                continue
            binding = takers[turn % len(takers)]
            turn += 1
            queue.take(ref)
            self.forward(message, [binding], tx_id)
            self.reference_done(ref, tx_id)
            moved += 1
        self.commit_store(tx_id)
        if moved:
            self.messages_redistributed += moved
            log.debug("redistributed %d messages from %s", moved, queue.name)
        if moved == len(refs) and queue.message_count:
            # more to move (or read back from pages): go on after other work had its turn
            self._redistribute_timers[queue.id] = self.scheduler.call_at_ms(
                self.now(), lambda: self._redistribute(queue))
