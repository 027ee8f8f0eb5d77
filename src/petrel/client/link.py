"""The broker-to-broker CORE link: the connecting end of a CORE connection to a peer.

`PeerLink` only moves bytes: it feeds the sans-IO codec, hands every decoded event to its
owner and batches outgoing frames into one write per loop turn. What the frames mean is the
owner's business: a cluster `Bridge`, a replicating backup's `ReplicaClient`, a quorum vote.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from petrel.codec.core import CoreConnection, Role
from petrel.codec.errors import ProtocolError

__all__ = ["PeerLink", "LinkOwner"]

log = logging.getLogger("petrel.client.link")


class LinkOwner(Protocol):
    def link_event(self, link: PeerLink, event: object) -> None: ...

    def link_lost(self, link: PeerLink, reason: str) -> None: ...

    def link_writable(self, link: PeerLink, writable: bool) -> None: ...


class PeerLink(asyncio.Protocol):
    def __init__(self, owner: LinkOwner, max_frame_size: int) -> None:
        self.owner = owner
        self.codec = CoreConnection(Role.CLIENT, max_frame_size=max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._reason = "connection closed"
        self.last_read = 0.0  # loop time of the last bytes from the peer
        self._writable = asyncio.Event()
        self._writable.set()

    # -- asyncio -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.last_read = asyncio.get_running_loop().time()

    def data_received(self, data: bytes) -> None:
        self.last_read = asyncio.get_running_loop().time()
        codec = self.codec
        try:
            codec.receive_data(data)
            while not self.closed:
                events = codec.next_events()
                if not events:
                    break
                for event in events:
                    self.owner.link_event(self, event)
                    if self.closed:
                        break
        except ProtocolError as exc:
            self.close(f"protocol error from the peer: {exc}")

    def eof_received(self) -> bool:
        self._reason = "the peer closed the connection"
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()  # nobody waits on a dead socket
        reason = self._reason if exc is None else f"{exc.__class__.__name__}: {exc}"
        self.owner.link_lost(self, reason)

    def pause_writing(self) -> None:
        self._writable.clear()
        self.owner.link_writable(self, False)

    def resume_writing(self) -> None:
        self._writable.set()
        self.owner.link_writable(self, True)

    async def drained(self) -> None:
        """Hand what is buffered to the socket and wait while the socket's buffer is full."""
        self.flush()
        if not self.closed:
            await self._writable.wait()

    # -- sending -------------------------------------------------------------------------------

    def send(self, event: object) -> None:
        self.send_bytes(self.codec.send(event))

    def send_bytes(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed and self.transport is not None:
            out, self._out = self._out, []
            self.transport.write(b"".join(out))

    def close(self, reason: str, *, abort: bool = False) -> None:
        if self.closed:
            return
        self._reason = reason
        self.flush()
        self.closed = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
