"""Queue and address names with wildcards, empty words, control characters or over 255 bytes
are refused on every path that creates one (STOMP auto-create, CORE, management, broker.toml)
with a clear protocol error, and never persisted: a restarted broker does not have them."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from petrel.client import Connection, RequestFailed, SendFailed
from petrel.testing.process import BrokerProcess

from conftest import connect, raw, read_until_closed

pytestmark = pytest.mark.system

BAD = ["a.#", "#", "*", "news.eu*", "a..b", ".lead", "trail.", "x\0y", "tab\there", "n" * 256]


def _post(b: BrokerProcess, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _stomp_error(b: BrokerProcess, frame: bytes) -> bytes:
    s = raw(b, b.stomp_port)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00" + frame)
    return read_until_closed(s)


def _names(b: BrokerProcess) -> tuple[set[str], set[str]]:
    with Connection(f"tcp://127.0.0.1:{b.port}") as conn:
        queues = set(conn.queue_names())
    with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}/api/v1/addresses", timeout=10) as r:
        addresses = {a["name"] for a in json.loads(r.read())["addresses"]}
    return queues, addresses


def test_bad_names_are_refused_on_every_path_and_never_persisted(tmp_path):
    b = BrokerProcess(tmp_path / "b", http=True).start()
    try:
        # STOMP: SEND and SUBSCRIBE auto-create; the ERROR names the rule
        for name in ("a.#", "a..b", "trail."):
            reply = _stomp_error(b, f"SEND\ndestination:/queue/{name}\n\nhi\x00".encode())
            assert b"ERROR" in reply and b"invalid address name" in reply, reply
        reply = _stomp_error(b, "SEND\ndestination:/queue/x\u0001y\n\nhi\x00".encode())
        assert b"control character" in reply, reply
        reply = _stomp_error(b, b"SUBSCRIBE\nid:1\ndestination:/topic/news.*\n\n\x00")
        assert b"ERROR" in reply and b"wildcard character" in reply, reply
        reply = _stomp_error(b, f"SUBSCRIBE\nid:1\ndestination:/queue/{'q' * 300}\n\n\x00".encode())
        assert b"over the 255-byte limit" in reply, reply

        # CORE: create queue / address, and a send that would auto-create
        with Connection(f"tcp://127.0.0.1:{b.port}") as conn:
            for name in BAD:
                with pytest.raises(RequestFailed, match="invalid (queue|address) name"):
                    conn.create_queue(name)
                with pytest.raises(RequestFailed, match="invalid address name"):
                    conn.create_address(name)
            with pytest.raises(RequestFailed, match="invalid address name"):
                conn.create_queue("fine", address="bad.*")
            with conn.session() as session:
                producer = session.producer("orders.#")
                with pytest.raises(SendFailed, match="wildcard character"):
                    producer.send(b"x", wait=True)
            conn.create_queue("orders.eu")  # good names still work
            conn.create_queue("n" * 255)

        # management API: 400 with the reason, not a 500
        for name in ("a.#", "a..b", "x\0y"):
            status, body = _post(b, "/api/v1/queues", {"name": name})
            assert status == 400 and "invalid queue name" in json.dumps(body), (status, body)
            status, body = _post(b, "/api/v1/addresses", {"name": name})
            assert status == 400 and "invalid address name" in json.dumps(body), (status, body)

        # a real client still works after all that
        stomp_conn, listener = connect(b)
        stomp_conn.subscribe("/queue/orders.eu", id="1")
        stomp_conn.send("/queue/orders.eu", "ok")
        assert listener.get().body == "ok"
        stomp_conn.disconnect()

        b.stop()
        b.start()
        queues, addresses = _names(b)
        assert "orders.eu" in queues and "n" * 255 in queues
        for name in BAD + ["fine"]:
            assert name not in queues and name not in addresses
        assert not [n for n in queues | addresses if "#" in n or "*" in n or ".." in n or "\0" in n]
    finally:
        b.kill9()


def test_a_bad_queue_name_in_broker_toml_is_a_config_error(tmp_path):
    b = BrokerProcess(tmp_path / "b", settings='[[queues]]\nname = "orders.#"\n')
    result = subprocess.run([sys.executable, "-m", "petrel", "run", "--config", str(b.config_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "queues[0].name: invalid name: it holds the wildcard character '#'" in result.stderr
