"""`TcpProxy`: a fault-injecting TCP forwarder on 127.0.0.1, for tests.

It runs its own asyncio loop in a background thread, so synchronous tests (and any
other thread) can put it between a client and a broker, or between two brokers, and
break the link on demand (nats ``netProxy``)::

    with TcpProxy("127.0.0.1", broker_port) as proxy:
        client = connect(("127.0.0.1", proxy.port))
        proxy.cut()     # every proxied connection is reset; new ones are closed at once
        proxy.heal()    # forward again
        proxy.freeze()  # a silent partition: nothing moves, nothing is closed
        proxy.heal()    # the held bytes flow on
        proxy.freeze(replies_only=True)  # what the target sends back is held, the rest flows

Every control method returns once the loop has applied it: after ``cut()`` no proxied
connection is open, after ``freeze()`` no further byte is forwarded.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["TcpProxy"]

log = logging.getLogger(__name__)

_CHUNK = 65536
#: How long a control call waits for the loop thread before giving up.
_CALL_TIMEOUT = 10.0


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN, and drop anything unsent."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed by the peer
    writer.transport.abort()


class _Link:
    """One proxied connection: the client's side, and the target's once connected."""

    def __init__(self, client: asyncio.StreamWriter, task: asyncio.Task) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.task = task

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _reset(writer)
        self.task.cancel()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port``, with faults on demand."""

    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_port = listen_port
        self.bytes_forwarded = 0
        self._links: set[_Link] = set()
        self._cut = False
        self._flowing: asyncio.Event | None = None
        self._replying: asyncio.Event | None = None  # target -> client (cleared with replies_only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._port: int | None = None

    # -- life cycle (any thread) ---------------------------------------------------------

    @property
    def port(self) -> int:
        """The listening port (known once started)."""
        if self._port is None:
            raise RuntimeError("TcpProxy.port: the proxy is not started; call start() first")
        return self._port

    @property
    def connections(self) -> int:
        """Proxied connections open now."""
        return len(self._links)

    def start(self) -> TcpProxy:
        if self._thread is not None:
            raise RuntimeError("TcpProxy.start: already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"tcp-proxy->{self.target_host}:{self.target_port}")
        self._thread.start()
        try:
            self._call(self._open())
        except BaseException:
            self._halt()
            raise
        log.debug("proxy 127.0.0.1:%d -> %s:%d started", self._port, self.target_host, self.target_port)
        return self

    def stop(self) -> None:
        """Reset every connection, stop listening and end the thread (idempotent)."""
        if self._thread is None:
            return
        try:
            self._call(self._close())
        finally:
            self._halt()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults (any thread) -------------------------------------------------------------

    def cut(self) -> None:
        """Reset every proxied connection, both sides; refuse new ones until `heal()`."""
        self._call(self._do_cut())

    def freeze(self, *, replies_only: bool = False) -> None:
        """Stop forwarding in both directions (or only from the target back to the client)
        without closing anything; data is held."""
        self._call(self._do_freeze(replies_only))

    def heal(self) -> None:
        """Undo `cut()` and `freeze()`: accept, connect and forward again."""
        self._call(self._do_heal())

    # -- inside the loop -----------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        if self._loop is None or self._thread is None:
            coro.close()
            raise RuntimeError("TcpProxy: not started; call start() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CALL_TIMEOUT)

    def _halt(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(_CALL_TIMEOUT)
        if loop is not None and not loop.is_running():
            loop.close()

    async def _open(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._replying = asyncio.Event()
        self._replying.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset_all()
        if self._server is not None:
            await self._server.wait_closed()

    async def _do_cut(self) -> None:
        self._cut = True
        await self._reset_all()
        log.debug("proxy :%d cut", self._port)

    async def _do_freeze(self, replies_only: bool = False) -> None:
        self._replying.clear()
        if not replies_only:
            self._flowing.clear()
        log.debug("proxy :%d frozen", self._port)

    async def _do_heal(self) -> None:
        self._cut = False
        self._flowing.set()
        self._replying.set()
        log.debug("proxy :%d healed", self._port)

    async def _reset_all(self) -> None:
        links = list(self._links)
        for link in links:
            link.reset()
        if links:
            await asyncio.gather(*(link.task for link in links), return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            _reset(writer)
            return
        link = _Link(writer, asyncio.current_task())
        self._links.add(link)
        try:
            await self._flowing.wait()  # a frozen link connects nowhere until healed
            try:
                up_reader, link.upstream = await asyncio.open_connection(self.target_host, self.target_port)
            except OSError as exc:
                log.debug("proxy :%d cannot reach %s:%d: %s", self._port, self.target_host, self.target_port, exc)
                _reset(writer)
                return
            await asyncio.gather(self._pump(reader, link.upstream, link, self._flowing),
                                 self._pump(up_reader, writer, link, self._replying))
            link.close()
        except asyncio.CancelledError:
            pass  # reset by cut() or stop(): the sockets are already gone
        finally:
            self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link,
                    flowing: asyncio.Event) -> None:
        """Copy one direction until EOF, pausing (holding the data) while `flowing` is clear."""
        try:
            while True:
                await flowing.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await flowing.wait()
                self.bytes_forwarded += len(data)  # before the write: the peer may read it at once
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
        except (ConnectionError, OSError):
            link.reset()
