"""Scale-down with message migration: move every message of a broker to a live target.

A :class:`Migration` runs inside a broker that serves no clients any more — a live-only broker
stopping with ``scale_down``, or the drainer (``petrel drain``: a broker started on an orphaned
data directory without listeners). Queue by queue it creates the queue on the target as it is
here (MIGRATE_QUEUE), then consumes it like a bridge consumes its store-and-forward queue:
every message, paged and large ones included, in the order this broker would deliver it,
scheduled ones with their times, goes to the target in MIGRATE_BATCH frames (a large one as a
FORWARD) naming that one queue, each message carrying the origin's duplicate ID (this node's
ID + the queue's + the message's sequence number there) and where it was (`ORIGIN`, the node,
queue and sequence number: its identity for the Spark source). A message is removed
here only once the target has confirmed it from its disk. The target keeps the IDs, and at
most half its duplicate-ID cache is ever in flight or not yet removed here, so a migration
killed at any point and run again delivers nothing twice; nothing is removed here that the
target does not hold, so nothing is lost.

Order: per queue, the target receives the messages in this queue's delivery order (priority,
then arrival). Messages already on the target's queue are delivered before the moved ones
that arrive after them, as Artemis does.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from petrel.client.link import PeerLink, open_link, stream_body
from petrel.codec.core import Connected, CreateSession, Error, Result, SendConfirm, SendFailed
from petrel.codec.core.cluster import (
    Forward,
    MigrateBatch,
    MigrateDuplicateIds,
    Migrated,
    MigrateQueue,
    MigrationBegin,
    MigrationDone,
)
from petrel.core.queue import Consumer
from petrel.core.message import DUPLICATE_ID
from petrel.core.remote import (
    INSTANCE,
    KEY_SEPARATOR,
    MIGRATED_DELIVERY_COUNT,
    ORIGIN,
    ROUTE_TO,
    SYNC_FIRST,
    bridge_dup_id,
    migration_dup_id,
    origin_start,
    with_origin,
)

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference, Queue
    from petrel.server.node import NodeContext

__all__ = ["Migration", "MigrationFailed", "PreparedBranchesLeft", "Progress", "refuse_prepared"]

log = logging.getLogger("petrel.ha.scale_down")

BEGIN, SESSION, QUEUE = 1, 2, 3
WINDOW = 50_000  # messages in flight or not yet removed here, at most (and half the target's cache)
SF_PREFIX = "$.petrel.sf."  # store-and-forward queues (petrel.cluster.bridge.sf_queue_name)
RETRY_REFUSED = 0.5  # s before sending again what the target refused (an address full: FAIL/BLOCK)
BATCH = 1024  # messages in one MIGRATE_BATCH at most ...
BATCH_BYTES = 1024 * 1024  # ... and bytes (Message.size: bodies, properties), less when the target
FRAME_MARGIN = 64 * 1024  # takes smaller frames; what a batch's frame holds beyond those: IDs, headers


class MigrationFailed(Exception):
    """The migration could not finish; what was not moved stays here."""


class PreparedBranchesLeft(MigrationFailed):
    """Prepared transaction branches (XA) are here: they do not move, so nothing moves (their
    sends would be lost, what they acknowledged delivered again) until they are finished."""


def refuse_prepared(office) -> None:
    """Raise PreparedBranchesLeft, naming them, when `office` holds prepared transactions."""
    from petrel.core.prepared import describe_xid

    prepared = getattr(office, "prepared", None)
    if prepared:
        xids = ", ".join(describe_xid(xid) for xid in sorted(prepared))
        raise PreparedBranchesLeft(
            f"{len(prepared)} prepared transaction branch(es) are here, which do not move: {xids}; nothing "
            "was moved. Have the transaction manager commit or roll them back first (recover() lists them "
            "on a broker running on this data directory), then scale down or drain again")


@dataclass
class Progress:
    messages_moved: int
    messages_total: int
    bytes_moved: int
    rate: float  # messages/s since the start
    eta_s: float | None
    queue: str | None = None

    def as_dict(self) -> dict:
        return {"event": "progress", "messages_moved": self.messages_moved, "messages_total": self.messages_total,
                "bytes_moved": self.bytes_moved, "rate": round(self.rate, 1),
                "eta_s": None if self.eta_s is None else round(self.eta_s, 1), "queue": self.queue}


class Migration:
    def __init__(self, broker: NodeContext, target: str, *, user: str, password: str, window: int = WINDOW,
                 on_progress: Callable[[Progress], None] | None = None, timeout: float = 10.0) -> None:
        self.broker = broker
        self.office = broker.office
        self.target = target
        self.user = user
        self.password = password
        self.window = window
        self.bridge_window = window
        self._queue_window = window  # the window of the queue being moved
        self.on_progress = on_progress
        self.timeout = timeout
        self.link: PeerLink | None = None
        self.target_node: str | None = None
        self.moved = 0
        self.bytes = 0
        self.total = 0
        self.sent = 0  # FORWARDs sent on the session (SEND_CONFIRM counts them)
        self.confirmed = 0
        self.in_flight: deque[tuple[MessageReference, Consumer]] = deque()
        self.failed: dict[int, str] = {}
        self.removing = 0  # acknowledged here, not yet on disk: they still hold the window
        self._answers: dict[int, asyncio.Future] = {}
        self._lost: asyncio.Future | None = None
        self._outbox: deque[MessageReference] = deque()
        self._streaming: asyncio.Task | None = None
        self._consumer: Consumer | None = None
        self._queue: Queue | None = None
        self._started = 0.0
        self._last_progress = 0.0
        self._corr = itertools.count(QUEUE)
        self._refused: list[MessageReference] = []  # refused by the target, in order, held until a retry
        self._refused_at = 0.0
        self.refusals = 0
        self._refusal_told = False
        self._batch: list[Migrated] = []  # to send in one MIGRATE_BATCH, for _batch_to
        self._batch_to: tuple[int, list[str]] = (0, [])  # (routing type, keys) of the queue being moved
        self._bridged = False  # the queue being moved is the store-and-forward queue toward the target
        self._batch_bytes = 0
        self._batch_limit = BATCH_BYTES  # bytes per batch, within the target's largest frame
        self._flushing: asyncio.Handle | None = None
        self._origin = ""  # the queue being moved: `origin_start` of its hop
        self._dup_head = self._dup_tail = ""  # ... and its messages' duplicate IDs around their seq

    # -- the run ---------------------------------------------------------------------------------------

    async def run(self) -> int:
        """Move everything; the number of messages moved. Raises MigrationFailed."""
        refuse_prepared(self.office)  # before anything moves
        loop = asyncio.get_running_loop()
        self._lost = loop.create_future()
        self._started = time.monotonic()
        queues = [q for q in self.office.queues.values() if not q.temporary]
        self.total = sum(q.message_count for q in queues)
        try:
            self.link = await open_link(self, self.target, user=self.user, password=self.password,
                                        ttl_ms=int(self.timeout * 3000), client=f"petrel-scale-down/{self.broker.node_id}",
                                        max_frame_size=self.broker.config.max_frame_size + 65536, timeout=self.timeout,
                                        tls=self.broker.tls.link_context)  # an ssl:// target
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            raise MigrationFailed(f"cannot reach the target {self.target}: {exc or 'timed out'}") from None
        self.link.watch(self.timeout * 3)
        try:
            begun = await self._ask(BEGIN, None)
            self.target_node = begun.get("node_id")
            cache = int(begun.get("id_cache_size") or 0)
            if cache > 0:
                self.window = max(1, min(self.window, cache // 2))
            bridged = int(begun.get("bridge_id_cache_size") or cache)  # for its store-and-forward queue
            frame = int(begun.get("max_frame_size") or 0)  # a target that does not say it: 512 KiB
            self._batch_limit = max(1, min(BATCH_BYTES, frame - FRAME_MARGIN)) if frame else 512 * 1024
            self.bridge_window = max(1, min(self.window, bridged // 2)) if bridged > 0 else self.window
            self.link.send(CreateSession(SESSION, 1, False))
            await self._ask(SESSION, None)
            log.info("moving %d messages in %d queues to node %s at %s (window %d)", self.total, len(queues),
                     self.target_node, self.target, self.window, extra={"event": "scale_down.started"})
            for queue in sorted(queues, key=lambda q: q.name):
                await self._move_queue(queue)
            await self._move_duplicate_ids()
            corr = next(self._corr)
            done = await self._ask(corr, MigrationDone(corr))
            if done.get("rerouted"):
                log.info("the target delivered %d messages it held for this node to their queues",
                         done["rerouted"], extra={"event": "scale_down.absorbed"})
            left = sum(q.message_count for q in queues if q.name in self.office.queues)
            if left:
                raise MigrationFailed(f"{left} messages are still here after the migration")
        finally:
            if self.link is not None and not self.link.closed:
                self.link.close("the migration is over")
        self._report(force=True)
        log.info("moved %d messages (%.1f MiB) to node %s in %.1fs", self.moved, self.bytes / (1 << 20),
                 self.target_node, time.monotonic() - self._started, extra={"event": "scale_down.done"})
        return self.moved

    async def _ask(self, corr: int, event) -> dict:
        future = asyncio.get_running_loop().create_future()
        self._answers[corr] = future
        if event is not None:
            self.link.send(event)
        done, _ = await asyncio.wait({future, self._lost}, timeout=self.timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if future in done:
            return future.result()
        if self._lost.done():
            raise MigrationFailed(self._lost.result())
        raise MigrationFailed(f"the target {self.target} did not answer within {self.timeout:.0f}s")

    async def _create(self, queue: Queue) -> None:
        corr = next(self._corr)
        await self._ask(corr, MigrateQueue(
            corr, queue.name, queue.address, int(queue.routing_type), queue.durable,
            queue.selector.text if queue.selector else None, queue.client_id, queue.subscription,
            _attributes(queue)))

    async def _move_duplicate_ids(self) -> None:
        """The duplicate IDs this node remembers, cache by cache, oldest first (a rerun adds only
        what the target lacks)."""
        for name, cache in sorted(self.office.dup_caches.items()):
            ids = [dup_id for dup_id, _ in cache.entries()]
            for start in range(0, len(ids), 5000):
                corr = next(self._corr)
                await self._ask(corr, MigrateDuplicateIds(corr, name, ids[start:start + 5000]))

    def _for_target(self, queue: Queue) -> bool:
        """This node's store-and-forward queue toward the target: its copies go to the queues they
        were for there, as the bridge would have sent them."""
        return bool(self.target_node) and queue.name.startswith(SF_PREFIX) and \
            queue.name.endswith("." + self.target_node)

    async def _move_queue(self, queue: Queue) -> None:
        if not self._for_target(queue):
            await self._create(queue)
        if queue.message_count == 0:
            return
        self._queue = queue
        if self.office.staged is not None:  # the drainer's: references still to build come first
            self.office.staged.moving(queue.id)
        self._bridged = self._for_target(queue)
        self._queue_window = self.bridge_window if self._bridged else self.window
        # every MIGRATE_BATCH of this queue names it: its routing type, whatever the address has
        self._batch_to = (int(queue.routing_type), [queue.name])
        node = self.broker.node_id
        self._origin = origin_start(node, queue.name)
        head, _, tail = migration_dup_id(node, queue.id, 0).rpartition(":0@")
        self._dup_head, self._dup_tail = f"{head}:", f"@{tail}"
        consumer = self._consumer = Consumer(queue, self._deliver, window=max(self._queue_window - self.removing, 0))
        queue.add_consumer(consumer)
        if queue.unschedule_all():
            queue.deliver()
        last_change, last_moved = time.monotonic(), self.moved
        try:
            while True:
                count = queue.message_count
                if count == 0:
                    break
                if queue.non_destructive and not self.in_flight and not self._outbox and self._streaming is None \
                        and not consumer.delivering and not self._refused:
                    queue.purge()  # everything was moved (a non-destructive queue keeps its messages)
                    break
                if self.moved != last_moved:
                    last_change, last_moved = time.monotonic(), self.moved
                elif time.monotonic() - last_change > self.timeout * 3:
                    why = "the target refuses them (its address is full)" if self._refused else "they do not move"
                    raise MigrationFailed(f"queue {queue.name!r}: {count} messages left, none moved for "
                                          f"{self.timeout * 3:.0f}s: {why}")
                if self._lost.done():
                    raise MigrationFailed(self._lost.result())
                if self._refused_at and not self.in_flight and time.monotonic() - self._refused_at >= RETRY_REFUSED:
                    # every answer is in: give the refused ones back, tell the target we start again
                    # from the oldest (MIGRATE_QUEUE, which also re-creates a queue it lost), go on
                    self._give_back()
                    self._refused_at = 0.0
                    await self._create(queue)
                    consumer.paused = False
                    queue.deliver()
                self._report()
                await asyncio.sleep(0.01)
        finally:
            consumer.closed = True
            if self._flushing is not None:
                self._flushing.cancel()
                self._flushing = None
            self._batch, self._batch_bytes = [], 0
            self._refused, self._refused_at = [], 0.0
            for ref in reversed(list(consumer.delivering.values())):
                queue.cancel(ref, redelivered=False)
            queue.remove_consumer(consumer)
            self._consumer = None

    # -- sending ---------------------------------------------------------------------------------------

    def _deliver(self, consumer: Consumer, ref: MessageReference) -> None:
        if self._streaming is not None or self._outbox:
            self._outbox.append(ref)
            return
        self._send(ref)

    def _send(self, ref: MessageReference) -> None:
        link = self.link
        if link is None or link.closed:
            return
        message = ref.message
        properties = message.properties
        bridged = self._bridged
        if message.large is None and not bridged and ORIGIN not in properties and DUPLICATE_ID not in properties:
            # the common case, as the general way below makes it: the queue's hop, made once
            properties = dict(properties)
            seq = ref.seq
            properties[ORIGIN] = origin = f"{self._origin}{seq}]]"
            self.sent += 1
            self.in_flight.append((ref, self._consumer))
            batch = self._batch
            batch.append(Migrated(
                message.address, message.durable, message.priority, message.expiration, message.timestamp,
                message.scheduled, properties, message.body, ref.delivery_count,
                f"{self._dup_head}{seq}{self._dup_tail}"))
            self._batch_bytes += message.size + len(ORIGIN) + len(origin)
            if len(batch) >= BATCH or self._batch_bytes >= self._batch_limit:
                self._flush()
            elif self._flushing is None:
                self._flushing = asyncio.get_running_loop().call_soon(self._flush)
            return
        if not bridged:  # where it was (its identity for readers such as the Spark source)
            properties = with_origin(properties, self.broker.node_id, ref.queue.name, ref.seq)
        if DUPLICATE_ID in properties:  # the copies of one send (one per queue) are one instance
            if bridged:
                properties = dict(properties)
            properties.setdefault(INSTANCE, bridge_dup_id(self.broker.node_id, message.id))
        self.sent += 1
        self.in_flight.append((ref, self._consumer))
        if message.large is None and not bridged:
            # one ID per copy: a message in two queues (two subscriptions) moves twice, once for each
            dup = migration_dup_id(self.broker.node_id, ref.queue.id, ref.seq)
            self._add_to_batch(Migrated(
                message.address, message.durable, message.priority, message.expiration, message.timestamp,
                message.scheduled, properties, message.body, ref.delivery_count, dup),
                message.size + len(ORIGIN) + len(properties[ORIGIN]))
            return
        self._flush()  # what came before goes first
        rt = int(ref.queue.routing_type)  # the queue it goes to, whatever the address has
        properties = dict(properties)
        if ref.delivery_count:
            properties[MIGRATED_DELIVERY_COUNT] = ref.delivery_count
        head = (1, message.address, rt, message.durable, message.priority, message.expiration,
                message.timestamp, message.scheduled, properties)
        if bridged:  # the bridge's copy: its keys, its duplicate ID
            keys = str(properties.pop(ROUTE_TO, "")).split(KEY_SEPARATOR)
            properties.pop(SYNC_FIRST, None)
            dup = bridge_dup_id(self.broker.node_id, message.id)
        else:
            keys = [ref.queue.name]
            dup = migration_dup_id(self.broker.node_id, ref.queue.id, ref.seq)
        if message.large is None:
            link.send(Forward(*head, message.body, False, keys, dup))
            return
        self._streaming = asyncio.get_running_loop().create_task(
            self._stream(link, message, Forward(*head, b"", True, keys, dup)))

    def _add_to_batch(self, migrated: Migrated, size: int) -> None:
        """Into the MIGRATE_BATCH of the queue being moved (`_batch_to`); `size`: the message's
        (body, properties and overhead: `Message.size`)."""
        self._batch.append(migrated)
        self._batch_bytes += size
        if len(self._batch) >= BATCH or self._batch_bytes >= self._batch_limit:
            self._flush()
        elif self._flushing is None:  # what one delivery round gave goes at the end of it
            self._flushing = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        link = self.link
        if batch and link is not None and not link.closed:
            rt, keys = self._batch_to
            link.send(MigrateBatch(1, rt, keys, batch))

    async def _stream(self, link: PeerLink, message, first: Forward) -> None:
        try:
            with self.broker.large.open(message.large) as reader:
                await stream_body(link, first, reader)
        except OSError as exc:
            self._lose(f"cannot read large message {message.id}: {exc}")
        finally:
            self._streaming = None
            while self._outbox and self._streaming is None and not link.closed:
                self._send(self._outbox.popleft())

    # -- the target's answers --------------------------------------------------------------------------

    def link_event(self, link: PeerLink, event: object) -> None:
        kind = type(event)
        if kind is SendConfirm:
            self._confirmed(event.count)
        elif kind is SendFailed:
            self.failed[event.number] = event.message
            self.refusals += 1
            if not self._refusal_told:  # once per episode, not per message
                self._refusal_told = True
                log.warning("the target refuses messages: %s (they stay here and are sent again in %.1fs)",
                            event.message, RETRY_REFUSED, extra={"event": "scale_down.refused"})
        elif kind is Connected:
            link.send(MigrationBegin(BEGIN, self.broker.node_id, self.user, self.password))
        elif kind is Result:
            future = self._answers.pop(event.corr, None)
            if future is None or future.done():
                return
            if event.code:
                future.set_exception(MigrationFailed(f"the target refused: {event.message}"))
            else:
                future.set_result(dict(event.value or {}))
        elif kind is Error:
            self._lose(f"the target closed the migration: {event.message}")

    def link_lost(self, link: PeerLink, reason: str) -> None:
        self._lose(f"the connection to the target was lost: {reason}")

    def fail(self, reason: str) -> None:
        """Stop the migration from outside (`run` raises MigrationFailed with `reason`)."""
        self._lose(reason)

    def link_writable(self, link: PeerLink, writable: bool) -> None:
        consumer = self._consumer
        if consumer is not None:
            consumer.paused = not writable
            if writable and self._queue is not None:
                self._queue.deliver()

    def _lose(self, reason: str) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(reason)
        for future in self._answers.values():
            if not future.done():
                future.set_exception(MigrationFailed(reason))
        self._answers.clear()
        # what is not confirmed stays here (it may be on the target: its duplicate ID says so)
        for ref, consumer in reversed(self.in_flight):
            ref.queue.cancel(ref, redelivered=False)
        self.in_flight.clear()
        self._give_back()
        self._outbox.clear()
        self._batch, self._batch_bytes = [], 0

    def _confirmed(self, count: int) -> None:
        store = self.office.store
        hold = getattr(store, "hold_deletes", None)  # the confirmed ones' deletes in one run
        if hold is None:
            self._remove_confirmed(count)
            return
        hold()
        try:
            self._remove_confirmed(count)
        finally:
            store.release_deletes()

    def _remove_confirmed(self, count: int) -> None:
        removed = nbytes = 0
        confirmed, in_flight, failed = self.confirmed, self.in_flight, self.failed
        try:
            while confirmed < count and in_flight:
                confirmed += 1
                ref, consumer = in_flight.popleft()
                if failed and failed.pop(confirmed, None) is not None:
                    # refused (the target's address is full): it, and everything sent after it, which
                    # the target refuses too, go back in order once the target has room
                    self._refused.append(ref)
                    if self._consumer is not None:
                        self._consumer.paused = True
                    self._refused_at = self._refused_at or time.monotonic()
                    continue
                nbytes += ref.message.body_size
                # no delivery per removal: its credit comes back once the removal is on disk (_hold)
                ref.queue.acknowledge(ref, 0, consumer, deliver=False)
                removed += 1
        finally:
            self.confirmed = confirmed
            self.moved += removed
            self.bytes += nbytes
        if removed:
            self._hold(removed)
            self.office.store.sync(lambda: self._hold(-removed))

    def _give_back(self) -> None:
        """What the target refused goes back to the head of its queue, in order."""
        refused, self._refused = self._refused, []
        self._refusal_told = False
        for ref in reversed(refused):
            ref.queue.cancel(ref, redelivered=False)

    def _hold(self, n: int) -> None:
        """Removals not yet on disk keep their credit: a killed migration resends at most a window."""
        self.removing += n
        consumer = self._consumer
        if consumer is not None:
            consumer.window = max(self._queue_window - self.removing, 0)
            if n < 0 and self._queue is not None:
                self._queue.deliver()

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is None or (not force and now - self._last_progress < 0.5):
            return
        self._last_progress = now
        elapsed = max(now - self._started, 1e-6)
        rate = self.moved / elapsed
        left = max(self.total - self.moved, 0)
        eta = left / rate if rate > 0 else None
        self.on_progress(Progress(self.moved, self.total, self.bytes, rate, eta,
                                  self._queue.name if self._queue is not None else None))


def _attributes(queue: Queue) -> dict:
    return {k: getattr(queue, k) for k in ("exclusive", "last_value_key", "non_destructive", "ring_size",
                                           "group_rebalance", "group_buckets")}


def scale_down_targets(broker: NodeContext) -> list[str]:
    """Where a stopping broker moves its messages: the target asked for (management), else the
    scale_down connectors, else the cluster connection's static connectors (``host:port``)."""
    config = broker.config
    asked = getattr(broker, "scale_down_target", None)
    if asked:
        return [asked.removeprefix("tcp://")]
    model = config.ha_policy.scale_down
    refs = list(model.connectors) if model is not None else []
    if not refs:
        for cc in config.cluster_connections:
            refs.extend(cc.static_connectors)
    return list(dict.fromkeys(config.connector_url(ref) for ref in refs))


async def scale_down(broker: NodeContext, targets: list[str]) -> bool:
    """Move everything to the first target that takes it; False (logged, with what to do) when
    none could: the messages stay in the data directory for a drainer."""
    config = broker.config
    reasons = []
    for target in targets:
        migration = Migration(broker, target, user=config.cluster_user, password=config.cluster_password)
        try:
            await migration.run()
            return True
        except PreparedBranchesLeft as exc:
            log.error("scale-down refused: %s; everything stays in %s", exc, config.data_dir,
                      extra={"event": "scale_down.prepared_left"})
            return False
        except MigrationFailed as exc:
            reasons.append(f"{target}: {exc}")
            log.warning("scale-down to %s failed: %s", target, exc, extra={"event": "scale_down.target_failed"})
    log.error("scale-down failed (%s); the messages stay in %s: move them with `petrel drain --data-dir %s "
              "--target tcp://<a live broker>`", "; ".join(reasons) or "no target configured", config.data_dir,
              config.data_dir, extra={"event": "scale_down.failed"})
    return False
