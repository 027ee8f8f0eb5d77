"""The backup's side of replication: one CORE connection to a live, applying its stream.

:class:`ReplicaClient` connects, registers, and applies every REPLICA_OPS frame to the
replica directory in order, in one thread of its own (the event loop only moves bytes);
each batch is made durable before it is acknowledged. It ends with an outcome the
activation acts on: the live handed over (``fail-over``), the connection was lost (``lost``),
the live refused (``refused``), or the backup is stopping (``stopped``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from petrel.client.link import PeerLink, open_link
from petrel.codec.core import Connected, Error, Result
from petrel.codec.core.replication import ReplicaAck, ReplicaFailback, ReplicaOps, ReplicaRegister, ReplicaStopping
from petrel.ha.replication import decode_op
from petrel.storage import stream as ops_

__all__ = ["ReplicaClient", "Outcome"]

log = logging.getLogger("petrel.ha.replica")

REGISTER = 1


@dataclass
class Outcome:
    kind: str  # fail-over | lost | live-stopped | refused | stopped
    reason: str
    in_sync: bool = False
    accepted: bool = False  # the live took this backup (a copy began)
    connector: str = ""  # the live's
    live_node_id: str | None = None
    data: dict = field(default_factory=dict)


class ReplicaClient:
    def __init__(self, *, connector: str, directory, node_id: str, group_name: str | None, user: str,
                 password: str, own_connector: str, twin: bool = False, request_failback: bool = False,
                 ttl_ms: int = 10000,
                 connect_timeout: float = 5.0, max_frame_size: int = 16 << 20, on_accepted=None,
                 on_in_sync=None, tls=None) -> None:
        self.connector = connector
        self.tls = tls  # the broker's link_context, for an ssl:// live
        self.directory = directory  # a ReplicaDirectory
        self.node_id = node_id
        self.group_name = group_name
        self.user = user
        self.password = password
        self.own_connector = own_connector
        self.twin = twin  # only a live serving this node's own ID may take it (a primary's backup)
        self.request_failback = request_failback  # once in sync, ask the live to give way
        self.ttl_ms = ttl_ms
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.on_accepted = on_accepted  # called once the live takes this backup, before the first operation
        self.on_in_sync = on_in_sync  # called once the copy is complete
        self.link: PeerLink | None = None
        self.state = "connecting"  # connecting -> syncing -> in-sync -> (ended)
        self.live_node_id: str | None = None
        self.result_data: dict = {}
        self.applied_seq = 0
        self.received_seq = 0
        self.sync_done_seq: int | None = None
        self.stopping: ReplicaStopping | None = None
        self.last_op_at = 0.0
        self.bytes_received = 0
        self._next = None  # the sequence number the next frame must start at
        self._outcome: asyncio.Future | None = None
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- running ---------------------------------------------------------------------------------

    async def run(self) -> Outcome:
        loop = self._loop = asyncio.get_running_loop()
        self._outcome = loop.create_future()
        try:
            link = await open_link(self, self.connector, user=self.user, password=self.password, ttl_ms=self.ttl_ms,
                                   client=f"petrel-backup/{self.node_id}", max_frame_size=self.max_frame_size,
                                   timeout=self.connect_timeout, tls=self.tls)
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            return Outcome("lost", f"cannot connect to {self.connector}: {exc or 'timed out'}")
        self.link = link
        link.watch(self.ttl_ms / 1000)  # a silent live is a lost one
        try:
            return await self._outcome
        finally:
            self._stop_worker()
            if not link.closed:
                link.close("the backup is done with this live")

    def close(self, reason: str = "the backup is stopping") -> None:
        self._end(Outcome("stopped", reason))

    def _end(self, outcome: Outcome) -> None:
        if self._outcome is not None and not self._outcome.done():
            outcome.in_sync = self.state == "in-sync"
            outcome.accepted = self.state != "connecting"
            outcome.connector = self.connector
            outcome.live_node_id = self.live_node_id
            outcome.data = self.result_data
            self._outcome.set_result(outcome)
            if self.link is not None and not self.link.closed:
                self.link.close(outcome.reason)

    # -- the link's events (event loop) ------------------------------------------------------------

    def link_event(self, link: PeerLink, event: object) -> None:
        kind = type(event)
        if kind is ReplicaOps:
            self._ops(event)
        elif kind is Connected:
            link.send(ReplicaRegister(REGISTER, self.node_id, self.group_name, self.user, self.password,
                                      self.own_connector, self.twin))
        elif kind is Result:
            if event.code != 0:
                self._end(Outcome("refused", event.message))
                return
            self.result_data = dict(event.value or {})
            self.live_node_id = self.result_data.get("node_id")
            self.state = "syncing"
            if self.on_accepted is not None:
                try:
                    self.on_accepted()
                except OSError as exc:
                    log.error("cannot set the old copy aside before a new one: %s; check the data directory's "
                              "parent (oldreplica.N goes there)", exc, extra={"event": "ha.set_aside_failed"})
                    self._end(Outcome("refused", f"cannot make room for the copy: {exc}"))
                    return
            self._start_worker()
        elif kind is ReplicaStopping:
            self.stopping = event
            self._maybe_done()
        elif kind is Error:
            self._end(Outcome("refused" if self.state == "connecting" else "lost", event.message))

    def link_lost(self, link: PeerLink, reason: str) -> None:
        if self.stopping is not None and self.stopping.fail_over and self.applied_seq >= self.stopping.seq:
            self._end(Outcome("fail-over", "the live handed over"))
        else:
            self._end(Outcome("lost", f"the connection to the live was lost: {reason}"))

    def link_writable(self, link: PeerLink, writable: bool) -> None:
        pass

    def _ops(self, event: ReplicaOps) -> None:
        if self._next is not None and event.first != self._next:
            self._end(Outcome("lost", f"replication stream out of order: got {event.first}, expected {self._next}"))
            return
        self._next = event.first + len(event.ops)
        self.received_seq = self._next - 1
        self.last_op_at = time.time()
        self._work.put((event.first, event.ops))

    # -- applying (the worker thread) ----------------------------------------------------------------

    def _start_worker(self) -> None:
        self._thread = threading.Thread(target=self._apply_loop, name=f"replica-{self.connector}", daemon=True)
        self._thread.start()

    def _stop_worker(self) -> None:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(30)
            self._thread = None

    def _apply_loop(self) -> None:
        work = self._work
        while True:
            item = work.get()
            batch = []
            stop = item is None
            if not stop:
                batch.append(item)
            while not stop:
                try:
                    more = work.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    batch.append(more)
            if batch:
                try:
                    last, sync_done = self._apply(batch)
                except Exception as exc:
                    log.exception("the replica could not apply the live's operations")
                    self._loop.call_soon_threadsafe(self._end, Outcome("lost", f"applying failed: {exc}"))
                    return
                self._loop.call_soon_threadsafe(self._applied, last, sync_done)
            if stop:
                return

    def _apply(self, batch: list) -> tuple[int, int | None]:
        ops = []
        sync_done = None
        for first, items in batch:
            for i, item in enumerate(items):
                op = decode_op(item)
                if type(op) is ops_.SyncDone:
                    sync_done = first + i
                ops.append(op)
                data = getattr(op, "data", None)
                if data is not None:
                    self.bytes_received += len(data)
        first = batch[0][0]
        self.directory.apply(first, ops)
        return first + len(ops) - 1, sync_done

    # -- applied (event loop) ----------------------------------------------------------------------------

    def _applied(self, last: int, sync_done: int | None) -> None:
        self.applied_seq = last
        if sync_done is not None:
            self.sync_done_seq = sync_done
            self.state = "in-sync"
            log.info("in sync with the live %s at %s", self.live_node_id, self.connector,
                     extra={"event": "ha.backup_in_sync"})
            if self.on_in_sync is not None:
                self.on_in_sync()
            if self.request_failback:
                self.link.send(ReplicaFailback())
        if self.link is not None and not self.link.closed:
            self.link.send(ReplicaAck(last))
        self._maybe_done()

    def _maybe_done(self) -> None:
        stopping = self.stopping
        if stopping is not None and self.applied_seq >= stopping.seq and self.state == "in-sync":
            if stopping.fail_over:
                self._end(Outcome("fail-over", "the live handed over"))
            else:
                self._end(Outcome("live-stopped", "the live stopped without handing over (failover_on_shutdown "
                                                  "= false)"))

    def describe(self) -> dict:
        return {
            "live_node_id": self.live_node_id,
            "live_connector": self.connector,
            "state": self.state,
            "received_seq": self.received_seq,
            "applied_seq": self.applied_seq,
            "lag_operations": max(0, self.received_seq - self.applied_seq),
            "bytes_received": self.bytes_received,
        }
