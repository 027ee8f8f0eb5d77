"""`TcpProxy` in front of a real echo server: forwarding, cut, freeze and heal."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from petrel.testing.process import free_port, wait_for
from petrel.testing.proxy import TcpProxy


class EchoServer:
    """A threaded TCP echo server on 127.0.0.1 that counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._conns.append(conn)
            t = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self.sock.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in [self._acceptor, *self._threads]:
            t.join(5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", echo.port) as p:
        yield p


def client(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def recv_exactly(s: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    s.settimeout(timeout)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def is_closed(s: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closed or reset `s` within `timeout`; False if it stays open and silent."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (TimeoutError, socket.timeout):
        return False


def connection_works(proxy: TcpProxy, payload: bytes = b"ping") -> bool:
    """A new connection through the proxy echoes `payload` back."""
    try:
        with client(proxy) as s:
            s.sendall(payload)
            return recv_exactly(s, len(payload), timeout=2) == payload
    except OSError:
        return False


def test_bytes_flow_both_ways_and_are_counted(proxy, echo):
    with client(proxy) as s:
        payload = bytes(range(256)) * 1000  # 256 kB, more than one read
        s.sendall(payload)
        assert recv_exactly(s, len(payload)) == payload
        wait_for(lambda: proxy.connections == 1, 5, message="the proxy should count one connection")
        assert echo.accepted == 1
        assert proxy.bytes_forwarded == 2 * len(payload)
    wait_for(lambda: proxy.connections == 0, 5, message="a closed client should end its proxied connection")


def test_listen_port_is_used():
    port = free_port()
    server = EchoServer()
    try:
        with TcpProxy("127.0.0.1", server.port, listen_port=port) as p:
            assert p.port == port
            assert connection_works(p)
    finally:
        server.close()


def test_cut_closes_live_connections_and_refuses_new_ones_until_heal(proxy, echo):
    s1, s2 = client(proxy), client(proxy)
    try:
        for s in (s1, s2):
            s.sendall(b"hello")
            assert recv_exactly(s, 5) == b"hello"
        assert proxy.connections == 2

        proxy.cut()
        assert proxy.connections == 0
        assert is_closed(s1) and is_closed(s2)

        accepted = echo.accepted
        assert not connection_works(proxy)  # accepted by the proxy, then closed at once
        assert echo.accepted == accepted, "a cut proxy must not connect to the target"

        proxy.heal()
        assert connection_works(proxy, b"after heal")
    finally:
        s1.close()
        s2.close()


def test_cut_resets_the_target_side_too(proxy, echo):
    with client(proxy) as s:
        s.sendall(b"x")
        assert recv_exactly(s, 1) == b"x"
        proxy.cut()
    # the echo server's thread ends when its socket is reset or closed
    wait_for(lambda: all(not t.is_alive() for t in echo._threads), 5,
             message="the target's side of a cut connection should be closed")


def test_freeze_holds_data_until_heal(proxy):
    with client(proxy) as s:
        s.sendall(b"before")
        assert recv_exactly(s, 6) == b"before"
        forwarded = proxy.bytes_forwarded

        proxy.freeze()
        s.sendall(b"held back")
        assert not is_closed(s, timeout=0.3), "a frozen proxy must neither forward nor close"
        assert proxy.bytes_forwarded == forwarded
        assert proxy.connections == 1

        proxy.heal()
        assert recv_exactly(s, 9) == b"held back"
        assert proxy.bytes_forwarded == forwarded + 18


def test_freeze_replies_only_forwards_to_the_target_and_holds_what_comes_back(proxy):
    with client(proxy) as s:
        s.sendall(b"before")
        assert recv_exactly(s, 6) == b"before"
        forwarded = proxy.bytes_forwarded

        proxy.freeze(replies_only=True)
        s.sendall(b"one way")
        # the echo server gets it (counted once), its echo is held
        wait_for(lambda: proxy.bytes_forwarded == forwarded + 7, 5, message="not forwarded to the target")
        assert not is_closed(s, timeout=0.3), "the reply must be held, the connection kept"

        proxy.heal()
        assert recv_exactly(s, 7) == b"one way"
        assert proxy.bytes_forwarded == forwarded + 14


def test_a_connection_opened_while_frozen_flows_after_heal(proxy, echo):
    proxy.freeze()
    with client(proxy) as s:
        s.sendall(b"early")
        assert not is_closed(s, timeout=0.3)
        assert echo.accepted == 0
        proxy.heal()
        assert recv_exactly(s, 5) == b"early"


def test_cut_while_frozen_closes_the_held_connection(proxy):
    with client(proxy) as s:
        s.sendall(b"a")
        assert recv_exactly(s, 1) == b"a"
        proxy.freeze()
        s.sendall(b"b")
        proxy.cut()
        assert is_closed(s)
        assert proxy.connections == 0
    proxy.heal()
    assert connection_works(proxy)


def test_target_down_closes_the_client():
    port = free_port()  # nothing listens there
    with TcpProxy("127.0.0.1", port) as p:
        assert not connection_works(p)
        wait_for(lambda: p.connections == 0, 5, message="a link to an unreachable target should end")


def test_stop_closes_connections_and_the_listener():
    server = EchoServer()
    try:
        p = TcpProxy("127.0.0.1", server.port).start()
        s = client(p)
        s.sendall(b"x")
        assert recv_exactly(s, 1) == b"x"
        port = p.port
        p.stop()
        assert is_closed(s)
        s.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        p.stop()  # idempotent
    finally:
        server.close()
