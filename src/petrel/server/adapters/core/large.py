"""Large messages over CORE: bodies streamed to and from their files, never held whole.

In: a SEND announcing ``more`` opens `<id>.msg.tmp` and every SEND_CHUNK goes straight into
it (a SEND over `min_large_message_size` that came whole goes to a file too). At the last
chunk a durable body is fsynced and renamed in a worker thread while the connection stops
reading and handling frames, so what the client sent next still happens after this
message; then the message is routed naming its file.

Out: a DELIVER with an empty body and ``more``, then the file as DELIVER_CHUNK frames
written only as fast as the socket drains (`Connection.write_stream`), so a consumer of a
50 MiB message costs the broker a chunk or two, not 50 MiB.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from petrel.codec.core import CoreConnection, Deliver, DeliverChunk, ErrorCode, Send
from petrel.server.adapters.core.session import Fatal
from petrel.storage.large import BodyReader, LargeBodyMissing, LargeWriter

if TYPE_CHECKING:
    from petrel.core.message import Message
    from petrel.core.queue import MessageReference
    from petrel.server.adapters.core.adapter import CoreAdapter
    from petrel.server.adapters.core.session import CoreConsumer, ServerSession

__all__ = ["start", "chunk", "abort", "deliver", "read_whole", "BODY_MISSING"]

log = logging.getLogger("petrel.server.core")

#: Property set on a delivered message whose large-message file is gone.
BODY_MISSING = "petrel-body-missing"


def start(adapter: CoreAdapter, session: ServerSession, e: Send) -> None:
    """The first frame of a large message: its body begins a file."""
    try:
        writer = adapter.broker.large.create(adapter.broker.store.next_id())
    except OSError as exc:
        raise _cannot_store(adapter, exc) from exc
    session.large = e
    session.large_writer = writer
    adapter.server_session.track_large(writer)  # dropped with the connection while it arrives
    _write(adapter, session, e.body)
    if not e.more:
        _finish(adapter, session)


def chunk(adapter: CoreAdapter, session: ServerSession, data: bytes, more: bool) -> None:
    _write(adapter, session, data)
    if not more:
        _finish(adapter, session)


def _write(adapter: CoreAdapter, session: ServerSession, data: bytes) -> None:
    try:
        session.large_writer.write(data)
    except OSError as exc:  # a full or failing disk: the client hears why, the file goes
        abort(session)
        raise _cannot_store(adapter, exc) from exc
    except BaseException:
        abort(session)
        raise


def _cannot_store(adapter: CoreAdapter, exc: OSError) -> Fatal:
    log.error("cannot store a large message body from %s: %s", adapter.conn.peer, exc)
    return Fatal(ErrorCode.INTERNAL, f"cannot store the body: {exc}")


def abort(session: ServerSession) -> None:
    """Drop a body still arriving (session closed, connection lost, write failed)."""
    writer, session.large_writer, session.large = session.large_writer, None, None
    if writer is not None:
        writer.abort()


def _finish(adapter: CoreAdapter, session: ServerSession) -> None:
    first, writer = session.large, session.large_writer
    session.large = session.large_writer = None
    adapter.server_session.untrack_large(writer)
    if not (first.durable and adapter.broker.large.sync):
        try:
            body = writer.finish(durable=False)
        except BaseException:
            writer.abort()
            raise
        adapter.route_large(session, first, writer.message_id, body)
        return
    # fsync off the loop; this connection waits, in order, until the body is safe
    adapter.hold()
    future = asyncio.get_running_loop().run_in_executor(None, writer.finish)
    future.add_done_callback(lambda f: _finished(adapter, session, first, writer, f))


def _finished(adapter: CoreAdapter, session: ServerSession, first: Send, writer: LargeWriter,
              future: asyncio.Future) -> None:
    try:
        body = future.result()
    except Exception as exc:
        log.error("cannot store a large message body from %s: %s", adapter.conn.peer, exc)
        writer.abort()
        reason = f"cannot store the body: {exc}"
        adapter.resume_held(lambda: adapter.refuse(session, ErrorCode.INTERNAL, reason))
        return
    if adapter.conn.closed:  # the client left meanwhile: nothing routed, nothing kept
        adapter.broker.large.delete(body)
        return
    adapter.resume_held(lambda: adapter.route_large(session, first, writer.message_id, body))


class _Chunks:
    """A file's body as DELIVER_CHUNK frames, for `Connection.write_stream`."""

    __slots__ = ("reader", "codec", "sid", "cid", "chunk")

    def __init__(self, reader: BodyReader, codec: CoreConnection, sid: int, cid: int, chunk: int) -> None:
        self.reader = reader
        self.codec = codec
        self.sid = sid
        self.cid = cid
        self.chunk = chunk

    def read(self, n: int) -> bytes:
        data = self.reader.read(min(n, self.chunk))
        if not data:
            return b""
        return self.codec.send(DeliverChunk(self.sid, self.cid, data, self.reader.remaining > 0))

    def close(self) -> None:
        self.reader.close()


def deliver(adapter: CoreAdapter, consumer: CoreConsumer, ref: MessageReference, props: dict,
            chunk_size: int) -> None:
    """Send a message whose body is in its file: a head, then the file in chunks.
    ``props`` are the message's properties as CORE can carry them."""
    m = ref.message
    sid, cid = consumer.session.id, consumer.cid
    size = m.large.size

    def head(props: dict, body: bytes, more: bool, length: int) -> bytes:
        return adapter.codec.send(Deliver(sid, cid, ref.seq, ref.delivery_count, m.id, m.address, m.durable,
                                          m.priority, m.expiration, m.timestamp, props, body, length, more))

    try:
        reader = adapter.broker.large.open(m.large)
    except LargeBodyMissing as exc:
        log.error("message %s cannot be delivered whole: %s", m.id, exc, extra={"event": "large.missing"})
        adapter.conn.write(head({**props, BODY_MISSING: True}, b"", False, 0))
        return
    if not adapter.large_ok:  # the client cannot take chunks: the whole body in one frame
        with reader:
            adapter.conn.write(head(props, reader.read(size), False, size))
        return
    adapter.conn.write_stream(head(props, b"", True, size), _Chunks(reader, adapter.codec, sid, cid, chunk_size), b"")


def read_whole(adapter: CoreAdapter, message: Message) -> bytes:
    """The whole body of a large message (for browsing), or b"" if its file is gone."""
    try:
        with adapter.broker.large.open(message.large) as reader:
            return reader.read(message.large.size)
    except LargeBodyMissing:
        return b""
