"""One object per socket: protocol detection, buffered writes, flow control.

The connection owns the transport; a protocol adapter (chosen from the first bytes) owns the
codec and talks to the post office. Writes made while handling a read (or from a dispatch)
are coalesced into one `transport.write` per loop iteration. Reading is paused and resumed
only through `Connection.reads` (`server/flow.py`), which counts the reasons (a blocked
producer, a hold behind a large body or a grouping decision), so one reason lifting never
resumes reads another still needs paused.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from petrel.server import protocols
from petrel.server.flow import ReadFlow
from petrel.server.tls import peer_subject

if TYPE_CHECKING:
    from petrel.server.broker import Broker

log = logging.getLogger("petrel.server.connection")

# Streamed bodies (large messages) are read in chunks of this size, and a connection writes
# at most STREAM_BUDGET bytes of them per loop turn before letting others run.
STREAM_CHUNK = 256 * 1024
STREAM_BUDGET = 4 * 1024 * 1024

FLUSH_AT = 256 * 1024  # bytes gathered before they go to the transport without waiting

# TCP keepalive on every accepted socket: a peer whose host died (no FIN, no RST) is found
# within about KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES seconds, and the messages
# its consumers held go back to their queues, while a live client that is merely silent (a
# STOMP consumer without heart-beats) is kept: its kernel answers the probes.
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_PROBES = 3

# A closing connection sends FIN after its last bytes, then reads and drops what the client
# still sends for up to LINGER seconds before it lets go of the socket. Closing with the
# client's data unread would send RST instead, and a client still sending (a large body)
# could lose the last frame it was sent, the ERROR that says why.
LINGER = 2.0


def keep_alive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        option = getattr(socket, name, None)
        if option is not None:  # Linux names; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


class BodySource(Protocol):
    """A body read in chunks (`storage.large.BodyReader`): b"" at its end."""

    def read(self, n: int) -> bytes: ...
    def close(self) -> None: ...


class Adapter(Protocol):
    def data_received(self, data: bytes) -> None: ...
    def connection_lost(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker, protocols: tuple[str, ...]) -> None:
        self.broker = broker
        self.protocols = protocols
        self.transport: asyncio.Transport | None = None
        self.adapter: Adapter | None = None
        self.peer = "?"
        self.peer_subject: str | None = None  # TLS: the verified client certificate's subject (RFC 4514)
        self._head = b""
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self.closed = False
        self.writing_paused = False
        self.reads = ReadFlow(self)  # the one owner of pausing and resuming reads (server/flow.py)
        # While a body streams: what is still to write, in order (bytes and body sources).
        self._backlog: deque | None = None
        self._pump_scheduled = False
        self._close_when_drained = False
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_subject = peer_subject(transport)
        if not self.broker.limits.admit(self):  # max_connections, open files (petrel.server.limits)
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                keep_alive(sock)
            except OSError as exc:  # not a TCP socket, or options refused: the connection still works
                log.debug("no TCP keepalive for %s: %s", self.peer, exc)
        self.broker.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return  # lingering: what the client still sends is dropped
        adapter = self.adapter
        if adapter is not None:
            adapter.data_received(data)
            self.broker.limits.account(self)  # unfinished frames' bytes (petrel.server.limits)
            return
        self._head += data
        kind = protocols.detect(self._head, self.protocols)
        if kind is None:
            return
        if kind == "unknown":
            log.info("closing %s: unrecognised protocol (first bytes %r)", self.peer, self._head[:16])
            self.close()
            return
        self.adapter = self.broker.make_adapter(kind, self)
        head, self._head = self._head, b""
        self.adapter.data_received(head)
        self.broker.limits.account(self)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._linger is not None:
            self._linger.cancel()
        self._release()

    def _release(self) -> None:
        """The broker forgets the connection: its adapter cleans up (once)."""
        self._drop_backlog()
        self.broker.connections.discard(self)
        self.broker.limits.release(self)
        adapter, self.adapter = self.adapter, None
        if adapter is not None:
            try:
                adapter.connection_lost()
            except Exception:
                log.exception("error cleaning up connection %s", self.peer)

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.adapter is not None:
            self.adapter.pause()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._backlog is not None:
            self._pump()  # the adapter resumes once the streamed body is all out
            return
        if self.adapter is not None:
            self.adapter.resume()

    # -- output ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self._backlog is not None:  # behind a body being streamed
            self._backlog.append(data)
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= FLUSH_AT:
            # Hand a large batch to the transport now: past its high-water mark it pauses us
            # (pause_writing), which stops dispatch instead of rendering a whole backlog here.
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed and self.transport is not None:
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._out_bytes = 0
            self.transport.write(data)
            if self.writing_paused:  # the client reads slower than we write
                self.broker.limits.check_writes(self)

    def write_stream(self, head: bytes, body: BodySource, tail: bytes) -> None:
        """Write `head`, then `body` in chunks only as fast as the peer takes them, then `tail`.

        Writes made meanwhile wait behind it, and the adapter is paused (no new deliveries)
        until it is all out: a connection holds about one chunk of a body, plus what the
        transport buffers below its high-water mark, however large the body.
        """
        if self.closed:
            body.close()
            return
        if self._backlog is None:
            self._backlog = deque()
            self._out.append(head)
        else:
            self._backlog.append(head)
        self._backlog.append(body)
        self._backlog.append(tail)
        if self.adapter is not None:
            self.adapter.pause()
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Write the backlog while the transport takes it (see `write_stream`)."""
        self._pump_scheduled = False
        backlog = self._backlog
        if backlog is None or self.closed or self.transport is None:
            return
        self.flush()
        write = self.transport.write
        budget = STREAM_BUDGET
        try:
            while backlog and not self.writing_paused:
                item = backlog[0]
                if isinstance(item, (bytes, bytearray, memoryview)):
                    backlog.popleft()
                    write(item)
                    budget -= len(item)
                else:
                    chunk = item.read(STREAM_CHUNK)
                    if not chunk:
                        backlog.popleft()
                        item.close()
                        continue
                    write(chunk)
                    budget -= len(chunk)
                if budget <= 0:
                    if not self._pump_scheduled:
                        self._pump_scheduled = True
                        self._loop.call_soon(self._pump)
                    return
        except Exception:
            log.exception("cannot stream a message body to %s; closing the connection", self.peer)
            self.close(after_flush=False)
            return
        if backlog or self._backlog is not backlog:
            return  # paused by the transport: resume_writing picks up
        self._backlog = None
        if self._close_when_drained:
            self.close()
        elif not self.writing_paused and self.adapter is not None:
            self.adapter.resume()

    def _drop_backlog(self) -> None:
        backlog, self._backlog = self._backlog, None
        for item in backlog or ():
            if not isinstance(item, (bytes, bytearray, memoryview)):
                item.close()

    def close(self, *, after_flush: bool = True) -> None:
        transport = self.transport
        if self.closed:
            if not after_flush and self._linger is not None and transport is not None:
                transport.abort()  # stop lingering now (the broker is stopping)
            return
        if after_flush and self._backlog is not None:
            self._close_when_drained = True  # after the streamed body and what follows it
            return
        if after_flush:
            self.flush()
        self.closed = True
        self._drop_backlog()
        if transport is None:
            return
        if not after_flush:
            transport.abort()
        elif transport.can_write_eof() and not transport.is_closing():
            transport.write_eof()  # FIN after what is written; the client's close ends it (eof_received)
            self._linger = self._loop.call_later(LINGER, transport.abort)
            self._loop.call_soon(self._release)  # as soon as after a plain close, not after the linger
        else:
            transport.close()

    def call_later(self, delay: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_later(delay, fn)
