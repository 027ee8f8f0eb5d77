"""Recovery in stages, for the drainer: a queue's messages are built while earlier ones move.

A drainer (`petrel drain`) recovers a directory only to move its messages to another broker;
building every message before the first one moves keeps that broker idle for seconds (a million
messages: about 3 s of a 5.5 s recovery). So the drainer's store leaves most messages unbuilt
(`FileStore.recover(defer=True)`: `Recovered.deferred`, each with its queue, seq, priority and
scheduled time), and `StagedRecovery` keeps them per queue in the order that queue delivers:
priority 9 first; within a priority the available ones by seq, then the scheduled ones by seq
(as `Queue.unschedule_all` releases them). `admit(n)` builds the next n and adds them at the tail
of their queue, so its head is always what the queue would deliver next; the drainer calls it
between the migration's sends, keeping `AHEAD` references available in the queue being moved (the
next ones are built only as the first ones go: a bounded lookahead, not the whole directory at
once). Until then a queue counts them (`Queue.recovering`).

Only plain queues are staged (no last value, ring, non-destructive log, sequence cursors or
page files: what those do on admission depends on having every reference); the deferred
messages of other queues are built at once and recovered as before.
"""

from __future__ import annotations

import operator
from collections import deque

from petrel.core.consumer import MessageReference
from petrel.core.message import decode_message
from petrel.storage.store import Recovered, RecoveredRef

__all__ = ["StagedRecovery"]

#: references a queue is given ahead of its consumer: more once fewer are available (the
#: migration takes them as the target confirms; it holds at most its window in flight)
AHEAD = 20_000
_SEQ = operator.itemgetter(3)  # of an entry: (record id | None, encoded | reference, queue id, seq, ...)


class StagedRecovery:
    """The not yet admitted references of the staged queues, each queue's in delivery order."""

    def __init__(self, now: int) -> None:
        self.now = now  # when the recovery ran: what is scheduled after it stays scheduled
        # queue id -> (queue, [available entries per priority], [scheduled ones per priority])
        self._sorting: dict[int, tuple] = {}
        # queue id -> (queue, entries in reverse delivery order: the next one is last)
        self._queues: dict[int, tuple] = {}
        self._moving: set[int] = set()  # queues being moved: scheduled ones are released as admitted
        self._by_name: deque[int] = deque()  # the staged queues in the migration's order
        self.pending = 0  # references not admitted yet

    @classmethod
    def stage(cls, office, recovered: Recovered, now: int) -> tuple[StagedRecovery, list]:
        """Stage `recovered.deferred` for the plain queues of `office`; the (message, refs) of the
        others, built now, for the usual recovery."""
        staged = cls(now)
        paged = set(recovered.page_cursors)
        cursors = {queue_id for _, queue_id, _, _ in recovered.seq_cursors}
        for queue_id, queue in office.queues_by_id.items():
            if queue_id not in paged and queue_id not in cursors and queue.seq_index is None \
                    and queue.last_value_key is None and queue.ring_size <= 0 and not queue.non_destructive:
                staged._sorting[queue_id] = (queue, [[] for _ in range(10)], [[] for _ in range(10)])
        built = []
        sorting = staged._sorting
        for entry in recovered.deferred:
            held = sorting.get(entry[2])
            if held is None:
                record_id, encoded, queue_id, seq = entry[:4]
                built.append((decode_message(record_id, encoded), [RecoveredRef(queue_id, seq)]))
                continue
            scheduled = entry[5]
            held[2 if scheduled and scheduled > now else 1][min(max(entry[4], 0), 9)].append(entry)
        recovered.deferred = []
        return staged, built

    def takes(self, queue_id: int) -> bool:
        return queue_id in self._sorting

    def add_built(self, queue_id: int, refs: list[MessageReference]) -> None:
        """References of a staged queue that recovery built (a message in several queues, one
        with a delivery count): they take their place in its order like the others."""
        _, available, scheduled = self._sorting[queue_id]
        now = self.now
        for ref in refs:
            message = ref.message
            when = message.scheduled
            (scheduled if when and when > now else available)[min(max(message.priority, 0), 9)].append(
                (None, ref, queue_id, ref.seq))

    def seal(self) -> int:
        """Every staged reference is known: order them; the queues count them until admitted.
        Returns how many there are."""
        total = 0
        for queue_id, (queue, available, scheduled) in self._sorting.items():
            order = []
            for priority in range(9, -1, -1):
                for part in (available[priority], scheduled[priority]):
                    if part:
                        part.sort(key=_SEQ)
                        order.extend(part)
            if not order:
                continue
            top = max(entry[3] for entry in order)
            if top >= queue.next_seq:
                queue.next_seq = top + 1
            order.reverse()
            queue.recovering += len(order)
            total += len(order)
            self._queues[queue_id] = (queue, order)
        self._sorting.clear()
        self._by_name.extend(sorted(self._queues, key=lambda queue_id: self._queues[queue_id][0].name))
        self.pending = total
        return total

    def moving(self, queue_id: int) -> None:
        """A migration moves this queue now: admit its references first, and release the
        scheduled ones as they come (the migration moves them with their time)."""
        self._moving.add(queue_id)

    def admit(self, limit: int, ahead: int = AHEAD) -> int:
        """Build and admit up to `limit` references to queues with fewer than `ahead` available
        (a queue being moved first, else the queues by name); how many were admitted (0: none is
        wanted now, or none is left: `pending`)."""
        admitted = 0
        while limit > 0 and self._queues:
            queue_id = self._next(ahead)
            if queue_id is None:
                break
            queue, order = self._queues[queue_id]
            n = min(limit, len(order), ahead - queue._available)
            chunk = order[-n:]
            del order[-n:]
            chunk.reverse()
            queue.recovering -= n
            self.pending -= n
            refs = []
            append = refs.append
            for entry in chunk:
                record_id = entry[0]
                if record_id is None:  # built by recovery
                    append(entry[1])
                    continue
                message = decode_message(record_id, entry[1])
                message.ref_count = 1
                append(MessageReference(message, queue, entry[3]))
            queue.add_all_recovered(refs, self.now)
            queue.messages_added += n
            if not order:
                del self._queues[queue_id]
            if queue_id in self._moving:
                if queue.scheduled_count:
                    queue.unschedule_all()
                queue.deliver()
            limit -= n
            admitted += n
        return admitted

    def _next(self, ahead: int) -> int | None:
        """The queue to admit to: one being moved, else the first by name, if it has fewer than
        `ahead` references available."""
        queues = self._queues
        for queue_id in self._moving:
            if queue_id in queues:
                return queue_id if queues[queue_id][0]._available < ahead else None
        by_name = self._by_name
        while by_name and by_name[0] not in queues:
            by_name.popleft()
        if not by_name:
            return None
        queue_id = by_name[0]
        return queue_id if queues[queue_id][0]._available < ahead else None
