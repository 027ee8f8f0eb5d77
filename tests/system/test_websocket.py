"""STOMP over WebSocket against real `petrel run` processes: the `websockets` library and stomp.py's
WebSocket transport; persistence through kill -9; WebSocket and TCP (STOMP, CORE) clients see each
other's messages; refused handshakes; clients that vanish mid-frame; logins, limits and wss."""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import time
import urllib.request

import pytest
import stomp
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from conftest import Listener, connect, read_until_closed
from petrel.client import Connection as CoreConnection
from petrel.testing.process import OWN_SECURITY, BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.system

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


class WsStomp:
    """A STOMP 1.2 client over the `websockets` library: frames as text messages, the broker's
    messages read as a byte stream (a message may hold several frames, or part of one)."""

    def __init__(self, port: int, path: str = "/stomp", subprotocols=("v12.stomp",), *, ssl_context=None,
                 login: tuple[str, str] | None = None) -> None:
        scheme = "wss" if ssl_context is not None else "ws"
        self.ws = ws_connect(f"{scheme}://127.0.0.1:{port}{path}", subprotocols=list(subprotocols) or None,
                             ssl=ssl_context, open_timeout=10, close_timeout=2, legacy=True)
        self.stream = b""
        self.kinds: set[type] = set()
        self.sizes: list[int] = []  # of the messages received
        headers = {"accept-version": "1.2", "host": "petrel", "heart-beat": "0,0"}
        if login:
            headers.update({"login": login[0], "passcode": login[1]})
        self.send("CONNECT", headers)
        self.connected = self.frame()

    def send(self, command: str, headers: dict[str, str], body: str = "") -> None:
        head = "".join(f"{k}:{v}\n" for k, v in headers.items())
        self.ws.send(f"{command}\n{head}\n{body}\x00")

    def frame(self, timeout: float = 10.0) -> tuple[str, dict[str, str], str]:
        deadline = time.monotonic() + timeout
        while True:
            self.stream = self.stream.lstrip(b"\r\n")  # heart-beats
            end = self.stream.find(b"\x00")
            if end >= 0:
                raw, self.stream = self.stream[:end], self.stream[end + 1:]
                head, _, body = raw.decode().partition("\n\n")
                command, *lines = head.split("\n")
                return command, dict(line.split(":", 1) for line in lines), body
            message = self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))
            self.kinds.add(type(message))
            self.sizes.append(len(message))
            self.stream += message.encode() if isinstance(message, str) else message

    def frames_until_quiet(self, idle: float = 1.0) -> list[tuple[str, dict[str, str], str]]:
        out = []
        while True:
            try:
                out.append(self.frame(idle))
            except TimeoutError:
                return out

    def close(self) -> None:
        self.ws.close()


class WsBroker(BrokerProcess):
    """A `BrokerProcess` with a WebSocket port, ready once that port takes connections too (the
    broker opens it after the STOMP port that `BrokerProcess` waits for)."""

    def __init__(self, workdir, *, settings: str = "", **options) -> None:
        self.ws_port = free_port()
        super().__init__(workdir, settings=f"ws_port = {self.ws_port}\n" + settings, **options)

    def wait_ready(self, timeout: float = 60.0) -> None:
        super().wait_ready(timeout)

        def accepts() -> bool:
            try:
                socket.create_connection(("127.0.0.1", self.ws_port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(accepts, timeout, message=f"no WebSocket port in {timeout}s:\n{self.log()}")


def ws_broker(tmp_path, settings: str = "", **options) -> tuple[WsBroker, int]:
    b = WsBroker(tmp_path, settings=settings, **options)
    return b, b.ws_port


def http_get(port: int, path: str, headers: dict[str, str]) -> bytes:
    """A raw upgrade request and the broker's whole answer (it closes after an error)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [f"GET {path} HTTP/1.1", "Host: localhost"] + [f"{k}: {v}" for k, v in headers.items()]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = read_until_closed(s)
    s.close()
    return data


UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": KEY, "Sec-WebSocket-Version": "13"}


def masked(opcode: int, payload: bytes, *, fin: bool = True, length: int | None = None) -> bytes:
    """A client frame by hand (its declared `length` may promise more than `payload`)."""
    n = len(payload) if length is None else length
    head = bytes(((0x80 if fin else 0) | opcode,))
    if n < 126:
        head += bytes((0x80 | n,))
    elif n < 65536:
        head += bytes((0x80 | 126,)) + struct.pack("!H", n)
    else:
        head += bytes((0x80 | 127,)) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def raw_ws(port: int, path: str = "/stomp", protocol: str = "v12.stomp") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [f"GET {path} HTTP/1.1", "Host: localhost", *(f"{k}: {v}" for k, v in UPGRADE.items()),
             f"Sec-WebSocket-Protocol: {protocol}"]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    return s


def reset(s: socket.socket) -> None:
    """Vanish: close with RST, no WebSocket Close, no FIN."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def connection_count(b: BrokerProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}/api/v1/connections", timeout=5) as r:
        return json.loads(r.read())["count"]


# -- STOMP over WebSocket ---------------------------------------------------------------------------

def test_connect_send_receipt_subscribe_ack_and_persistence_through_kill9(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        c = WsStomp(ws_port)
        assert c.ws.subprotocol == "v12.stomp"
        assert c.connected[0] == "CONNECTED" and c.connected[1]["version"] == "1.2"
        assert c.ws.ping(b"still there?").wait(10)  # answered with a pong
        for i in range(3):
            c.send("SEND", {"destination": "/queue/ws.orders", "persistent": "true", "receipt": f"r{i}"}, f"m{i}")
        assert [c.frame()[1]["receipt-id"] for _ in range(3)] == ["r0", "r1", "r2"]
        c.send("SUBSCRIBE", {"id": "1", "destination": "/queue/ws.orders", "ack": "client-individual"})
        got = [c.frame() for _ in range(3)]
        assert [(f[0], f[2]) for f in got] == [("MESSAGE", "m0"), ("MESSAGE", "m1"), ("MESSAGE", "m2")]
        c.send("ACK", {"id": got[0][1]["ack"], "receipt": "acked"})
        assert c.frame() == ("RECEIPT", {"receipt-id": "acked"}, "")
        assert c.kinds == {str}  # STOMP's frames came as text messages
        b.kill9()  # m1 and m2 delivered, not acknowledged; m0 acknowledged
        c.ws.close_socket()

        b.start()
        again = WsStomp(ws_port, path="/", subprotocols=("v11.stomp",))
        assert again.ws.subprotocol == "v11.stomp"
        again.send("SUBSCRIBE", {"id": "1", "destination": "/queue/ws.orders", "ack": "auto"})
        assert sorted(f[2] for f in again.frames_until_quiet()) == ["m1", "m2"]
        again.close()


@pytest.mark.parametrize("path, header", [("/stomp", None), ("/", {"Sec-WebSocket-Protocol": "v12.stomp"})],
                         ids=["path-only", "sub-protocol"])
def test_stomp_py_websocket_transport(tmp_path, path, header):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        conn = stomp.WSStompConnection([("127.0.0.1", ws_port)], ws_path=path, header=header, heartbeats=(0, 0),
                                       reconnect_attempts_max=1)
        listener = Listener()
        conn.set_listener("l", listener)
        conn.connect(wait=True)
        conn.subscribe("/queue/ws.py", id="1", ack="client-individual")
        for i in range(20):
            conn.send("/queue/ws.py", f"py{i}", headers={"persistent": "true", "receipt": f"p{i}"})
        bodies = []
        for _ in range(20):
            frame = listener.get()
            bodies.append(frame.body)
            conn.ack(frame.headers["ack"])
        assert bodies == [f"py{i}" for i in range(20)]
        wait_for(lambda: listener.receipts.qsize() == 20, 10)
        conn.disconnect()
        assert listener.errors.empty()
        assert "STOMP error" not in b.log()


def test_messages_cross_between_websocket_tcp_stomp_and_core(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        c = WsStomp(ws_port)
        for queue in ("x.stomp", "x.core"):
            c.send("SEND", {"destination": f"/queue/{queue}", "persistent": "true", "receipt": queue,
                            "color": "blue"}, f"to {queue} über ws")
            assert c.frame()[1]["receipt-id"] == queue

        tcp, listener = connect(b)
        tcp.subscribe("/queue/x.stomp", id="1", ack="auto")
        frame = listener.get()
        assert frame.body == "to x.stomp über ws" and frame.headers["color"] == "blue"
        tcp.send("/queue/x.back", "from tcp", headers={"persistent": "true", "receipt": "back"})
        wait_for(lambda: not listener.receipts.empty(), 10)
        tcp.disconnect()

        with CoreConnection(f"tcp://127.0.0.1:{b.port}") as core:
            consumer = core.session().consumer("queue://x.core")
            message = consumer.receive(10)
            assert message is not None and message.body == "to x.core über ws".encode()
            assert message.properties.get("color") == "blue"

        c.send("SUBSCRIBE", {"id": "2", "destination": "/queue/x.back", "ack": "auto"})
        assert c.frame()[2] == "from tcp"
        c.close()


# -- handshakes and clients that misbehave ------------------------------------------------------------

def test_refused_handshakes_get_an_http_error_and_the_broker_serves_on(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        with pytest.raises(InvalidStatus) as info:
            ws_connect(f"ws://127.0.0.1:{ws_port}/", subprotocols=["wamp.2.json"], open_timeout=10)
        assert info.value.response.status_code == 400
        assert b"v12.stomp" in info.value.response.body  # the answer names what is spoken

        unknown = http_get(ws_port, "/", {**UPGRADE, "Sec-WebSocket-Protocol": "chat"})
        assert unknown.startswith(b"HTTP/1.1 400 Bad Request\r\n") and unknown.endswith(b"<closed>"), unknown
        none = http_get(ws_port, "/", UPGRADE)
        assert none.startswith(b"HTTP/1.1 400 ") and b"no sub-protocol" in none, none
        assert http_get(ws_port, "/stomp", {**UPGRADE, "Sec-WebSocket-Protocol": "mqttv9"}).startswith(b"HTTP/1.1 400 ")
        assert http_get(ws_port, "/queues", {**UPGRADE, "Sec-WebSocket-Protocol": "v12.stomp"}).startswith(
            b"HTTP/1.1 404 ")
        assert http_get(ws_port, "/stomp", {}).startswith(b"HTTP/1.1 426 Upgrade Required\r\n")
        assert http_get(ws_port, "/stomp", {**UPGRADE, "Sec-WebSocket-Version": "8"}).startswith(b"HTTP/1.1 426 ")
        wait_for(lambda: b.log().count("WebSocket handshake refused") >= 7, 10, message=b.log())

        c = WsStomp(ws_port)
        c.send("SEND", {"destination": "/queue/after", "receipt": "ok"}, "still here")
        assert c.frame()[0] == "RECEIPT"
        c.close()
        assert b.proc.poll() is None


def test_clients_that_vanish_mid_frame_leave_the_broker_serving(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", http=True)
    with b:
        base = connection_count(b)
        # mid HTTP request
        s = socket.create_connection(("127.0.0.1", ws_port), timeout=10)
        s.sendall(b"GET /stomp HTTP/1.1\r\nUpgrade: websock")
        reset(s)
        # mid WebSocket frame: a header promising 1000 bytes, then 10 of them
        s = raw_ws(ws_port)
        s.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"))
        assert s.recv(4096).startswith(b"\x81")  # CONNECTED, a text message
        s.sendall(masked(0x1, b"SEND\ndesti", length=1000))
        reset(s)
        # mid STOMP frame: whole WebSocket messages, the STOMP frame in them unfinished
        s = raw_ws(ws_port, path="/")
        s.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"))
        s.recv(4096)
        s.sendall(masked(0x1, b"SEND\ndestination:/queue/torn\npersistent:true\n\nhalf a bo", fin=False))
        reset(s)
        # mid fragmented message, then a FIN without a Close
        s = raw_ws(ws_port)
        s.sendall(masked(0x2, b"CONN", fin=False))
        s.shutdown(socket.SHUT_WR)
        read_until_closed(s, timeout=5)
        s.close()

        wait_for(lambda: connection_count(b) == base, 15, message="vanished clients still counted")
        c = WsStomp(ws_port)
        c.send("SUBSCRIBE", {"id": "1", "destination": "/queue/torn", "ack": "auto"})
        c.send("SEND", {"destination": "/queue/torn", "receipt": "r"}, "whole")
        frames = [c.frame(), c.frame()]
        assert sorted(f[0] for f in frames) == ["MESSAGE", "RECEIPT"]
        assert [f[2] for f in frames if f[0] == "MESSAGE"] == ["whole"]  # no torn message was routed
        c.close()
        assert "Traceback" not in b.log()


def test_a_protocol_violation_gets_a_close_frame_with_its_code(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        s = raw_ws(ws_port)
        s.sendall(bytes((0x81, 0x03)) + b"abc")  # not masked: RFC 6455 says close with 1002
        data = read_until_closed(s)
        assert data.startswith(bytes((0x88,))) and data[2:4] == (1002).to_bytes(2, "big"), data
        s.close()
        wait_for(lambda: "WebSocket protocol error: a client's frames must be masked" in b.log(), 10)


# -- security, limits, TLS -----------------------------------------------------------------------------

def test_logins_and_per_user_limits_apply_as_on_tcp(tmp_path):
    from petrel.security.users import UserStore

    b, ws_port = ws_broker(tmp_path / "b", env=OWN_SECURITY, settings=(
        'max_connections_per_user = 1\n[security]\nusers_file = "users.toml"\nlogin_failure_delay = 100\n'))
    users = UserStore(b.workdir / "users.toml")
    users.add("alice", "alice-pw", ["admin"])
    users.save()
    with b:
        wrong = WsStomp(ws_port, login=("alice", "nope"))
        assert wrong.connected[0] == "ERROR"
        anonymous = WsStomp(ws_port)
        assert anonymous.connected[0] == "ERROR"

        tcp = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10)
        tcp.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:alice\npasscode:alice-pw\n\n\x00")
        assert tcp.recv(4096).startswith(b"CONNECTED")
        second = WsStomp(ws_port, login=("alice", "alice-pw"))  # one connection in all, TCP and WebSocket
        if second.connected[0] == "CONNECTED":  # counted once the login is done: closed just after
            second.connected = second.frame()
        assert second.connected[0] == "ERROR" and "max_connections_per_user" in second.connected[1]["message"]
        tcp.close()
        wait_for(lambda: _ws_logs_in(ws_port, ("alice", "alice-pw")), 10)


def _ws_logs_in(port: int, login: tuple[str, str]) -> bool:
    c = WsStomp(port, login=login)
    try:
        return c.connected[0] == "CONNECTED" and not c.frames_until_quiet(0.5)
    except Exception:
        return False
    finally:
        c.close()


def test_max_connections_applies_to_the_websocket_acceptor(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", settings="max_connections = 3\n")
    with b:
        held = [WsStomp(ws_port) for _ in range(3)]
        s = socket.create_connection(("127.0.0.1", ws_port), timeout=10)
        assert read_until_closed(s, timeout=10).endswith(b"<closed>")  # closed at once, before any HTTP
        s.close()
        wait_for(lambda: f"acceptor on port {ws_port} is full (max_connections 3)" in b.log(), 10)
        held[0].close()

        def serves() -> bool:
            try:
                c = WsStomp(ws_port)
            except Exception:
                return False
            held.append(c)
            return c.connected[0] == "CONNECTED"

        wait_for(serves, 10)
        for c in held:
            c.close()


def test_wss_with_the_brokers_certificate(tmp_path):
    from petrel.testing.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    tls = (f'ssl_enabled = true\nssl_cert = "{pki.server.cert}"\nssl_key = "{pki.server.key}"\n'
           f'ssl_ca = "{pki.ca.cert}"\nssl_handshake_timeout = 2000\n')
    b, ws_port = ws_broker(tmp_path / "b", settings=tls)
    with b:
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        c = WsStomp(ws_port, ssl_context=context)
        assert c.connected[0] == "CONNECTED"
        c.send("SEND", {"destination": "/queue/secret", "persistent": "true", "receipt": "r"}, "over wss")
        assert c.frame()[0] == "RECEIPT"
        c.send("SUBSCRIBE", {"id": "1", "destination": "/queue/secret", "ack": "auto"})
        assert c.frame()[2] == "over wss"
        c.close()
        with pytest.raises(Exception):  # plain ws:// to the wss port: no TLS hello, no upgrade
            ws_connect(f"ws://127.0.0.1:{ws_port}/stomp", subprotocols=["v12.stomp"], open_timeout=5)
        wait_for(lambda: "TLS handshake failed" in b.log(), 10)


# -- flow control ---------------------------------------------------------------------------------------

def test_a_full_block_address_stops_reading_the_websocket_until_a_consumer_drains(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", settings=(
        '[address_settings."blocked.#"]\nmax_size_bytes = 65536\naddress_full_policy = "BLOCK"\n'))
    with b:
        producer = WsStomp(ws_port)
        for i in range(200):
            producer.send("SEND", {"destination": "/queue/blocked.q", "receipt": str(i)}, f"{i:03d}" + "y" * 1000)
        receipts = {f[1]["receipt-id"] for f in producer.frames_until_quiet(2.0)}
        assert len(receipts) < 200, "the producer should be blocked by the full address"
        wait_for(lambda: "blocked: address blocked.q is full" in b.log(), 10)

        other = WsStomp(ws_port)  # another client keeps going meanwhile
        other.send("SEND", {"destination": "/queue/free.q", "receipt": "f"}, "free")
        assert other.frame()[1] == {"receipt-id": "f"}
        other.send("SUBSCRIBE", {"id": "1", "destination": "/queue/blocked.q", "ack": "auto"})
        bodies = [other.frame(15)[2] for _ in range(200)]
        assert [int(x[:3]) for x in bodies] == list(range(200))  # all of them, in order, once
        while len(receipts) < 200:  # the producer was read again: its last messages went through
            receipts.add(producer.frame(15)[1]["receipt-id"])
        producer.close()
        other.close()


def test_a_websocket_client_that_does_not_read_is_closed_past_max_pending_writes_size(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", settings=f"max_pending_writes_size = {1024 * 1024}\n")
    with b:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (the kernel holds little for us)
        s.settimeout(10)
        s.connect(("127.0.0.1", ws_port))
        lines = ["GET /stomp HTTP/1.1", "Host: x", *(f"{k}: {v}" for k, v in UPGRADE.items()),
                 "Sec-WebSocket-Protocol: v12.stomp"]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        s.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"))
        rid = "r" * 1000  # each frame earns a 1 KiB receipt, which this client never reads
        frames = masked(0x1, f"BEGIN\ntransaction:t\nreceipt:{rid}\n\n\x00ABORT\ntransaction:t\nreceipt:{rid}\n\n\x00"
                        .encode())
        try:
            for _ in range(20000):
                s.sendall(frames)
        except OSError:  # closed by the broker
            pass
        wait_for(lambda: "over max_pending_writes_size (1048576)" in b.log(), timeout=10)
        s.close()
        c = WsStomp(ws_port)
        assert c.connected[0] == "CONNECTED"
        c.close()


def test_handshake_timeout_covers_the_http_upgrade_and_the_stomp_connect(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", settings="handshake_timeout = 500\n")
    with b:
        silent = socket.create_connection(("127.0.0.1", ws_port), timeout=10)
        silent.sendall(b"GET /stomp HTTP/1.1\r\n")  # and nothing more
        upgraded = raw_ws(ws_port)  # and no STOMP at all
        begun = raw_ws(ws_port)
        begun.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\n"))  # and not the rest
        assert read_until_closed(silent) == b"<closed>"
        assert read_until_closed(upgraded) == bytes((0x88, 0x02)) + (1000).to_bytes(2, "big") + b"<closed>"
        data = read_until_closed(begun)
        assert b"ERROR" in data and b"handshake_timeout" in data and data.endswith(b"<closed>"), data
        assert bytes((0x88, 0x02)) + (1000).to_bytes(2, "big") in data  # after the ERROR, a Close
        for s in (silent, upgraded, begun):
            s.close()
        wait_for(lambda: "did not finish their handshake within handshake_timeout" in b.log(), 10)
        assert WsStomp(ws_port).connected[0] == "CONNECTED"


def test_a_large_message_streams_through_websocket_both_ways(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    with b:
        body = "".join(chr(0x41 + i % 26) for i in range(3 * 1024 * 1024))  # over min_large_message_size
        c = WsStomp(ws_port)
        c.send("SEND", {"destination": "/queue/big", "persistent": "true", "receipt": "big"}, body)
        assert c.frame(30)[1] == {"receipt-id": "big"}
        assert list((b.data_dir / "large-messages").iterdir()), "not stored as a large message"
        c.send("SUBSCRIBE", {"id": "1", "destination": "/queue/big", "ack": "auto"})
        command, headers, got = c.frame(30)
        assert command == "MESSAGE" and len(got) == len(body) and got == body
        assert len(c.sizes) > 12 and max(c.sizes) <= 256 * 1024  # the body came in pieces of at most 256 KiB
        c.close()


def test_wss_with_mutual_tls_logs_the_certificate_in_as_its_user(tmp_path):
    from petrel.security.users import UserStore
    from petrel.testing.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "users.toml"
    store = UserStore(users)
    store.add("alice", "alice-password", ["app"])
    store.save()
    settings = (f'ssl_enabled = true\nssl_cert = "{pki.server.cert}"\nssl_key = "{pki.server.key}"\n'
                f'ssl_ca = "{pki.ca.cert}"\nssl_handshake_timeout = 2000\nssl_need_client_auth = true\n'
                f'[security]\nusers_file = "{users}"\nlogin_failure_delay = 0\n'
                f'certificate_users = {{ {json.dumps(pki.client.subject)} = "alice" }}\n'
                '[security_settings."tls.#"]\nsend = ["app"]\nconsume = ["app"]\ncreateAddress = ["app"]\n'
                'createDurableQueue = ["app"]\n')
    b, ws_port = ws_broker(tmp_path / "b", settings=settings, env=OWN_SECURITY)
    with b:
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        context.load_cert_chain(str(pki.client.cert), str(pki.client.key))
        c = WsStomp(ws_port, ssl_context=context)  # no login header: the certificate's user
        assert c.connected[0] == "CONNECTED", c.connected
        c.send("SEND", {"destination": "/queue/tls.ws", "receipt": "r"}, "as alice")  # needs alice's role
        assert c.frame() == ("RECEIPT", {"receipt-id": "r"}, "")
        c.close()
        without = ssl.create_default_context(cafile=str(pki.ca.cert))
        with pytest.raises(Exception):
            WsStomp(ws_port, ssl_context=without)
        wait_for(lambda: "no client certificate (ssl_need_client_auth)" in b.log(), 10, message=b.log())


def test_a_stopping_broker_says_going_away_and_exits_cleanly(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b")
    b.start()
    try:
        s = raw_ws(ws_port)  # a client that never answers the Close
        s.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"))
        assert s.recv(4096).startswith(b"\x81")
        assert b.stop() == 0
        data = read_until_closed(s)
        assert data.startswith(bytes((0x88, 0x02)) + (1001).to_bytes(2, "big")), data
        s.close()
    finally:
        b.kill9()


def test_random_bytes_after_the_upgrade_never_take_the_broker_down(tmp_path):
    import random

    b, ws_port = ws_broker(tmp_path / "b")
    pieces = [masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"), masked(0x2, b"\x10\x0c\x00\x04MQTT"),
              masked(0x1, b"SEND\ndestination:/queue/fuzz\n\nx\x00"), masked(0x9, b"p"), masked(0x0, b"x"),
              masked(0x1, b"\xc3"), masked(0x8, b"\x03"), bytes((0x81, 0xFE, 0xFF)), b"\x00" * 7]
    with b:
        rng = random.Random(14)
        for path, protocol in [("/stomp", "v12.stomp"), ("/mqtt", "mqtt")] * 15:
            s = raw_ws(ws_port, path, protocol)
            data = b"".join(rng.choice(pieces) if rng.random() < 0.6 else rng.randbytes(rng.randint(1, 40))
                            for _ in range(rng.randint(1, 12)))
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)  # the broker reads it all, then the end
            except OSError:  # closed by the broker already
                pass
            assert read_until_closed(s).endswith(b"<closed>")
            s.close()
        c = WsStomp(ws_port)
        c.send("SEND", {"destination": "/queue/after.fuzz", "receipt": "r"}, "served")
        assert c.frame()[1] == {"receipt-id": "r"}
        c.close()
        assert b.proc.poll() is None
        assert "Traceback" not in b.log(), b.log()


def test_unfinished_frames_inside_websocket_messages_meet_the_partial_frame_limits(tmp_path):
    b, ws_port = ws_broker(tmp_path / "b", settings=f"max_partial_frames_size = {128 * 1024}\n")
    with b:
        early = raw_ws(ws_port)  # before its handshake a connection holds little
        early.sendall(masked(0x1, b"CONNECT\n" + b"h:" + b"a" * 70000 + b"\n"))
        assert b"before the handshake is done" in read_until_closed(early)
        early.close()
        holders = []
        for _ in range(2):  # each holds 80,000 bytes of a 99,000-byte body: together over the budget
            s = raw_ws(ws_port)
            s.sendall(masked(0x1, b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"))
            assert s.recv(4096).startswith(b"\x81")
            s.sendall(masked(0x1, b"SEND\ndestination:/queue/partial\ncontent-length:99000\n\n" + b"a" * 40000,
                             fin=False))
            s.sendall(masked(0x0, b"a" * 40000, fin=False))
            holders.append(s)
        data = read_until_closed(holders[1])
        assert b"max_partial_frames_size" in data and data.endswith(b"<closed>"), data[-300:]
        for s in holders:
            s.close()
        assert WsStomp(ws_port).connected[0] == "CONNECTED"
