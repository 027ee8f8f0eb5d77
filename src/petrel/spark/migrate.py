"""Sending a data directory's messages to a live broker the way the drainer does, from anywhere.

``petrel spark recover`` runs this on Spark executors, one call per chunk of one queue. It
speaks the drainer's migration protocol (``petrel.ha.scale_down``) over one CORE link:
MIGRATION_BEGIN with the cluster credentials and the *origin* node ID (the data directory's
``server.lock``), MIGRATE_QUEUE to create the queue as it was there, then MIGRATE_BATCH frames
(large bodies as FORWARD + SEND_CHUNK, streamed from ``large-messages/``). Each message
carries the drainer's duplicate ID, ``<origin node>:<seq>@<queue id>``, which the
target keeps in its ``MIGRATION.<origin>`` cache: a message the drainer (or an earlier
recover) already moved is dropped there, so nothing arrives twice.

A message is re-read from its journal record or page record (``file``/``offset`` of the
resolved view), so its properties keep their types (the Spark views carry them as strings).
Nothing here imports Spark.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from petrel.client.link import PeerLink, open_link, stream_body
from petrel.client.tls import client_context  # an ssl:// target: its URL's TLS options
from petrel.client.url import parse_url
from petrel.codec.core import Connected, CreateSession, Error, Result, SendConfirm, SendFailed
from petrel.codec.core.cluster import Forward, MigrateBatch, Migrated, MigrateQueue, MigrationBegin
from petrel.core.message import DUPLICATE_ID, Message, decode_message
from petrel.core.recovery import QUEUE_ATTRIBUTES
from petrel.core.remote import INSTANCE, MIGRATED_DELIVERY_COUNT, bridge_dup_id, migration_dup_id, with_origin
from petrel.storage.file_store import unpack
from petrel.storage.journal.records import decode_raw

__all__ = ["MessageRef", "MigrateFailed", "QueueSpec", "Sent", "migrate_chunk", "migration_dup_id", "probe",
           "read_queue_spec", "read_stored_message"]

log = logging.getLogger("petrel.spark.migrate")

BEGIN, SESSION = 1, 2
SESSION_ID = 1
BATCH = 256  # messages in one MIGRATE_BATCH at most (as the drainer) ...
BATCH_BYTES = 512 * 1024  # ... and bytes of bodies
MAX_FRAME = 100 * 1024 * 1024 + 65536
_RECORD_LENGTH = struct.Struct("<I")  # at byte 2 of a journal record's header
_PAGE_HEAD = struct.Struct("<II")  # a page record: u32 length, u32 crc32


class MigrateFailed(Exception):
    """The target could not be reached, refused the migration or a message, or went silent."""


@dataclass(frozen=True)
class QueueSpec:
    """A queue as its bindings record describes it (what MIGRATE_QUEUE needs)."""

    queue_id: int
    name: str
    address: str
    routing_type: int
    filter: str | None = None
    client_id: str | None = None
    subscription: str | None = None
    attributes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MessageRef:
    """One message held by a queue: where its record is (a row of the resolved view)."""

    data_dir: str
    source: str  # journal or page
    file: str  # relative to data_dir
    offset: int
    message_id: int
    seq: int  # in its queue: with the origin and the queue, the message's duplicate ID
    delivery_count: int = 0


@dataclass
class Sent:
    """What one chunk did: ``confirmed`` messages the target took (new or already there)."""

    queue: str
    confirmed: int = 0
    bytes: int = 0


# -- reading stored records ---------------------------------------------------------------------------


def _segment_of(file: str) -> int:
    """The segment id in a journal file's name (``journal/petrel-data-12.pj``)."""
    return int(os.path.basename(file).rsplit("-", 1)[1].split(".", 1)[0])


class _Files:
    """Open files by path, so a chunk's messages do not open their segment once each."""

    def __init__(self) -> None:
        self.open: dict[str, object] = {}

    def get(self, path: str):
        f = self.open.get(path)
        if f is None:
            f = self.open[path] = open(path, "rb")
        return f

    def close(self) -> None:
        for f in self.open.values():
            f.close()
        self.open.clear()


def _read_journal_body(path: str, offset: int, segment: int, files: _Files | None = None) -> bytes:
    own = files is None
    files = files or _Files()
    try:
        f = files.get(path)
        f.seek(offset)
        head = f.read(16)
        if len(head) < 16:
            raise MigrateFailed(f"{path}: no record at offset {offset}")
        length = _RECORD_LENGTH.unpack_from(head, 2)[0]
        record = head + f.read(max(length - 16, 0))
    finally:
        if own:
            files.close()
    try:
        return decode_raw(record, 0, segment)[5]
    except Exception as exc:
        raise MigrateFailed(f"{path}: the record at offset {offset} does not read back ({exc}); "
                            "did the directory change since it was read?") from None


def read_stored_message(ref: MessageRef, files: _Files | None = None) -> Message:
    """The message as stored (typed properties; a large one names its file, body empty).
    ``files``: open files to reuse (the caller closes them)."""
    path = os.path.join(ref.data_dir, ref.file)
    if ref.source == "page":
        own = files is None
        files = files or _Files()
        try:
            f = files.get(path)
            f.seek(ref.offset)
            length, _crc = _PAGE_HEAD.unpack(f.read(_PAGE_HEAD.size))
            payload = f.read(length)
        finally:
            if own:
                files.close()
        _seq, _durable, message_id, encoded, *_ = unpack(payload)
        return decode_message(int(message_id), encoded)
    encoded, _refs = unpack(_read_journal_body(path, ref.offset, _segment_of(ref.file), files))
    return decode_message(ref.message_id, encoded)


def read_queue_spec(data_dir: str, file: str, offset: int, queue_id: int) -> QueueSpec:
    """A queue's definition from its QUEUE record in the bindings journal."""
    body = _read_journal_body(os.path.join(data_dir, file), offset, _segment_of(file))
    name, address, rt, filt, _auto, client_id, sub, _seq, *rest = unpack(body)
    attributes = {k: v for k, v in (rest[0] if rest else {}).items() if k in QUEUE_ATTRIBUTES}
    return QueueSpec(queue_id, name, address, int(rt), filt, client_id, sub, attributes)


# -- the link -----------------------------------------------------------------------------------------


class _Link:
    """One migration link to the target, its answers as futures."""

    def __init__(self, target: str, origin: str, user: str, password: str, timeout: float) -> None:
        self.target = target.removeprefix("tcp://")
        self.origin = origin
        self.user = user
        self.password = password
        self.timeout = timeout
        self.link: PeerLink | None = None
        self.begun: dict = {}
        self.sent = 0
        self.confirmed = 0
        self.failed: dict[int, str] = {}
        self._answers: dict[int, asyncio.Future] = {}
        self._progress = asyncio.Event()
        self._lost: str | None = None
        self._corr = itertools.count(SESSION + 1)

    async def open(self) -> dict:
        try:
            self.link = await open_link(self, self.target, user=self.user, password=self.password,
                                        ttl_ms=int(self.timeout * 3000), client=f"petrel-spark-recover/{self.origin}",
                                        max_frame_size=MAX_FRAME, timeout=self.timeout,
                                        tls=lambda: client_context(parse_url(self.target).options))
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            raise MigrateFailed(f"cannot reach the target {self.target}: {exc or 'timed out'}") from None
        self.link.watch(self.timeout * 3)
        self.begun = await self._wait(BEGIN)
        self.link.send(CreateSession(SESSION, SESSION_ID, False))
        await self._wait(SESSION)
        return self.begun

    def close(self) -> None:
        if self.link is not None and not self.link.closed:
            self.link.close("done")

    async def ask(self, make) -> dict:
        corr = next(self._corr)
        self.link.send(make(corr))
        return await self._wait(corr)

    async def _wait(self, corr: int) -> dict:
        future = self._answers.setdefault(corr, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(future, self.timeout)
        except asyncio.TimeoutError:
            raise MigrateFailed(self._lost or f"the target {self.target} did not answer within "
                                              f"{self.timeout:.0f}s") from None

    async def all_confirmed(self) -> None:
        """Wait until the target has answered every message sent (its disk has them)."""
        while self.confirmed < self.sent:
            if self._lost:
                raise MigrateFailed(self._lost)
            self._progress.clear()
            before = self.confirmed
            try:
                await asyncio.wait_for(self._progress.wait(), self.timeout)
            except asyncio.TimeoutError:
                if self.confirmed == before:
                    raise MigrateFailed(f"the target confirmed {self.confirmed} of {self.sent} messages and "
                                        f"nothing more for {self.timeout:.0f}s") from None
        if self._lost and self.confirmed < self.sent:
            raise MigrateFailed(self._lost)

    # LinkOwner
    def link_event(self, link: PeerLink, event: object) -> None:
        kind = type(event)
        if kind is SendConfirm:
            self.confirmed = max(self.confirmed, event.count)
            self._progress.set()
        elif kind is SendFailed:
            self.failed[event.number] = event.message
            self._progress.set()
        elif kind is Connected:
            link.send(MigrationBegin(BEGIN, self.origin, self.user, self.password))
        elif kind is Result:
            future = self._answers.setdefault(event.corr, asyncio.get_running_loop().create_future())
            if future.done():
                return
            if event.code:
                future.set_exception(MigrateFailed(f"the target refused: {event.message}"))
            else:
                future.set_result(dict(event.value or {}))
        elif kind is Error:
            self._lose(f"the target closed the migration: {event.message}")

    def link_lost(self, link: PeerLink, reason: str) -> None:
        self._lose(f"the connection to the target was lost: {reason}")

    def link_writable(self, link: PeerLink, writable: bool) -> None:
        pass

    def _lose(self, reason: str) -> None:
        self._lost = self._lost or reason
        for future in self._answers.values():
            if not future.done():
                future.set_exception(MigrateFailed(reason))
        self._progress.set()


# -- the operations -----------------------------------------------------------------------------------


def probe(target: str, origin: str, user: str, password: str, timeout: float = 10.0) -> dict:
    """MIGRATION_BEGIN and nothing else: the target's answer (``node_id``, ``id_cache_size``)."""
    async def run() -> dict:
        link = _Link(target, origin, user, password, timeout)
        try:
            return await link.open()
        finally:
            link.close()

    return asyncio.run(run())


def migrate_chunk(target: str, origin: str, user: str, password: str, queue: QueueSpec,
                  messages: Iterable[MessageRef], *, timeout: float = 10.0) -> Sent:
    """Send ``messages`` (in this order, all held by ``queue`` of the data directory of node
    ``origin``) to ``target`` as migrated messages, and wait until the target confirmed each.
    Raises MigrateFailed (what was confirmed before is on the target, under its duplicate ID)."""
    return asyncio.run(_migrate(target, origin, user, password, queue, messages, timeout))


async def _migrate(target: str, origin: str, user: str, password: str, queue: QueueSpec,
                   messages: Iterable[MessageRef], timeout: float) -> Sent:
    link = _Link(target, origin, user, password, timeout)
    sent = Sent(queue.name)
    files = _Files()
    try:
        await link.open()
        await link.ask(lambda corr: MigrateQueue(corr, queue.name, queue.address, queue.routing_type, True,
                                                 queue.filter, queue.client_id, queue.subscription,
                                                 dict(queue.attributes)))
        batch: list[Migrated] = []
        size = 0

        def flush() -> None:
            nonlocal batch, size
            if batch:
                link.link.send(MigrateBatch(SESSION_ID, queue.routing_type, [queue.name], batch))
                link.sent += len(batch)
                batch, size = [], 0

        for ref in messages:
            if link.failed or link._lost:
                break
            message = read_stored_message(ref, files)
            properties = with_origin(message.properties, origin, queue.name, ref.seq)
            if DUPLICATE_ID in properties:  # the copies of one send (one per queue) are one instance
                properties.setdefault(INSTANCE, bridge_dup_id(origin, message.id))
            dup = migration_dup_id(origin, queue.queue_id, ref.seq)
            if message.large is None:
                batch.append(Migrated(message.address, message.durable, message.priority, message.expiration,
                                      message.timestamp, message.scheduled, properties, message.body,
                                      ref.delivery_count, dup))
                size += len(message.body)
                sent.bytes += len(message.body)
                if len(batch) >= BATCH or size >= BATCH_BYTES:
                    flush()
                    await link.link.drained()
                continue
            flush()  # what came before goes first
            if ref.delivery_count:
                properties[MIGRATED_DELIVERY_COUNT] = ref.delivery_count
            head = (SESSION_ID, message.address, queue.routing_type, message.durable, message.priority,
                    message.expiration, message.timestamp, message.scheduled, properties)
            path = os.path.join(ref.data_dir, "large-messages", message.large.name)
            try:
                with open(path, "rb") as reader:
                    link.sent += 1
                    await stream_body(link.link, Forward(*head, b"", True, [queue.name], dup), reader)
            except OSError as exc:
                raise MigrateFailed(f"cannot read large message {message.id}: {exc}") from None
            sent.bytes += message.large.size
        flush()
        await link.all_confirmed()
        if link.failed:
            number = min(link.failed)
            raise MigrateFailed(f"the target refused message {number} of {link.sent} for queue {queue.name!r}: "
                                f"{link.failed[number]}")
        sent.confirmed = link.confirmed
        return sent
    finally:
        files.close()
        link.close()
