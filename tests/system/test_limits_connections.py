"""Connections from the outside cannot exhaust a real `petrel run`: a handshake must finish within
handshake_timeout however slowly it trickles in, a STOMP session without heart-beats is held to
connection_ttl, heart-beats have a floor, each acceptor takes max_connections and the process no
more than its open-files limit less a reserve (so /health still answers), and unfinished frames
share a memory budget. After each attack a real client is served."""

from __future__ import annotations

import resource
import socket
import time

import pytest

from conftest import connect, read_until_closed
from petrel.codec.core import Connect, CoreConnection, Role
from petrel.codec.core.frames import HEADER, PROTOCOL_VERSIONS, FrameType
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system

STOMP_CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"


def _closed(s: socket.socket) -> bool:
    """Whether the broker closed `s` (what it sent before is read and dropped)."""
    s.setblocking(False)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    finally:
        s.setblocking(True)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / __import__("os").sysconf("SC_CLK_TCK")


def _served(b: BrokerProcess) -> None:
    """A real STOMP client sends and receives."""
    conn, listener = connect(b)
    conn.subscribe("/queue/alive", id="1")
    conn.send("/queue/alive", "still serving")
    assert listener.get().body == "still serving"
    conn.disconnect()


def test_handshake_must_finish_within_handshake_timeout_however_slowly_it_trickles(tmp_path):
    with BrokerProcess(tmp_path / "b", settings="handshake_timeout = 1500\n") as b:
        silent = [socket.create_connection(("127.0.0.1", port), timeout=10)
                  for port in (b.port, b.stomp_port) for _ in range(10)]
        slow = [socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10) for _ in range(20)]
        core = CoreConnection(Role.CLIENT).send(Connect(list(PROTOCOL_VERSIONS)))
        slow_core = [socket.create_connection(("127.0.0.1", b.port), timeout=10) for _ in range(5)]
        start = time.monotonic()
        sent = 0
        # one byte per socket every 0.1 s: a CONNECT would be whole after about 4 s
        while time.monotonic() - start < 4.5:
            for s in slow:
                if sent < len(STOMP_CONNECT) - 1:  # never the last byte: nothing may complete
                    try:
                        s.sendall(STOMP_CONNECT[sent:sent + 1])
                    except OSError:
                        pass
            for s in slow_core:
                if sent < len(core) - 1:
                    try:
                        s.sendall(core[sent:sent + 1])
                    except OSError:
                        pass
            sent += 1
            time.sleep(0.1)
        for s in silent + slow + slow_core:
            assert wait_for(lambda s=s: _closed(s), timeout=5), "a socket outlived handshake_timeout"
            s.close()
        assert "did not finish their handshake within handshake_timeout (1500 ms)" in b.log()
        _served(b)


def test_stomp_session_without_heartbeats_is_held_to_connection_ttl(tmp_path):
    with BrokerProcess(tmp_path / "b", settings="connection_ttl = 1000\n") as b:
        quiet = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        quiet.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00")
        old = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        old.sendall(b"CONNECT\nlogin:x\n\n\x00")  # STOMP 1.0: no heart-beats at all
        chatty, listener = connect(b)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:  # a client that sends keeps its session
            chatty.send("/queue/chat", "x", headers={"receipt": "r"})
            assert listener.receipts.get(timeout=5) == "r"
            time.sleep(0.25)
        for s in (quiet, old):
            data = read_until_closed(s, timeout=5)
            assert data.startswith(b"CONNECTED"), data
            assert b"ERROR" in data and b"connection_ttl" in data, data
            assert data.endswith(b"<closed>"), data
        assert not listener.disconnected
        chatty.disconnect()


def test_heartbeat_interval_has_a_floor(tmp_path):
    with BrokerProcess(tmp_path / "b") as b:
        socks = [socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10) for _ in range(20)]
        for s in socks:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:1,1\n\n\x00")
        for s in socks:
            head = s.recv(4096)
            assert head.startswith(b"CONNECTED") and b"heart-beat:10000,1000\n" in head, head
        cpu0, t0 = _cpu_seconds(b.proc.pid), time.monotonic()
        while time.monotonic() - t0 < 2.0:  # beat as often as the client promised it could
            for s in socks:
                s.sendall(b"\n")
            time.sleep(0.1)
        used = _cpu_seconds(b.proc.pid) - cpu0
        assert used < 0.6, f"the broker used {used:.2f}s of CPU in 2s for 20 idle heart-beating sessions"
        for s in socks:
            assert not _closed(s)
            s.close()


def test_each_acceptor_takes_max_connections_and_serves_the_ones_it_took(tmp_path):
    with BrokerProcess(tmp_path / "b", settings="max_connections = 50\n", http=True) as b:
        socks = []
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10))
        closed: set[socket.socket] = set()

        def settled() -> bool:
            closed.update(s for s in socks if s not in closed and _closed(s))
            return len(closed) >= 150

        assert wait_for(settled, timeout=10)
        time.sleep(0.5)
        settled()
        taken = [s for s in socks if s not in closed]
        # (wait_ready's probe may still have held a place when the 200 came)
        assert 49 <= len(taken) <= 50 and set(taken) <= set(socks[:51]), len(taken)
        assert b.health().get("status") == "ok"
        for s in taken:  # the connections it took are served
            s.sendall(STOMP_CONNECT)
        for s in taken:
            assert s.recv(4096).startswith(b"CONNECTED")
        assert "acceptor on port %d is full (max_connections 50)" % b.stomp_port in b.log()
        # the other acceptor has its own count
        with socket.create_connection(("127.0.0.1", b.port), timeout=10) as other:
            other.sendall(STOMP_CONNECT)
            assert other.recv(4096).startswith(b"CONNECTED")
        for s in socks:
            s.close()
        wait_for(lambda: _try_served(b), timeout=10)


def _try_served(b: BrokerProcess) -> bool:
    try:
        _served(b)
        return True
    except Exception:
        return False


def test_open_files_limit_keeps_a_reserve_for_health_and_management(tmp_path):
    b = BrokerProcess(tmp_path / "b", http=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))  # the broker inherits it
    try:
        b.start(wait=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        b.wait_ready()
        socks = []
        for _ in range(400):
            try:
                socks.append(socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10))
            except OSError:
                break
        assert wait_for(lambda: sum(_closed(s) for s in socks) >= len(socks) - 236, timeout=10)
        assert b.health().get("status") == "ok"  # /health still gets a file descriptor
        assert "the open-files limit less a reserve" in b.log()
        for s in socks:
            s.close()
        wait_for(lambda: _try_served(b), timeout=10)
    finally:
        b.kill9()


def _huge_core_frame_start(size: int) -> bytes:
    """A CORE connection's CONNECT, then the first bytes of a 95 MiB SEND."""
    connect_bytes = CoreConnection(Role.CLIENT).send(Connect(list(PROTOCOL_VERSIONS)))
    return connect_bytes + HEADER.pack(95 * 1024 * 1024, FrameType.SEND) + b"\x00" * size


def _huge_stomp_headers(size: int) -> bytes:
    """A STOMP session's CONNECT, then `size` bytes of a SEND's headers that never end."""
    line = b"h:" + b"a" * 60000 + b"\n"
    return STOMP_CONNECT + b"SEND\ndestination:/queue/x\n" + line * (size // len(line))


def test_unfinished_frames_share_a_memory_budget(tmp_path):
    settings = f"max_partial_frames_size = {32 * 1024 * 1024}\n"
    with BrokerProcess(tmp_path / "b", settings=settings) as b:
        before = _rss(b.proc.pid)
        attackers = []
        for i in range(20):
            port = b.port if i % 2 else b.stomp_port
            data = _huge_core_frame_start(16 * 1024 * 1024) if i % 2 else _huge_stomp_headers(16 * 1024 * 1024)
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                s.sendall(data)
            except OSError:  # closed by the broker while sending
                pass
            attackers.append(s)
        time.sleep(0.5)
        grown = _rss(b.proc.pid) - before
        assert grown < 120 * 1024 * 1024, f"RSS grew by {grown // (1024 * 1024)} MiB"
        errors = b"".join(read_until_closed(s, timeout=0.5) for s in attackers)
        assert b"max_partial_frames_size" in errors, errors[:2000]
        # before its handshake a connection holds little
        s = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        s.sendall(b"CONNECT\n" + b"h:" + b"a" * 60000 + b"\n" + b"h:" + b"a" * 60000 + b"\n")
        assert b"before the handshake is done" in read_until_closed(s)
        for s in attackers:
            s.close()
        _served(b)


def test_a_client_that_does_not_read_is_closed_past_max_pending_writes_size(tmp_path):
    with BrokerProcess(tmp_path / "b", settings=f"max_pending_writes_size = {1024 * 1024}\n") as b:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (the kernel holds little for us)
        s.settimeout(10)
        s.connect(("127.0.0.1", b.stomp_port))
        s.sendall(STOMP_CONNECT)
        rid = "r" * 1000  # each frame earns a 1 KiB receipt, which this client never reads
        frames = f"BEGIN\ntransaction:t\nreceipt:{rid}\n\n\x00ABORT\ntransaction:t\nreceipt:{rid}\n\n\x00".encode()
        try:
            for _ in range(20000):
                s.sendall(frames)
        except OSError:  # closed by the broker
            pass
        wait_for(lambda: "over max_pending_writes_size (1048576)" in b.log(), timeout=10)
        s.close()
        _served(b)


def test_a_user_holds_at_most_max_connections_per_user(tmp_path):
    from petrel.security.users import UserStore
    from petrel.testing.process import OWN_SECURITY

    b = BrokerProcess(tmp_path / "b", env=OWN_SECURITY, settings=(
        'max_connections_per_user = 2\n[security]\nusers_file = "users.toml"\nlogin_failure_delay = 100\n'))
    users = UserStore(b.workdir / "users.toml")
    for name in ("alice", "bob"):
        users.add(name, f"{name}-pw", ["admin"])
    users.save()

    def login(user: str) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        s.sendall(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{user}\npasscode:{user}-pw\n\n\x00".encode())
        assert s.recv(4096).startswith(b"CONNECTED")
        return s

    with b:
        first, second = login("alice"), login("alice")
        third = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        third.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:alice\npasscode:alice-pw\n\n\x00")
        data = read_until_closed(third)
        assert b"ERROR" in data and b"max_connections_per_user" in data, data
        bob = login("bob")  # another user is not counted with alice
        first.close()
        wait_for(lambda: _logs_in(b, "alice"), timeout=10)  # her closed connection is uncounted
        assert not _closed(second) and not _closed(bob)


def _logs_in(b: BrokerProcess, user: str) -> bool:
    s = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
    s.sendall(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{user}\npasscode:{user}-pw\n\n\x00".encode())
    data = read_until_closed(s, timeout=2)
    s.close()
    return data.startswith(b"CONNECTED") and b"ERROR" not in data


def test_5000_idle_connections_against_max_connections(tmp_path):
    with BrokerProcess(tmp_path / "b", settings="max_connections = 1000\n", http=True) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port), timeout=10) for _ in range(5000)]
        closed: set[socket.socket] = set()

        def settled() -> bool:
            closed.update(s for s in socks if s not in closed and _closed(s))
            return len(closed) >= 4000

        assert wait_for(settled, timeout=30)
        assert b.health().get("status") == "ok"
        taken = [s for s in socks if s not in closed]
        assert 999 <= len(taken) <= 1000
        for s in taken:  # the broker serves every connection it took
            s.sendall(STOMP_CONNECT)
        for s in taken:
            assert s.recv(4096).startswith(b"CONNECTED")
        for s in socks:
            s.close()
        wait_for(lambda: _try_served(b), timeout=10)
