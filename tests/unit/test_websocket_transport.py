"""`petrel.server.websocket.WebSocket` between a fake socket and the broker's real `Connection`: what
the Connection's adapter receives, what reaches the socket, and flow control both ways."""

from __future__ import annotations

import asyncio
import logging
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.websocket import Opcode, close_payload
from petrel.config import BrokerConfig
from petrel.server.limits import ConnectionLimits
from petrel.server.websocket import WebSocket

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def upgrade(path: str = "/stomp", protocol: str = "v12.stomp") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
            ).encode()


def masked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    head = bytes(((0x80 if fin else 0) | opcode,))
    head += bytes((0x80 | n,)) if n < 126 else bytes((0x80 | 126,)) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of the unmasked frames the broker wrote."""
    out = []
    while data:
        opcode, n, at = data[0] & 0x0F, data[1] & 0x7F, 2
        if n == 126:
            n, at = int.from_bytes(data[2:4], "big"), 4
        elif n == 127:
            n, at = int.from_bytes(data[2:10], "big"), 10
        out.append((opcode, data[at:at + n]))
        data = data[at + n:]
    return out


class FakeSocket:
    def __init__(self) -> None:
        self.written = b""
        self.reading = True
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def take(self) -> bytes:
        data, self.written = self.written, b""
        return data

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 61614)}.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return len(self.written)


class RecordingAdapter:
    """Records what the Connection hands it; pauses reading at a message that says so."""

    connected = True  # (for the handshake limits: logged in)

    def __init__(self, conn) -> None:
        self.conn = conn
        self.reads: list[bytes] = []
        self.events: list[str] = []

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)
        if b"PAUSE" in data:
            self.conn.transport.pause_reading()

    def connection_lost(self) -> None:
        self.events.append("lost")

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")


class FakeBroker:
    def __init__(self) -> None:
        self.limits = ConnectionLimits(BrokerConfig())
        self.connections: set = set()
        self.adapters: list[RecordingAdapter] = []
        self.kinds: list[str] = []

    def make_adapter(self, kind: str, conn) -> RecordingAdapter:
        self.kinds.append(kind)
        self.adapters.append(RecordingAdapter(conn))
        return self.adapters[-1]


def run(test) -> None:
    async def main() -> None:
        broker = FakeBroker()
        ws, sock = WebSocket(broker), FakeSocket()
        ws.connection_made(sock)
        await test(broker, ws, sock)
        broker.limits._sweep and broker.limits._sweep.cancel()

    asyncio.run(main())


def turn() -> asyncio.Future:
    return asyncio.sleep(0.01)


def test_frames_behind_the_upgrade_reach_the_adapter_in_one_read_and_writes_become_messages():
    async def test(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00") + masked(Opcode.TEXT, b"SEND\n\n\x00"))
        head, _, rest = sock.take().partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol: v12.stomp" in head and not rest
        assert broker.kinds == ["stomp"]
        assert broker.adapters[0].reads == [b"CONNECT\n\n\x00SEND\n\n\x00"]  # one data_received per read
        ws.conn.write(b"CONNECTED\n\n\x00")
        ws.conn.write("MESSAGE\n\nü\x00".encode())
        await turn()  # (the Connection coalesces writes within a loop turn)
        ws.conn.write(b"MESSAGE\n\n\xff\x00")
        ws.conn.flush()
        assert server_frames(sock.take()) == [(Opcode.TEXT, "CONNECTED\n\n\x00MESSAGE\n\nü\x00".encode()),
                                              (Opcode.BINARY, b"MESSAGE\n\n\xff\x00")]  # not UTF-8: binary
    run(test)


def test_mqtt_is_binary():
    async def test(broker, ws, sock):
        connect = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
        ws.data_received(upgrade("/mqtt", "mqtt") + masked(Opcode.BINARY, connect))
        sock.take()
        assert broker.kinds == ["mqtt"]
        ws.conn.write(b" \x02\x00\x00")
        ws.conn.flush()
        assert server_frames(sock.take()) == [(Opcode.BINARY, b" \x02\x00\x00")]
    run(test)


def test_pausing_reads_stops_the_socket_and_the_messages_already_read():
    async def test(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00"))
        sock.take()
        adapter = broker.adapters[0]
        ws.data_received(masked(Opcode.TEXT, b"PAUSE\n\n\x00"))
        assert not sock.reading
        ws.data_received(masked(Opcode.TEXT, b"late one\x00") + masked(Opcode.PING, b"p"))  # read before the pause took
        assert adapter.reads == [b"CONNECT\n\n\x00", b"PAUSE\n\n\x00"]
        await turn()
        assert adapter.reads == [b"CONNECT\n\n\x00", b"PAUSE\n\n\x00"]  # held while paused
        ws.conn.transport.resume_reading()
        assert sock.reading
        await turn()
        assert adapter.reads[-1] == b"late one\x00"
        assert server_frames(sock.take()) == [(Opcode.PONG, b"p")]
    run(test)


def test_the_socket_pausing_writes_pauses_the_adapter():
    async def test(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00"))
        ws.pause_writing()
        ws.resume_writing()
        assert broker.adapters[0].events == ["pause", "resume"]
        assert ws.get_write_buffer_size() == len(sock.written)
    run(test)


def test_closing_sends_a_close_frees_the_connection_at_once_and_ends_on_the_clients_close():
    async def test(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00"))
        sock.take()
        assert ws.conn in broker.connections
        ws.conn.close()
        assert server_frames(sock.take()) == [(Opcode.CLOSE, close_payload(1000))]
        await turn()
        assert ws.conn not in broker.connections and broker.adapters[0].events == ["lost"]
        assert not sock.closed
        ws.data_received(masked(Opcode.TEXT, b"after the close\x00") + masked(Opcode.CLOSE, close_payload(1000)))
        assert sock.closed and not sock.take()  # no second Close; nothing delivered
        assert broker.adapters[0].reads == [b"CONNECT\n\n\x00"]
    run(test)


def test_a_clients_close_is_answered_and_a_broken_frame_gets_1002():
    async def test(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00"))
        sock.take()
        ws.data_received(masked(Opcode.CLOSE, close_payload(1001, "bye")))
        assert server_frames(sock.take()) == [(Opcode.CLOSE, close_payload(1001))] and sock.closed

    run(test)

    async def broken(broker, ws, sock):
        ws.data_received(upgrade() + masked(Opcode.TEXT, b"CONNECT\n\n\x00"))
        sock.take()
        ws.data_received(bytes((0x81, 0x01)) + b"x")  # unmasked
        opcode, payload = server_frames(sock.take())[0]
        assert opcode == Opcode.CLOSE and payload[:2] == (1002).to_bytes(2, "big")
        await turn()
        assert broker.adapters[0].events == ["lost"]

    run(broken)


def test_a_refused_upgrade_is_an_http_error_and_a_close():
    async def test(broker, ws, sock):
        ws.data_received(upgrade("/", "chat"))
        answer = sock.take()
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"v12.stomp" in answer
        assert sock.closed and ws.conn.closed and broker.adapters == []
    run(test)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=30), st.sampled_from([
    masked(Opcode.TEXT, b"CONNECT\n\n\x00"), masked(Opcode.BINARY, b"PAUSE", fin=False),
    masked(Opcode.CONTINUATION, b"x"), masked(Opcode.PING, b"p"), masked(Opcode.CLOSE, close_payload(1000)),
    bytes((0x81, 0x05)), b"\x88\x80"])),
    max_size=10))
def test_any_bytes_after_the_upgrade_end_in_data_or_a_close_never_an_exception(chunks):
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = errors.append
    logger = logging.getLogger("petrel.server.websocket")
    logger.addHandler(handler)

    async def test(broker, ws, sock):
        ws.data_received(upgrade())
        for chunk in chunks:
            ws.data_received(chunk)
            if not sock.reading:
                ws.conn.transport.resume_reading()
                await asyncio.sleep(0)
        others = [opcode for opcode, _ in server_frames(sock.take().partition(b"\r\n\r\n")[2])
                  if opcode != Opcode.PONG]
        assert others in ([], [Opcode.CLOSE])  # at most one Close, nothing else

    try:
        run(test)
    finally:
        logger.removeHandler(handler)
    assert not errors, errors  # (an unexpected error is logged, and aborts the socket)
