"""A trivial in-memory STOMP server to measure the load generator's own ceiling.

It stores nothing on disk and does the least a broker can: answers CONNECT,
SUBSCRIBE and receipts, turns each SEND into MESSAGE frames for the subscribers
of its destination (round-robin on ``/queue/``, all of them on ``/topic/``),
keeps queue messages in memory while nobody listens, and drops everything sent
to ``/queue/bench.discard``.  A SUBSCRIBE carrying ``bench-flood:N`` makes it
push N ready-made 1 KiB MESSAGE frames as fast as the socket takes them.

Flow control: while any consumer's socket is backed up, reading from every
other connection pauses.

Run: ``python -m stompbench.sink --port P [--host 127.0.0.1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import time

from .clients import set_nodelay
from .frames import TS_HEADER, body_of

DISCARD = b"/queue/bench.discard"
CHUNK = 128  # frames per write when pumping a backlog or a flood


def _header(buf: bytes, start: int, end: int, name: bytes) -> bytes | None:
    i = buf.find(b"\n" + name + b":", start, end)
    if i < 0:
        return None
    i += len(name) + 2
    return buf[i : buf.find(b"\n", i, end + 1)]


class Subscription:
    __slots__ = ("conn", "destination", "prefix", "flood_left", "flood_template")

    def __init__(self, conn: "SinkConnection", destination: bytes, sub_id: bytes) -> None:
        self.conn = conn
        self.destination = destination
        self.prefix = b"MESSAGE\nsubscription:" + sub_id + b"\nmessage-id:"
        self.flood_left = 0
        self.flood_template = b""


class Sink:
    """Routing state shared by all connections of one server."""

    def __init__(self) -> None:
        self.subscribers: dict[bytes, list[Subscription]] = collections.defaultdict(list)
        self.backlog: dict[bytes, collections.deque[bytes]] = collections.defaultdict(
            collections.deque
        )
        self.turn: dict[bytes, int] = collections.defaultdict(int)
        self.connections: set[SinkConnection] = set()
        self.blocked: set[SinkConnection] = set()
        self.next_id = 0

    def route(self, destination: bytes, rest: bytes, out: dict) -> None:
        """Deliver one SEND (``rest`` = its headers after the command, body, NUL)."""
        if destination == DISCARD:
            return
        subs = self.subscribers.get(destination)
        if destination.startswith(b"/topic/"):
            targets = subs or ()
        elif not subs or self.backlog.get(destination):
            self.backlog[destination].append(rest)
            if subs:
                for s in subs:
                    self.pump(s)
            return
        else:
            k = self.turn[destination] = (self.turn[destination] + 1) % len(subs)
            targets = (subs[k],)
        for s in targets:
            self.next_id += 1
            out.setdefault(s.conn, []).append(s.prefix + b"%d\n" % self.next_id + rest)

    def pump(self, sub: Subscription) -> None:
        """Feed a subscriber from its queue's backlog or its flood until its socket backs up."""
        conn = sub.conn
        backlog = self.backlog.get(sub.destination)
        while not conn.paused and not conn.closed:
            if sub.flood_left:
                n = min(CHUNK, sub.flood_left)
                sub.flood_left -= n
                conn.transport.write((sub.flood_template % time.monotonic_ns()) * n)
            elif backlog:
                frames = []
                for _ in range(min(CHUNK, len(backlog))):
                    self.next_id += 1
                    frames.append(sub.prefix + b"%d\n" % self.next_id + backlog.popleft())
                conn.transport.write(b"".join(frames))
            else:
                return

    def set_blocked(self, conn: "SinkConnection", blocked: bool) -> None:
        was = bool(self.blocked)
        (self.blocked.add if blocked else self.blocked.discard)(conn)
        if bool(self.blocked) != was:
            for c in self.connections:
                if c not in self.blocked and not c.closed:
                    (c.transport.pause_reading if self.blocked else c.transport.resume_reading)()


class SinkConnection(asyncio.Protocol):
    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.transport: asyncio.Transport
        self.buf = b""
        self.paused = False
        self.closed = False
        self.subs: list[Subscription] = []

    def connection_made(self, transport) -> None:
        self.transport = transport
        set_nodelay(transport.get_extra_info("socket"))
        self.sink.connections.add(self)
        if self.sink.blocked:
            transport.pause_reading()

    def connection_lost(self, exc) -> None:
        self.closed = True
        sink = self.sink
        sink.connections.discard(self)
        for s in self.subs:
            lst = sink.subscribers.get(s.destination)
            if lst and s in lst:
                lst.remove(s)
        sink.set_blocked(self, False)

    def pause_writing(self) -> None:
        self.paused = True
        self.sink.set_blocked(self, True)

    def resume_writing(self) -> None:
        self.paused = False
        self.sink.set_blocked(self, False)
        for s in self.subs:
            self.sink.pump(s)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        find, sink = buf.find, self.sink
        out: dict[SinkConnection, list[bytes]] = {}
        mine = out.setdefault(self, [])
        pos, n = 0, len(buf)
        while pos < n:
            if buf[pos] in b"\r\n":
                pos += 1
                continue
            he = find(b"\n\n", pos)
            if he < 0:
                break
            end = find(b"\0", he + 2)
            if end < 0:
                break
            eol = find(b"\n", pos, he + 1)
            command = buf[pos:eol]
            receipt = _header(buf, eol, he, b"receipt")
            if command == b"SEND":
                sink.route(_header(buf, eol, he, b"destination") or b"", buf[eol + 1 : end + 1], out)
            elif command == b"SUBSCRIBE":
                self._subscribe(buf, eol, he)
            elif command in (b"CONNECT", b"STOMP"):
                mine.append(b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:stompbench-sink\n\n\0")
            elif command == b"DISCONNECT":
                if receipt is not None:
                    mine.append(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\0")
                receipt = None
                self.closed = True
            if receipt is not None:
                mine.append(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\0")
            pos = end + 1
        self.buf = buf[pos:]
        for conn, frames in out.items():
            if frames and (conn is self or not conn.closed):
                conn.transport.write(b"".join(frames))
        if self.closed:
            self.transport.close()
            return
        for s in self.subs:
            if s.flood_left or sink.backlog.get(s.destination):
                sink.pump(s)

    def _subscribe(self, buf: bytes, start: int, end: int) -> None:
        destination = _header(buf, start, end, b"destination") or b""
        sub = Subscription(self, destination, _header(buf, start, end, b"id") or b"0")
        flood = _header(buf, start, end, b"bench-flood")
        if flood and flood.isdigit():
            body = body_of(1024).replace(b"%", b"%%")
            sub.flood_left = int(flood)
            sub.flood_template = (
                sub.prefix
                + b"flood\ndestination:"
                + destination
                + b"\ncontent-length:1024\n"
                + TS_HEADER
                + b":%d\n\n"
                + body
                + b"\0"
            )
        else:
            self.sink.subscribers[destination].append(sub)
        self.subs.append(sub)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    sink = Sink()
    server = await loop.create_server(lambda: SinkConnection(sink), host, port, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stompbench.sink", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
