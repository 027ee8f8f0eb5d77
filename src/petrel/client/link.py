"""The broker-to-broker CORE link: the connecting end of a CORE connection to a peer.

`open_link` connects and says CONNECT (versions, capabilities, credentials, TTL); the link
answers the peer's PINGs itself and, with `watch`, drops a peer silent for longer than a
limit. Otherwise `PeerLink` only moves bytes: it feeds the sans-IO codec, hands every other
decoded event to its owner and batches outgoing frames into one write per loop turn. What
the frames mean is the owner's business: a cluster `Bridge`, a replicating backup's
`ReplicaClient`, a quorum vote.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Protocol

import uuid

from petrel.cluster.config import connector_tls, parse_connector
from petrel.codec.core import CAPABILITIES, PROTOCOL_VERSIONS, Connect, CoreConnection, Ping, Pong, Role, SendChunk
from petrel.codec.errors import ProtocolError

__all__ = ["PeerLink", "LinkOwner", "open_link", "stream_body"]

LARGE_CHUNK = 256 * 1024

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
                    if type(event) is Ping:
                        self.send(Pong(event.nonce))
                        continue
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


    def watch(self, limit: float, on_silent=None) -> None:
        """Close the link once the peer has been silent for ``limit`` seconds (it pings a third of
        our TTL), calling ``on_silent(link, limit)`` first when given."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self.last_read > limit:
            if on_silent is not None:
                on_silent(self, limit)
            self.close(f"no traffic from the peer for {limit:.1f}s", abort=True)
            return
        loop.call_later(max(min(limit / 4, 0.25), 0.05), self.watch, limit, on_silent)


async def open_link(owner: LinkOwner, connector: str, *, user: str, password: str, ttl_ms: int,
                    client: str, max_frame_size: int, timeout: float,
                    tls: Callable[[], ssl.SSLContext] | None = None) -> PeerLink:
    """Connect to ``connector`` (``host:port``, or ``ssl://host:port`` over TLS with the context
    ``tls()`` gives: the broker's `link_context`) and say CONNECT; the CONNECTED (or ERROR) reaches
    the owner as an event. Raises OSError (ssl.SSLError included), asyncio.TimeoutError or
    ValueError (a bad connector)."""
    host, port = parse_connector(connector)
    context = None
    if connector_tls(connector):
        if tls is None:
            raise ValueError(f"connector {connector}: TLS links need the broker's ssl_* settings")
        context = tls()
    loop = asyncio.get_running_loop()
    _, link = await asyncio.wait_for(
        loop.create_connection(lambda: PeerLink(owner, max_frame_size), host, port, ssl=context,
                               server_hostname=host if context is not None else None,
                               ssl_handshake_timeout=timeout if context is not None else None), timeout)
    link.send(Connect(list(PROTOCOL_VERSIONS), list(CAPABILITIES), user, password, None, ttl_ms, uuid.uuid4().hex,
                      client))
    return link


async def stream_body(link: PeerLink, first: object, reader, *, session: int = 1, chunk: int = LARGE_CHUNK) -> None:
    """A large body after its first frame (a FORWARD with ``more``): SEND_CHUNK frames, one at a
    time as the socket drains, so the body is never whole in memory. ``reader``: ``read(n)``."""
    link.send(first)
    while not link.closed:
        await link.drained()
        data = reader.read(chunk)
        link.send(SendChunk(session, data, bool(data)))
        if not data:
            break
