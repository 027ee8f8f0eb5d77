"""A store-and-forward bridge: this node's messages for one peer, delivered exactly once.

Each peer has a durable internal queue here, `$.petrel.sf.<cluster>.<peer node id>`, that
routing fills with copies tagged with the peer's binding keys (see `core/clustered.py`). The
bridge consumes that queue like any consumer, within a window of `confirmation_window_size`
bytes, and sends each copy as a FORWARD frame carrying a duplicate ID made of this node's id
and the copy's message id. A routed copy goes out at once, as a local delivery would; a
redistributed one (marked SYNC_FIRST) only once the store has it on disk together with the
removal of its original, so a crash here never brings back an original the peer already has.
A copy is acknowledged here only when the peer confirms it (after its own disk), so a crash
or a cut link on either side leaves it in the queue; it is then sent again on the next
connection and the peer's duplicate-ID check drops it if it had already arrived. That check
must still know every copy that can come again: the peer keeps a cache of the IDs this node
sent it (`BRIDGE.<this node id>`, its size told at join time), and the bridge never has more
than half of it in flight, counting a confirmed copy until its removal here is on disk (a
crash before that sends it again). Reconnects
follow `retry_interval` x `retry_interval_multiplier`, capped by `max_retry_interval`, for
`reconnect_attempts` (-1: forever).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from petrel.client.link import PeerLink, open_link, stream_body
from petrel.codec.core import (
    Connected,
    CreateSession,
    Disconnect,
    Error,
    ErrorCode,
    Pong,
    Result,
    SendConfirm,
    SendFailed,
    Topology,
)
from petrel.codec.core.cluster import Bindings, ClusterJoin, ClusterMembers, Forward, GroupDecision
from petrel.core.message import DUPLICATE_ID
from petrel.core.queue import Consumer, MessageReference
from petrel.core.remote import INSTANCE, KEY_SEPARATOR, ROUTE_TO, SYNC_FIRST, bridge_dup_id

if TYPE_CHECKING:
    from petrel.cluster.connection import ClusterConnection
    from petrel.core.queue import Queue

__all__ = ["Bridge", "sf_queue_name", "in_flight_limit"]

log = logging.getLogger("petrel.cluster.bridge")

JOIN, SESSION = 1, 2  # correlation ids of the handshake requests
LARGE_CHUNK = 512 * 1024
MAX_IN_FLIGHT = 65536  # messages, whatever their size (empty bodies cost no window bytes)


def sf_queue_name(cluster: str, node_id: str) -> str:
    return f"$.petrel.sf.{cluster}.{node_id}"


def in_flight_limit(peer_cache_size: int | None, fallback: int, dedup: bool = True) -> int:
    """Copies a bridge may have out (sent and not confirmed, or confirmed and not yet removed
    on disk here): half the peer's duplicate-ID cache for this node, so that everything it may
    send again after a crash, and the copies that arrive there meanwhile, stay recognised.
    `fallback`: the cache size to assume of a peer that did not tell (this node's own)."""
    size = fallback if peer_cache_size is None else peer_cache_size
    if not dedup or size <= 0:  # no duplicate detection there: nothing to stay within
        return MAX_IN_FLIGHT
    return max(1, min(MAX_IN_FLIGHT, size // 2))


class Bridge:
    """The link to one peer (by connector until it answers, then by node id) and its SF queue."""

    def __init__(self, cluster: ClusterConnection, connector: str) -> None:
        self.cluster = cluster
        self.model = cluster.model
        self.connector = connector
        self.node_id: str | None = None
        self.peer_unique_id = ""  # the peer's process, as its JOIN answer said
        self.http: str | None = None
        self.state = "idle"  # idle, connecting, joining, up, retrying, refused, failed, stopped
        self.connected = False  # the post office skips remote bindings of a bridge that is not
        self.sf_queue: Queue | None = None
        self.link: PeerLink | None = None
        self.consumer: Consumer | None = None
        self.in_flight: deque[MessageReference] = deque()  # handed over by the queue, not confirmed
        self.unsynced: list[MessageReference] = []  # the tail of in_flight, waiting for the disk
        self._streaming: asyncio.Task | None = None  # a large body going out chunk by chunk
        self._behind_stream: list[MessageReference] = []  # ... and what waits behind it
        self._sync_asked = False
        self.sent = 0
        self.confirmed = 0
        self.failed: dict[int, str] = {}  # send number -> why the peer refused it
        self.peer_cache_size: int | None = None  # the peer's duplicate-ID cache for our copies
        self.window = MAX_IN_FLIGHT  # in messages: see `in_flight_limit`
        self.removing = 0  # copies confirmed whose removal here is not yet on disk
        self.bindings: dict[str, str] = {}  # the peer's binding key -> ours
        self.attempts = 0
        self.ever_connected = False
        self.reconnects = 0
        self.messages_forwarded = 0
        self.last_error = ""
        self.up_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.state in ("idle", "retrying", "refused"):
            self._connect_soon(0)

    def stop(self) -> None:
        self.state = "stopped"
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
        if self.link is not None:
            self.link.close("the bridge is stopping")
        self._detach()

    @property
    def backlog(self) -> int:
        return self.sf_queue.message_count if self.sf_queue is not None else 0

    def _connect_soon(self, delay_ms: float) -> None:
        if self.state == "stopped":
            return
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._begin)

    def _begin(self) -> None:
        self._timer = None
        if self.state != "stopped":
            self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        self.state = "connecting"
        self.attempts += 1
        model = self.model
        cfg = self.cluster.broker.config
        try:
            link = await open_link(self, self.connector, user=cfg.cluster_user, password=cfg.cluster_password,
                                   ttl_ms=model.connection_ttl, client=f"petrel-cluster/{self.cluster.node_id}",
                                   max_frame_size=cfg.max_frame_size + 65536, timeout=model.call_timeout / 1000,
                                   tls=self.cluster.broker.tls.link_context)  # ssl:// connectors
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            self._failed_attempt(f"cannot connect to {self.connector}: {exc or 'timed out'}")
            return
        finally:
            self._task = None
        if self.state == "stopped":
            link.close("the bridge is stopping")
            return
        if link.closed:  # reset before we got here: link_lost ignored it, so retry from here
            self._failed_attempt(f"{self.connector} closed the connection at once")
            return
        self.link = link
        self.state = "joining"
        # drop a link the peer has been silent on for check_period or connection_ttl, whichever is
        # shorter (the peer pings every third of our connection_ttl)
        link.watch(min(model.check_period, model.connection_ttl) / 1000, self._silent)

    def _silent(self, link: PeerLink, limit: float) -> None:
        if link is self.link:
            log.warning("bridge to %s: nothing heard for %.1fs (check_period/connection_ttl); reconnecting",
                        self.node_id or self.connector, limit)

    def _failed_attempt(self, why: str) -> None:
        if self.state == "stopped":
            return
        self.last_error = why
        limit = self.model.reconnect_attempts if self.ever_connected else self.model.initial_connect_attempts
        if limit >= 0 and self.attempts > limit:
            self.state = "failed"
            log.error("bridge to %s gave up after %d attempts: %s", self.node_id or self.connector, self.attempts,
                      why, extra={"event": "cluster.bridge_failed"})
            return
        if self.state != "refused":
            self.state = "retrying"
        delay = self.model.retry_interval * self.model.retry_interval_multiplier ** max(self.attempts - 1, 0)
        delay = min(delay, self.model.max_retry_interval)
        log.debug("bridge to %s: %s; retrying in %d ms", self.connector, why, delay)
        self._connect_soon(delay)

    # -- events from the link ------------------------------------------------------------------

    def link_event(self, link: PeerLink, event: object) -> None:
        if link is not self.link:
            return
        kind = type(event)
        if kind is SendConfirm:
            self._confirmed(event.count)
        elif kind is Bindings:
            self.cluster.bindings_from(self, event)
        elif kind is ClusterMembers:
            self.cluster.members_from(self, event.members)
        elif kind is SendFailed:
            self.failed[event.number] = event.message
            log.warning("peer %s refused a forwarded message: %s (it stays queued here and is retried)",
                        self.node_id, event.message, extra={"event": "cluster.forward_refused"})
        elif kind is Connected:
            cluster = self.cluster
            link.send(ClusterJoin(JOIN, cluster.name, cluster.node_id, cluster.unique_id, cluster.connector,
                                  cluster.broker.config.cluster_user, cluster.broker.config.cluster_password,
                                  self.model.max_hops, cluster.http, cluster.grouping_type))
        elif kind is Result:
            self._result(event)
        elif kind is GroupDecision:
            if self.cluster.grouping is not None:
                self.cluster.grouping.decision(event)
        elif kind is Error:
            self._refused(event.code, event.message)
        elif kind is Disconnect:
            link.close(f"the peer disconnected: {event.reason}")
        elif kind in (Pong, Topology):
            pass

    def _refused(self, code: int, message: str) -> None:
        if code == ErrorCode.UNAUTHORIZED:
            repeated = self.state == "refused" or self.last_error == message  # retries: say it once
            self.state = "refused"
            (log.debug if repeated else log.error)("node at %s refused this node's cluster join: %s (check cluster_user, cluster_password "
                      "and the cluster connection name on both nodes)", self.connector, message,
                      extra={"event": "cluster.join_refused"})
        else:
            log.warning("bridge to %s: the peer reported an error: %s", self.node_id or self.connector, message)
        self.last_error = message
        if self.link is not None:
            self.link.close(message)

    def _result(self, event: Result) -> None:
        if event.corr == JOIN:
            if event.code:
                self._refused(event.code, event.message)
                return
            value = event.value or {}
            node_id = value.get("node_id", "")
            size = value.get("id_cache_size")
            self.peer_unique_id = str(value.get("unique_id") or "")
            self.peer_cache_size = size if isinstance(size, int) and not isinstance(size, bool) else None
            if not self.cluster.bridge_identified(self, node_id):
                self.stop()
                return
            self.link.send(CreateSession(SESSION, 1, False))
        elif event.corr == SESSION:
            if event.code:
                self._refused(event.code, event.message)
                return
            self._up()

    def _up(self) -> None:
        self.state = "up"
        self.connected = True
        if self.ever_connected:
            self.reconnects += 1
        self.ever_connected = True
        self.attempts = 0
        self.up_since = time.time()
        self.last_error = ""
        self.sent = self.confirmed = 0
        self.failed.clear()
        log.info("bridge to node %s at %s is up", self.node_id, self.connector, extra={"event": "cluster.bridge_up"})
        queue = self.sf_queue
        self.window = in_flight_limit(self.peer_cache_size, self.cluster.office.id_cache_size,
                                      self.model.use_duplicate_detection)
        self.consumer = Consumer(queue, self._send, window=max(self.window - self.removing, 0),
                                 window_bytes=self.model.confirmation_window_size)
        self.cluster.bridge_changed(self)
        queue.add_consumer(self.consumer)
        # The peer's bindings arrived while the link was still joining (not connected), so
        # idle queues did not count them as somewhere to redistribute to: they may now.
        office = self.cluster.office
        for binding in office.bindings_via(self):
            if binding.consumer_count > 0:
                office.remote_demand(binding)

    def link_lost(self, link: PeerLink, reason: str) -> None:
        if link is not self.link:
            return
        self.link = None
        was_up = self.connected
        self._detach()
        if was_up:
            log.warning("bridge to node %s lost: %s; %d messages wait in its store-and-forward queue",
                        self.node_id, reason, self.backlog, extra={"event": "cluster.bridge_down"})
            self.cluster.bridge_changed(self)
        if self.state != "stopped":
            self._failed_attempt(reason)

    def link_writable(self, link: PeerLink, writable: bool) -> None:
        consumer = self.consumer
        if consumer is None:
            return
        if writable:
            consumer.resume()
        else:
            consumer.paused = True

    def _detach(self) -> None:
        """Everything sent and not confirmed goes back to the head of the queue, in order."""
        self.connected = False
        consumer, self.consumer = self.consumer, None
        self.in_flight.clear()
        self.unsynced = []
        self._sync_asked = False
        self._behind_stream = []  # a streaming task ends on its own once the link is gone
        if consumer is None or self.sf_queue is None:
            return
        queue = self.sf_queue
        # A lost link is not a delivery attempt: closed first, so that no cancel below hands a
        # copy straight back to this consumer, for remove_consumer to count as redelivered
        # (every reconnect used to add one, and the 10th dead-lettered the copies).
        consumer.closed = True
        for ref in reversed(list(consumer.delivering.values())):
            queue.cancel(ref, redelivered=False)
        queue.remove_consumer(consumer)

    # -- forwarding ------------------------------------------------------------------------------

    def _send(self, consumer: Consumer, ref: MessageReference) -> None:
        link = self.link
        if link is None or link.closed:
            return  # _detach returns it
        self.in_flight.append(ref)
        if not (ref.message.durable and ref.message.properties.get(SYNC_FIRST)) and not self.unsynced:
            self._forward(link, ref)
            return
        self.unsynced.append(ref)
        if not self._sync_asked:
            self._sync_asked = True
            # after this loop turn: the transaction that stored the copy commits later in it
            asyncio.get_running_loop().call_soon(self._ask_sync, link)

    def _ask_sync(self, link: PeerLink) -> None:
        if link is self.link:
            count = len(self.unsynced)  # what the store holds now; later ones need a later sync
            self.cluster.office.store.sync(lambda: self._synced(link, count), transactional=True)

    def _synced(self, link: PeerLink, count: int) -> None:
        if link is not self.link:
            return  # that link is gone and _detach gave its messages back to the queue
        ready, self.unsynced = self.unsynced[:count], self.unsynced[count:]
        for ref in ready:
            self._forward(link, ref)
        if self.unsynced:
            asyncio.get_running_loop().call_soon(self._ask_sync, link)
        else:
            self._sync_asked = False

    def _forward(self, link: PeerLink, ref: MessageReference) -> None:
        if self._streaming is not None:
            self._behind_stream.append(ref)
            return
        message = ref.message
        props = dict(message.properties)
        keys = str(props.pop(ROUTE_TO, "")).split(KEY_SEPARATOR)
        props.pop(SYNC_FIRST, None)
        if DUPLICATE_ID in props:  # which send this is, wherever it goes next (see INSTANCE)
            props.setdefault(INSTANCE, bridge_dup_id(self.cluster.node_id, message.id))
        dup = bridge_dup_id(self.cluster.node_id, message.id) if self.model.use_duplicate_detection else None
        rt = int(message.routing_type) if message.routing_type is not None else -1
        head = (1, message.address, rt, message.durable, message.priority, message.expiration,
                message.timestamp, message.scheduled, props)
        self.sent += 1
        self.messages_forwarded += 1
        if message.large is None:
            link.send(Forward(*head, message.body, False, keys, dup))
            return
        self._streaming = asyncio.get_running_loop().create_task(
            self._stream(link, message, Forward(*head, b"", True, keys, dup)))

    async def _stream(self, link: PeerLink, message, first: Forward) -> None:
        """A large body as FORWARD + SEND_CHUNK frames, a chunk at a time as the socket drains
        (never the whole body in memory); the messages behind it wait, in order."""
        try:
            with self.cluster.broker.large.open(message.large) as reader:
                await stream_body(link, first, reader, chunk=LARGE_CHUNK)
        except OSError as exc:
            log.error("bridge to %s cannot read large message %s: %s", self.node_id, message.id, exc)
            link.close(f"cannot read large message {message.id}")
        finally:
            self._streaming = None
            waiting, self._behind_stream = self._behind_stream, []
            for ref in waiting:  # for the link up now (a new one if this one was lost meanwhile)
                current = self.link
                if current is None or current.closed:
                    break  # _detach gave them back to the queue
                self._forward(current, ref)

    def _confirmed(self, count: int) -> None:
        queue = self.sf_queue
        consumer = self.consumer
        refused = False
        # the credit of a confirmed copy comes back only once its removal is on disk: lower the
        # window first (acknowledging hands out more at once)
        n = min(count - self.confirmed, len(self.in_flight))
        self._removing(n)
        removed = 0
        while self.confirmed < count and self.in_flight:
            self.confirmed += 1
            ref = self.in_flight.popleft()
            why = self.failed.pop(self.confirmed, None)
            if why is not None:
                refused = True
                self._removing(-1)
                queue.cancel(ref, redelivered=False)
                continue
            queue.acknowledge(ref, 0, consumer, deliver=False)
            removed += 1
        if removed:
            queue.deliver()  # once for all of them
            self.cluster.office.store.sync(lambda: self._removed(removed))
        if refused and consumer is not None:
            # the peer refused something (full, say): stop sending for a retry interval
            consumer.paused = True
            asyncio.get_running_loop().call_later(self.model.retry_interval / 1000, self._resume, consumer)

    def _removing(self, n: int) -> None:
        self.removing += n
        if self.consumer is not None:
            self.consumer.window = max(self.window - self.removing, 0)

    def _removed(self, n: int) -> None:
        """`n` confirmed copies are gone from the disk here: their credit comes back."""
        self._removing(-n)
        if self.consumer is not None and self.sf_queue is not None:
            self.sf_queue.deliver()

    def _resume(self, consumer: Consumer) -> None:
        if consumer is self.consumer:
            consumer.resume()

    # -- the view ------------------------------------------------------------------------------

    def describe(self) -> dict:
        return {
            "node_id": self.node_id,
            "unique_id": self.peer_unique_id or None,  # the peer's process
            "connector": self.connector,
            "state": self.state,
            "connected": self.connected,
            "backlog": self.backlog,
            "in_flight": len(self.in_flight),
            "window": self.window,
            "messages_forwarded": self.messages_forwarded,
            "reconnects": self.reconnects,
            "remote_bindings": len(self.bindings),
            "last_error": self.last_error or None,
        }
