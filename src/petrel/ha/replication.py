"""The live's side of replication: one backup, fed the store's stream, gating confirmations.

A :class:`Replicator` starts when a backup registers on a CORE connection. It subscribes to
the store's ordered stream of file operations, copies the data directory into the same
stream (in an executor thread: the live keeps serving), and sends everything as REPLICA_OPS
frames. Once the backup acknowledges the end of the copy the pair is *in sync*: from then on
the store's durability gate holds each confirmation until the backup has made durable every
operation written before it (confirmed = on both disks). During the copy confirmations do
not wait for the backup (it could not take over anyway), so a large initial copy never
stalls the live's clients.

If the backup goes, the gate opens (the live carries on alone and says so); with a lock
manager the live first moves the activation sequence on, so that the stale backup can
never activate.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.codec.core.replication import ReplicaOps, ReplicaStopping
from petrel.storage import stream as ops_

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["Replicator", "encode_op", "decode_op"]

log = logging.getLogger("petrel.ha.replication")

FRAME_BYTES = 1 << 20  # operations per REPLICA_OPS frame, by size
COPY_PACE = 8 << 20  # the initial copy waits while this much is still in the socket's buffer
BEHIND_LIMIT = 256 << 20  # bytes the backup may fall behind (socket buffer) before it is dropped


def encode_op(op: object) -> list:
    kind = type(op)
    if kind is ops_.FileWrite:
        return ["write", op.path, op.offset, op.data]
    if kind is ops_.FileCreate:
        return ["create", op.path, op.size, None]
    if kind is ops_.FileRename:
        return ["rename", op.src, op.dst, None]
    if kind is ops_.FileDelete:
        return ["delete", op.path, None, None]
    if kind is ops_.FileTruncate:
        return ["truncate", op.path, op.size, None]
    if kind is ops_.FileLink:
        return ["link", op.src, op.dst, None]
    if kind is ops_.SyncDone:
        return ["sync-done", None, op.manifest_seq, [op.files, op.bytes]]
    raise TypeError(f"no wire form for {kind.__name__}")


def decode_op(item: list) -> object:
    kind, path, a, b = item
    if kind == "write":
        return ops_.FileWrite(path, a, b)
    if kind == "create":
        return ops_.FileCreate(path, a)
    if kind == "rename":
        return ops_.FileRename(path, a)
    if kind == "delete":
        return ops_.FileDelete(path)
    if kind == "truncate":
        return ops_.FileTruncate(path, a)
    if kind == "link":
        return ops_.FileLink(path, a)
    if kind == "sync-done":
        return ops_.SyncDone(a, b[0], b[1])
    raise ValueError(f"unknown replication operation {kind!r}")


def _size(op: object) -> int:
    data = getattr(op, "data", None)
    return 64 + (len(data) if data is not None else 0)


class Replicator:
    """Feeds one backup (``adapter`` is its CORE connection) from ``store``."""

    def __init__(self, store, adapter: CoreAdapter, *, backup_node: str, connector: str,
                 on_lost: Callable[[Replicator, str], None]) -> None:
        self.store = store
        self.stream = store.stream
        self.adapter = adapter
        self.backup_node = backup_node
        self.connector = connector
        self.on_lost = on_lost
        self.loop = asyncio.get_running_loop()
        self.state = "syncing"  # syncing -> in-sync -> lost | stopped
        self.started = time.time()
        self.synced_at: float | None = None
        self.sync_done_seq: int | None = None
        self.sent_seq = 0  # last operation handed to the socket
        self.acked_seq = 0  # last operation the backup has made durable
        self.ops_sent = 0
        self.bytes_sent = 0
        self.copied_bytes = 0
        self._queue: deque[tuple[int, list]] = deque()
        self._queued = 0
        self._cond = threading.Lock()
        self._roomy = threading.Event()  # the socket to the backup has room for more of the copy
        self._roomy.set()
        self._flush_scheduled = False
        self._waiters: deque[tuple[int, Callable[[], None]]] = deque()
        self._subscription = None
        self._copier = None
        self._gated = False
        self.handing_over = False  # the live is stopping: losing this backup now is expected

    # -- start and stop ------------------------------------------------------------------------

    def start(self) -> None:
        self._copier = self.stream.start_sync(self._sink)
        self._subscription = self._copier.subscription
        self.loop.run_in_executor(None, self._copy)
        log.info("replicating to backup %s (%s): initial copy started", self.backup_node, self.connector,
                 extra={"event": "ha.replication_sync"})

    def _copy(self) -> None:
        try:
            self._copier.run(self._pace)
        except Exception as exc:  # the files could not be read: this backup cannot be fed
            log.exception("initial copy to backup %s failed", self.backup_node)
            self.loop.call_soon_threadsafe(self.lose, f"initial copy failed: {exc}")

    def _pace(self) -> bool:
        """Between two chunks of the copy (copier thread): wait while the socket is full."""
        self._roomy.wait(30)
        return self.state in ("lost", "stopped")

    def lose(self, reason: str) -> None:
        """The backup is gone (or cannot be fed): stop streaming and let confirmations through."""
        if self.state in ("lost", "stopped"):
            return
        was = self.state
        self.state = "lost"
        self._unsubscribe()
        self._ungate()
        log.warning("backup %s lost (%s, was %s): the live goes on alone, without a replica", self.backup_node,
                    reason, was, extra={"event": "ha.replica_lost"})
        self.on_lost(self, reason)

    def release_waiters(self) -> None:
        """Confirm everything the lost backup was holding (it is durable here)."""
        while self._waiters:
            _, done = self._waiters.popleft()
            done()

    def stopping(self, fail_over: bool) -> None:
        """The live is stopping: tell the backup after the last operation."""
        self.handing_over = True
        self._flush()
        seq = self.stream.seq
        self.adapter.cluster_send(ReplicaStopping(seq, fail_over))

    def stop(self) -> None:
        if self.state != "lost":
            self.state = "stopped"
        self._unsubscribe()
        self._ungate()
        self.release_waiters()

    def _ungate(self) -> None:
        if self._gated:
            self._gated = False
            self.store.set_gate(None)

    def _unsubscribe(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None
        if self._copier is not None:
            self._copier.cancel()
        with self._cond:
            self._queue.clear()
            self._queued = 0
        self._roomy.set()

    # -- the stream (any thread, under the stream's lock) --------------------------------------------

    def _sink(self, first: int, ops: list) -> None:
        size = sum(_size(op) for op in ops)
        with self._cond:
            if self.state in ("lost", "stopped"):
                return
            self._queue.append((first, ops))
            self._queued += size
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            self.loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._cond:
            self._flush_scheduled = False
            batches = list(self._queue)
            self._queue.clear()
            self._queued = 0
        if self.state in ("lost", "stopped") or not batches:
            return
        frame: list = []
        first = batches[0][0]
        size = 0
        for start, ops in batches:
            for i, op in enumerate(ops):
                seq = start + i
                if not frame:
                    first = seq
                frame.append(encode_op(op))
                size += _size(op)
                if type(op) is ops_.SyncDone:
                    self.sync_done_seq = seq
                if size >= FRAME_BYTES:
                    self._send(first, frame, size)
                    frame, size = [], 0
        if frame:
            self._send(first, frame, size)
        behind = self.behind_bytes()
        if behind > COPY_PACE:
            self._roomy.clear()
            self.loop.call_later(0.005, self._check_room)
        if behind > BEHIND_LIMIT:
            self.adapter.conn.close(after_flush=False)
            self.lose(f"it fell more than {BEHIND_LIMIT >> 20} MiB behind")

    def _check_room(self) -> None:
        if self.state in ("lost", "stopped") or self.behind_bytes() <= COPY_PACE:
            self._roomy.set()
        else:
            self.loop.call_later(0.005, self._check_room)

    def behind_bytes(self) -> int:
        transport = getattr(self.adapter.conn, "transport", None)
        return transport.get_write_buffer_size() if transport is not None else 0

    def _send(self, first: int, frame: list, size: int) -> None:
        self.adapter.cluster_send(ReplicaOps(first, frame))
        self.sent_seq = first + len(frame) - 1
        self.ops_sent += len(frame)
        self.bytes_sent += size

    # -- the backup's acknowledgements (event loop) -----------------------------------------------

    def acked(self, seq: int) -> None:
        if self.state in ("lost", "stopped"):
            return
        self.acked_seq = max(self.acked_seq, seq)
        if self.state == "syncing" and self.sync_done_seq is not None and seq >= self.sync_done_seq:
            self.state = "in-sync"
            self.synced_at = time.time()
            self.store.set_gate(self)
            self._gated = True
            log.info("backup %s is in sync after %.1fs (%d operations, %.1f MiB)", self.backup_node,
                     self.synced_at - self.started, self.ops_sent, self.bytes_sent / (1 << 20),
                     extra={"event": "ha.replica_in_sync"})
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.acked_seq:
            waiters.popleft()[1]()

    # -- the durability gate (event loop) ----------------------------------------------------------

    def after(self, done: Callable[[], None], failed: Callable[[BaseException], None] | None = None) -> None:
        """``done`` once the backup has everything written so far (the store calls this when a
        sync is durable here)."""
        seq = self.stream.seq
        if self.state != "in-sync" or seq <= self.acked_seq:
            done()
            return
        self._waiters.append((seq, done))

    # -- figures -------------------------------------------------------------------------------------

    def describe(self) -> dict:
        seq = self.stream.seq
        return {
            "backup_node_id": self.backup_node,
            "backup_connector": self.connector,
            "state": self.state,
            "operations_sent": self.ops_sent,
            "bytes_sent": self.bytes_sent,
            "lag_operations": max(0, seq - self.acked_seq),
            "waiting_confirmations": len(self._waiters),
            "synced_at": (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.synced_at))
                          if self.synced_at else None),
        }
