"""TLS with real certificates (made at run time) against real `petrel run` processes: STOMP with
stomp.py, CORE with Petrel's client, mutual TLS, refusals (wrong CA, expired, no certificate,
plain TCP, silent sockets) that never take the broker down, and management over HTTPS."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import urllib.request

import pytest
import stomp

from conftest import Listener
from petrel.client import ClientError, ConnectionFailed, Message, connect
from petrel.management.client import ManagementClient, ManagementError
from petrel.testing.certs import make_pki
from petrel.security import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess, wait_for

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki, **extra: object) -> str:
    values = {"ssl_enabled": True, "ssl_cert": pki.server.cert, "ssl_key": pki.server.key, "ssl_ca": pki.ca.cert,
              "ssl_handshake_timeout": 2000, **extra}
    lines = []
    for key, value in values.items():
        text = ("true" if value else "false") if isinstance(value, bool) else (
            str(value) if isinstance(value, int) else json.dumps(str(value)))
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki):
    """TLS on both acceptors, client certificates optional (checked against the CA when sent)."""
    b = BrokerProcess(tmp_path_factory.mktemp("tls") / "b", settings=tls_settings(pki), http=True)
    b.start()
    yield b
    b.kill9()


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki):
    """Mutual TLS: a client certificate signed by the CA is required."""
    b = BrokerProcess(tmp_path_factory.mktemp("mtls") / "b", settings=tls_settings(pki, ssl_need_client_auth=True))
    b.start()
    yield b
    b.kill9()


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def core_url(b: BrokerProcess, pki, host: str = "127.0.0.1", **options: object) -> str:
    query = {"trustStorePath": pki.ca.cert, **options}
    return f"ssl://{host}:{b.port}?" + "&".join(f"{k}={v}" for k, v in query.items())


async def round_trip(url: str, queue: str, body: bytes = b"over TLS") -> bytes:
    async with await connect(url) as conn:
        session = await conn.session()
        producer = session.producer(f"queue://{queue}")
        await producer.send(Message(body, durable=True), wait=True)
        consumer = await session.consumer(f"queue://{queue}")
        message = await consumer.receive(10)
        assert message is not None
        return message.body


def stomp_over_tls(port: int, pki, cert=None) -> tuple[stomp.Connection, Listener]:
    conn = stomp.Connection([("127.0.0.1", port)], heartbeats=(0, 0), reconnect_attempts_max=1)
    conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(pki.ca.cert),
                 cert_file=str(cert.cert) if cert else None, key_file=str(cert.key) if cert else None)
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(wait=True)
    return conn, listener


def handshake_failures(b: BrokerProcess) -> int:
    return b.log().count("TLS handshake failed")


def wait_logged(b: BrokerProcess, text: str) -> None:
    wait_for(lambda: text in b.log(), 10, message=f"{text!r} not in the log:\n{b.log()}")


# -- STOMP ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["stomp_port", "port"])
def test_stomp_over_tls_with_stomp_py(tls_broker, pki, which):
    conn, listener = stomp_over_tls(getattr(tls_broker, which), pki)
    try:
        conn.subscribe(f"/queue/tls.stomp.{which}", id="1", ack="auto")
        conn.send(f"/queue/tls.stomp.{which}", "secret body", headers={"persistent": "true", "receipt": "r1"})
        assert listener.receipts.get(timeout=10) == "r1"
        assert listener.get().body == "secret body"
    finally:
        conn.disconnect()


def test_stomp_with_a_client_certificate_under_mutual_tls(mtls_broker, pki):
    conn, listener = stomp_over_tls(mtls_broker.stomp_port, pki, cert=pki.client)
    try:
        conn.send("/queue/tls.mutual", "hello", headers={"receipt": "r"})
        assert listener.receipts.get(timeout=10) == "r"
    finally:
        conn.disconnect()


# -- CORE -------------------------------------------------------------------------------------------


def test_core_over_tls_with_petrels_client(tls_broker, pki):
    assert run(round_trip(core_url(tls_broker, pki), "tls.core")) == b"over TLS"
    # by name too: the certificate holds localhost
    assert run(round_trip(core_url(tls_broker, pki, host="localhost"), "tls.core.name")) == b"over TLS"


def test_core_failover_url_with_tls_endpoints(tls_broker, pki):
    url = (f"failover:(ssl://127.0.0.1:{tls_broker.port},ssl://localhost:{tls_broker.port})"
           f"?randomize=false&maxReconnectAttempts=0&trustStorePath={pki.ca.cert}")
    assert run(round_trip(url, "tls.failover")) == b"over TLS"
    # sslEnabled=true (Artemis's option) makes tcp:// endpoints TLS
    url = f"tcp://127.0.0.1:{tls_broker.port}?sslEnabled=true&trustStorePath={pki.ca.cert}"
    assert run(round_trip(url, "tls.enabled")) == b"over TLS"


def test_mutual_tls_core_with_a_client_certificate(mtls_broker, pki):
    url = core_url(mtls_broker, pki, keyStorePath=pki.client.cert, sslKey=pki.client.key)
    assert run(round_trip(url, "tls.mutual.core")) == b"over TLS"


def test_an_unknown_ca_is_a_clear_client_error(tls_broker, pki):
    with pytest.raises(ConnectionFailed) as info:
        run(round_trip(f"ssl://127.0.0.1:{tls_broker.port}", "never"))  # the system's CAs only
    message = str(info.value)
    assert "the broker's certificate is not trusted" in message and "trustStorePath" in message


def test_a_certificate_for_another_host_is_refused_unless_verify_host_is_off(tmp_path, pki):
    elsewhere = pki.ca.issue("elsewhere", "elsewhere", hosts=("elsewhere.example",))
    settings = tls_settings(pki, ssl_cert=elsewhere.cert, ssl_key=elsewhere.key)
    with BrokerProcess(tmp_path / "b", settings=settings) as b:
        with pytest.raises(ConnectionFailed) as info:
            run(round_trip(core_url(b, pki), "never"))
        assert "not trusted" in str(info.value) and "verifyHost=false" in str(info.value)
        assert run(round_trip(core_url(b, pki, verifyHost="false"), "tls.noverify")) == b"over TLS"


def test_client_option_errors_name_the_option(tls_broker, pki, tmp_path):
    with pytest.raises(ValueError, match="trustStorePath: no such file"):
        run(round_trip(f"ssl://127.0.0.1:{tls_broker.port}?trustStorePath={tmp_path}/none.pem", "never"))
    with pytest.raises(ValueError, match="keyStorePath"):
        run(round_trip(core_url(tls_broker, pki, keyStorePath=pki.ca.cert), "never"))


def stomp_connect_raw(port: int, pki, cert, headers: str = "") -> bytes:
    """What the broker answers a STOMP CONNECT over TLS with ``cert``, until it closes."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(cert.cert, cert.key)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(f"CONNECT\naccept-version:1.2\nhost:x\n{headers}\n\x00".encode())
            answer = b""
            while b"\x00" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            return answer


def test_mutual_tls_logs_the_certificate_subject_in_as_its_user(tmp_path, pki):
    users = tmp_path / "users.toml"
    store = UserStore(users)
    store.add("alice", "alice-password", ["app"])
    store.add("carol", "carol-password", ["app"])
    store.save()
    bob = pki.ca.issue("bob", "bob", hosts=())  # signed by the CA, mapped to nobody
    settings = tls_settings(pki, ssl_need_client_auth=True) + f"""
[security]
users_file = {json.dumps(str(users))}
certificate_users = {{ {json.dumps(pki.client.subject)} = "alice" }}
login_failure_delay = 0

[security_settings."tls.#"]
send = ["app"]
consume = ["app"]
createAddress = ["app"]
createDurableQueue = ["app"]
"""
    with BrokerProcess(tmp_path / "b", settings=settings, env=OWN_SECURITY) as b:
        conn, listener = stomp_over_tls(b.stomp_port, pki, cert=pki.client)  # no login header
        try:
            conn.subscribe("/queue/tls.cert", id="1", ack="auto")
            conn.send("/queue/tls.cert", "as alice", headers={"receipt": "r"})
            assert listener.receipts.get(timeout=10) == "r"
            assert listener.get().body == "as alice"
        finally:
            conn.disconnect()
        answer = stomp_connect_raw(b.stomp_port, pki, bob)
        assert answer.startswith(b"ERROR") and b"no user is mapped to the certificate subject" in answer
        # a user and password still log in over the same mutual TLS
        answer = stomp_connect_raw(b.stomp_port, pki, bob, "login:carol\npasscode:carol-password\n")
        assert answer.startswith(b"CONNECTED"), answer
        # CORE: the same mapping
        alice = core_url(b, pki, keyStorePath=pki.client.cert, sslKey=pki.client.key)
        assert run(round_trip(alice, "tls.cert.core")) == b"over TLS"
        with pytest.raises(ClientError, match="no user is mapped to the certificate subject"):
            run(round_trip(core_url(b, pki, keyStorePath=bob.cert, sslKey=bob.key), "tls.cert.core"))
        carol = core_url(b, pki, keyStorePath=bob.cert, sslKey=bob.key, user="carol", password="carol-password")
        assert run(round_trip(carol, "tls.cert.core")) == b"over TLS"
        assert b.proc.poll() is None


# -- refusals ---------------------------------------------------------------------------------------


def test_no_client_certificate_when_one_is_required_is_refused(mtls_broker, pki):
    before = handshake_failures(mtls_broker)
    with pytest.raises(ConnectionFailed) as info:
        run(round_trip(core_url(mtls_broker, pki), "never"))
    assert "client certificate" in str(info.value)
    wait_logged(mtls_broker, "no client certificate")
    assert handshake_failures(mtls_broker) > before


@pytest.mark.parametrize("which", ["stranger", "expired"])
def test_a_client_certificate_from_another_ca_or_expired_is_refused(mtls_broker, pki, which):
    cert = getattr(pki, which)
    with pytest.raises(ConnectionFailed):
        run(round_trip(core_url(mtls_broker, pki, keyStorePath=cert.cert, sslKey=cert.key), "never"))
    wait_logged(mtls_broker, "expired" if which == "expired" else "unable to get local issuer certificate")
    # STOMP too: the broker answers nothing and closes
    assert stomp_refused(mtls_broker.stomp_port, pki, cert)


def stomp_refused(port: int, pki, cert) -> bool:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(cert.cert, cert.key)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
                return sock.recv(4096) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_an_expired_server_certificate_is_refused_by_the_client(tmp_path, pki):
    settings = tls_settings(pki, ssl_cert=pki.expired_server.cert, ssl_key=pki.expired_server.key)
    with BrokerProcess(tmp_path / "b", settings=settings) as b:
        with pytest.raises(ConnectionFailed, match="expired"):
            run(round_trip(core_url(b, pki), "never"))


def test_plain_tcp_hello_to_a_tls_port_is_closed_and_the_broker_still_serves(tls_broker, pki):
    for port in (tls_broker.port, tls_broker.stomp_port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
            assert sock.recv(4096) == b""  # closed, no STOMP answer
    wait_logged(tls_broker, "not a TLS client")
    with pytest.raises(ConnectionFailed):
        run(round_trip(f"tcp://127.0.0.1:{tls_broker.port}", "never"))
    assert run(round_trip(core_url(tls_broker, pki), "tls.after.plain")) == b"over TLS"


def test_a_silent_socket_is_dropped_at_the_handshake_timeout(tls_broker, pki):
    with socket.create_connection(("127.0.0.1", tls_broker.port), timeout=15) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""  # the broker closes it (ssl_handshake_timeout = 2 s)
        assert time.monotonic() - started < 12
    wait_logged(tls_broker, "no handshake in time")
    assert run(round_trip(core_url(tls_broker, pki), "tls.after.silent")) == b"over TLS"


# -- management over HTTPS -----------------------------------------------------------------------------


def test_management_over_https(tmp_path, pki):
    settings = tls_settings(pki, http_ssl_enabled=True, ssl_need_client_auth=True)
    with BrokerProcess(tmp_path / "b", settings=settings, http=True) as b:
        https = f"https://127.0.0.1:{b.http_port}"
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        # no client certificate needed on the management port: it has its own authentication
        with urllib.request.urlopen(f"{https}/health", context=context, timeout=10) as r:
            assert json.loads(r.read())["status"] == "ok"
        assert ManagementClient(https, ca=str(pki.ca.cert)).get("/api/v1/broker")["name"]
        with pytest.raises(ManagementError, match="certificate"):
            ManagementClient(https).get("/api/v1/broker")  # the system's CAs do not know ours
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}/health", timeout=5)
        # the CLI: https:// with the CA in PETREL_MANAGEMENT_CA
        import subprocess

        from cli_process import command, environment

        stat = subprocess.run(command("queue", "stat", "--url", https), capture_output=True, text=True, timeout=60,
                              env={**environment(), "PETREL_MANAGEMENT_CA": str(pki.ca.cert)})
        assert stat.returncode == 0 and "MESSAGE_COUNT" in stat.stdout, stat.stderr
        stat = subprocess.run(command("queue", "stat", "--url", https), capture_output=True, text=True, timeout=60,
                              env=environment())
        assert stat.returncode != 0 and "PETREL_MANAGEMENT_CA" in stat.stderr, stat.stderr


# -- the CLI ------------------------------------------------------------------------------------------


def test_cli_producer_and_consumer_over_tls(tls_broker, pki):
    import subprocess

    from cli_process import command, environment

    def petrel(*args: str, env: dict[str, str] | None = None) -> str:
        out = subprocess.run(command(*args), capture_output=True, text=True, timeout=60,
                             env={**environment(), **(env or {})})
        assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out.stdout

    url = core_url(tls_broker, pki)
    petrel("producer", "--url", url, "--destination", "queue://tls.cli", "--message-count", "10")
    assert "Consumed: 10 messages" in petrel("consumer", "--url", url, "--destination", "queue://tls.cli",
                                             "--message-count", "10")
    stomp_url = f"ssl://127.0.0.1:{tls_broker.stomp_port}?trustStorePath={pki.ca.cert}"
    petrel("producer", "--protocol", "stomp", "--url", stomp_url, "--destination", "queue://tls.cli.stomp",
           "--message-count", "10")
    assert "Consumed: 10 messages" in petrel("consumer", "--protocol", "stomp", "--url", stomp_url,
                                             "--destination", "queue://tls.cli.stomp", "--message-count", "10")
    bad = subprocess.run(command("producer", "--url", f"ssl://127.0.0.1:{tls_broker.port}", "--destination",
                                 "queue://tls.cli", "--message-count", "1"),
                         capture_output=True, text=True, timeout=60, env=environment())
    assert bad.returncode != 0 and "not trusted" in bad.stderr, bad.stderr


def test_a_flood_of_silent_sockets_is_capped_and_cleared(tmp_path, pki):
    """Handshakes under way are capped (max_connections per listener): sockets over the cap are
    closed at once, those under it at ssl_handshake_timeout; then clients connect again."""
    settings = tls_settings(pki, max_connections=3, ssl_handshake_timeout=6000)
    with BrokerProcess(tmp_path / "b", settings=settings) as b:
        time.sleep(0.5)  # wait_ready's probes are gone
        silent = [socket.create_connection(("127.0.0.1", b.port), timeout=15) for _ in range(3)]
        try:
            time.sleep(0.3)
            with socket.create_connection(("127.0.0.1", b.port), timeout=5) as extra:
                started = time.monotonic()
                assert extra.recv(1) == b""  # closed at once, not after the timeout
                assert time.monotonic() - started < 4  # (the timeout is 6 s)
            wait_logged(b, "TLS handshakes under way")
            for sock in silent:
                assert sock.recv(1) == b""  # ssl_handshake_timeout
        finally:
            for sock in silent:
                sock.close()
        assert run(round_trip(core_url(b, pki), "tls.after.flood")) == b"over TLS"


def test_a_drain_into_a_tls_only_target(tmp_path, pki):
    """`petrel drain --target ssl://...` moves an orphaned directory into a broker that speaks only
    TLS, trusting the CA of --config's ssl_ca; without it the certificate is refused, clearly."""
    import subprocess
    import sys

    from petrel.testing.ha import send_range

    src = BrokerProcess(tmp_path / "src").start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://orders", range(200)))
    src.kill9()
    dst = BrokerProcess(tmp_path / "dst", settings=tls_settings(pki)).start()
    try:
        command = [sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir),
                   "--target", f"ssl://127.0.0.1:{dst.port}", "--progress", "json"]
        refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1 and "certificate" in refused.stderr.lower(), refused.stderr
        config = tmp_path / "drain.toml"
        config.write_text(f"ssl_ca = {json.dumps(str(pki.ca.cert))}\n")
        done = subprocess.run([*command, "--config", str(config)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1])["messages_moved"] == 200

        async def count() -> int:
            async with await connect(core_url(dst, pki)) as conn:
                return (await conn.queue_info("orders"))["message_count"]

        assert run(count()) == 200
    finally:
        dst.kill9()
