from __future__ import annotations

import queue
import socket
import time
from collections.abc import Iterator

import pytest
import stomp

from petrel.testing.process import BrokerProcess, wait_for


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(settings: str = "", name: str = "b") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings=settings)
        started.append(b)
        return b

    yield make
    for b in started:
        if b.proc is not None and b.proc.poll() is None:
            b.kill9()


@pytest.fixture
def broker(broker_factory):
    return broker_factory().start()


def module_broker(tmp_path_factory, label: str, **options) -> Iterator[BrokerProcess]:
    """The body of a module-scoped fixture: one broker (BrokerProcess ``options``) for all the
    module's tests, killed after the last one."""
    b = BrokerProcess(tmp_path_factory.mktemp(label) / "b", **options).start()
    yield b
    b.kill9()


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.receipts: queue.Queue = queue.Queue()
        self.errors: queue.Queue = queue.Queue()
        self.disconnected = False

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame) -> None:
        self.receipts.put(frame.headers.get("receipt-id"))

    def on_error(self, frame) -> None:
        self.errors.put(frame)

    def on_disconnected(self) -> None:
        self.disconnected = True

    def get(self, timeout: float = 10.0):
        return self.messages.get(timeout=timeout)

    def drain(self, idle: float = 0.5, limit: int = 1_000_000) -> list:
        """Everything that arrives until nothing has come for `idle` seconds."""
        out = []
        while len(out) < limit:
            try:
                out.append(self.messages.get(timeout=idle))
            except queue.Empty:
                break
        return out

    def nothing_within(self, seconds: float) -> bool:
        try:
            self.messages.get(timeout=seconds)
            return False
        except queue.Empty:
            return True


def connect(b: BrokerProcess, *, client_id: str | None = None, version: str = "1.2", heartbeats=(0, 0)):
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    kwargs = {} if version == "1.0" else {"heartbeats": heartbeats}
    conn = cls([("127.0.0.1", b.stomp_port)], **kwargs)
    listener = Listener()
    conn.set_listener("l", listener)
    headers = {"client-id": client_id} if client_id else {}
    conn.connect("guest", "guest", wait=True, headers=headers)
    return conn, listener


def raw(b: BrokerProcess, port: int | None = None) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port or b.port), timeout=10)
    return s


def read_until_closed(s: socket.socket, timeout: float = 10.0) -> bytes:
    s.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes still in its buffer
            return data + b"<closed>"
        except (TimeoutError, socket.timeout):
            break
        if not chunk:
            return data + b"<closed>"
        data += chunk
    return data


@pytest.fixture
def teardown():
    """Register nodes, proxies and clients to stop (or close) after the test, in reverse order."""
    things = []
    yield things.append
    for thing in reversed(things):
        (thing.stop if hasattr(thing, "stop") else thing.close)()


@pytest.fixture
def stop_nodes():
    """`stop_nodes([a, b])`: broker processes stopped together after the test."""
    from cluster_harness import stop_all

    started = []
    yield started.extend
    stop_all(started)


def receive_each_once(listener: Listener, n: int, *, confirmed: int, timeout: float = 180) -> None:
    """Messages whose bodies start with a 5-digit id 0..n-1 arrive on ``listener``: each exactly
    once (``confirmed``: how many sends had been receipted before a crash, for the message)."""
    got: list[int] = []

    def drained() -> bool:
        while not listener.messages.empty():
            got.append(int(listener.messages.get().body[:5]))
        return len(got) >= n

    wait_for(drained, timeout, message=f"the queue drained ({len(got)} of {n})")
    assert listener.nothing_within(1.0), "more than one copy of some message"
    missing = sorted(set(range(n)) - set(got))
    twice = sorted({i for i in got if got.count(i) > 1})
    assert not missing, f"{len(missing)} messages lost (e.g. {missing[:5]}), {confirmed} were confirmed"
    assert not twice, f"{len(twice)} messages twice (e.g. {twice[:5]})"
