"""Large messages over STOMP: bodies streamed to and from their files, never held whole.

In: the codec announces a frame whose body is over `min_large_message_size` with a
`FrameHeader`, hands the body over in `BodyChunk`s and closes it with a `FrameEnd`
(`codec/stomp/parser.py`). A SEND's chunks go straight into `<id>.msg.tmp`. At the end a
durable body is fsynced and renamed in a worker thread; meanwhile the connection stops
reading and handling frames, so what the client sent next still happens after this
message, in order. Then the SEND is handled like any other, its message naming the file.

Out: a MESSAGE is written as its head, then the file in chunks as the socket drains, then
the NUL (`Connection.write_stream`), so ten consumers of 50 MiB messages hold a few
chunks each, not 500 MiB.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from petrel.codec.stomp.frames import BodyChunk, Frame, FrameEnd, FrameHeader
from petrel.codec.stomp.writer import BODY_END
from petrel.storage.large import LargeBodyMissing, LargeWriter

if TYPE_CHECKING:
    from petrel.core.message import Message
    from petrel.server.adapters.stomp import StompAdapter

log = logging.getLogger("petrel.server.stomp")


class LargeSends:
    """Receives the large SENDs of one STOMP connection."""

    __slots__ = ("adapter", "header", "writer", "finishing")

    def __init__(self, adapter: StompAdapter) -> None:
        self.adapter = adapter
        self.header: FrameHeader | None = None  # the streamed frame now arriving
        self.writer: LargeWriter | None = None  # its body's file (SEND only)
        self.finishing: LargeWriter | None = None  # being fsynced in a worker thread

    def on_event(self, event: FrameHeader | BodyChunk | FrameEnd) -> None:
        if type(event) is BodyChunk:
            if self.writer is not None:
                self.writer.write(event.data)
        elif type(event) is FrameHeader:
            self.header = event
            if event.command == "SEND":
                adapter = self.adapter
                self.writer = adapter.broker.large.create(adapter.broker.store.next_id())
                adapter.session.track_large(self.writer)  # dropped with the connection while it arrives
        else:
            header, writer = self.header, self.writer
            self.header = self.writer = None
            if writer is None:  # only a SEND's body means anything
                self.adapter.handle(Frame(header.command, header.headers))
            else:
                self.adapter.session.untrack_large(writer)
                self._finish(header, writer)

    def whole(self, frame: Frame) -> None:
        """A SEND that arrived whole yet is over the limit (no content-length): to a file too."""
        self.on_event(FrameHeader(frame.command, frame.headers, len(frame.body)))
        self.on_event(BodyChunk(frame.body))
        self.on_event(FrameEnd(frame.command))

    def _finish(self, header: FrameHeader, writer: LargeWriter) -> None:
        adapter = self.adapter
        durable = header.headers.get("persistent", "false").lower() == "true"
        if not (durable and adapter.broker.large.sync):
            try:
                body = writer.finish(durable=False)
            except BaseException:
                writer.abort()
                raise
            adapter.send_large(header.headers, writer.message_id, body)
            return
        # fsync off the loop; this connection waits, in order, until the body is safe
        adapter.hold()
        self.finishing = writer
        future = asyncio.get_running_loop().run_in_executor(None, writer.finish)
        future.add_done_callback(lambda f: self._finished(header, writer, f))

    def _finished(self, header: FrameHeader, writer: LargeWriter, future: asyncio.Future) -> None:
        self.finishing = None
        adapter = self.adapter
        try:
            body = future.result()
        except Exception as exc:
            log.error("cannot store a large message body from %s: %s", adapter.conn.peer, exc)
            writer.abort()
            reason = f"cannot store the message body: {exc}"
            adapter.resume_held(lambda: adapter.error(reason))
            return
        if adapter.conn.closed:  # the client left meanwhile: nothing routed, nothing kept
            adapter.broker.large.delete(body)
            return
        adapter.resume_held(lambda: adapter.send_large(header.headers, writer.message_id, body))

    def abort(self) -> None:
        """The connection is gone: drop a body still arriving."""
        writer, self.writer, self.header = self.writer, None, None
        if writer is not None:
            writer.abort()


def deliver_large(adapter: StompAdapter, headers: dict[str, str], message: Message) -> None:
    """Write a MESSAGE whose body streams from its file."""
    body = message.large
    try:
        reader = adapter.broker.large.open(body)
    except LargeBodyMissing as exc:
        log.error("message %s cannot be delivered whole: %s", message.id, exc, extra={"event": "large.missing"})
        headers["petrel-body-missing"] = "true"
        adapter.conn.write(adapter.codec.send(Frame("MESSAGE", headers)))
        return
    head = adapter.codec.send_head(Frame("MESSAGE", headers), body.size)
    adapter.conn.write_stream(head, reader, BODY_END)
