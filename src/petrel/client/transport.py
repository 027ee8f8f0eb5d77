"""One socket to one broker: the CORE codec behind an asyncio protocol.

Writes are gathered and handed to the socket once per loop iteration, or at once when
64 KiB are waiting (so a producer or consumer that does not yield still keeps the pipe
full). Each received chunk is decoded whole and its events handed to the owner in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from petrel.codec.core import CoreConnection, Event, Role
from petrel.codec.errors import ProtocolError

__all__ = ["Transport", "FLUSH_BYTES"]

log = logging.getLogger("petrel.client.transport")

FLUSH_BYTES = 64 * 1024
CLIENT_MAX_FRAME = 256 * 1024 * 1024


class Transport(asyncio.Protocol):
    """``on_event(transport, event)`` gets every event; ``on_lost(transport, exc)`` once at the end."""

    def __init__(
        self,
        on_event: Callable[[Transport, Event], None],
        on_lost: Callable[[Transport, BaseException | None], None],
        endpoint: Any,
    ) -> None:
        self.codec = CoreConnection(Role.CLIENT, max_frame_size=CLIENT_MAX_FRAME)
        self.endpoint = endpoint
        self._on_event = on_event
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.closed = False
        #: The connection generation this socket serves (`AsyncConnection._epoch`, set when it
        #: becomes the live one): delivery numbers mean something only on their own socket.
        self.epoch = 0
        self.last_read = time.monotonic()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._scheduled = False
        self.made = self.loop.create_future()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.made.done():
            self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        codec = self.codec
        on_event = self._on_event
        try:
            codec.receive_data(data)
            while not self.closed:
                events = codec.next_events()
                if not events:
                    break
                for event in events:
                    on_event(self, event)
                    if self.closed:
                        break
        except ProtocolError as exc:
            log.warning("CORE protocol error from %s: %s", self.endpoint, exc.message)
            self.abort()
        except Exception:
            log.exception("internal error handling data from %s; dropping the connection", self.endpoint)
            self.abort()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out.clear()
        if not self.made.done():
            self.made.set_exception(ConnectionError(f"connection to {self.endpoint} lost"))
        self._on_lost(self, exc)

    # -- output ---------------------------------------------------------------------------------

    def send(self, event: Event) -> None:
        """Encode and queue ``event`` (dropped if the socket is gone)."""
        if self.closed:
            return
        self.write(self.codec.send(event))

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= FLUSH_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.flush)

    def send_now(self, event: Event) -> None:
        """Queue ``event`` and write everything queued now (credit that unblocks the broker)."""
        if self.closed:
            return
        self._out.append(self.codec.send(event))
        self.flush()

    def flush(self) -> None:
        self._scheduled = False
        out = self._out
        if not out or self.closed or self.transport is None:
            return
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        self._out_bytes = 0
        self.transport.write(data)

    def close(self) -> None:
        """Flush, then close gracefully."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection now (protocol error, silent peer)."""
        self.closed = True
        self._out.clear()
        if self.transport is not None:
            self.transport.abort()
