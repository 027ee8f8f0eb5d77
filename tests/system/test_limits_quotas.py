"""Clients cannot make a real `petrel run` create queues and addresses without end:
max_auto_created_queues caps auto-created and temporary queues, max_auto_created_addresses
auto-created addresses (a refusal is a clear protocol error; queues made on purpose are not
capped; the counts survive a restart), and /metrics gives series of at most metrics_max_queues."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from conftest import connect, raw, read_until_closed
from petrel.client import Connection, SendFailed
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


def _stomp(b: BrokerProcess, frames: bytes) -> bytes:
    s = raw(b, b.stomp_port)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00" + frames + b"DISCONNECT\nreceipt:bye\n\n\x00")
    return read_until_closed(s)


def _send(name: str) -> bytes:
    return f"SEND\ndestination:{name}\npersistent:true\nreceipt:r\n\nx\x00".encode()


def _http(b: BrokerProcess, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}{path}", timeout=10) as r:
        return r.read()


def test_auto_created_and_temporary_queues_are_capped(tmp_path):
    b = BrokerProcess(tmp_path / "b", http=True, settings="max_auto_created_queues = 20\n").start()
    try:
        reply = _stomp(b, b"".join(_send(f"/queue/q{i}") for i in range(20)))
        assert b"ERROR" not in reply and reply.count(b"RECEIPT") == 21, reply
        reply = _stomp(b, _send("/queue/q20"))
        assert b"ERROR" in reply and b"max_auto_created_queues" in reply, reply
        # a topic subscriber's temporary queue counts too
        reply = _stomp(b, b"SUBSCRIBE\nid:1\ndestination:/topic/news\n\n\x00")
        assert b"max_auto_created_queues" in reply, reply
        with Connection(f"tcp://127.0.0.1:{b.port}") as conn:
            with conn.session() as session:
                with pytest.raises(SendFailed, match="max_auto_created_queues"):
                    session.producer("queue://core.auto").send(b"x", wait=True)
            conn.create_queue("made.on.purpose")  # not capped
            conn.delete_queue("q3")  # one deleted: room for one more
        reply = _stomp(b, _send("/queue/q21"))
        assert b"ERROR" not in reply, reply
        reply = _stomp(b, _send("/queue/q22"))
        assert b"max_auto_created_queues" in reply, reply
        b.stop()
        b.start()  # the count is taken again from what was recovered
        reply = _stomp(b, _send("/queue/q23"))
        assert b"max_auto_created_queues" in reply, reply
        conn, listener = connect(b)  # existing queues still serve
        conn.subscribe("/queue/q0", id="1")
        assert listener.get().body == "x"
        conn.disconnect()
    finally:
        b.kill9()


def test_auto_created_addresses_are_capped(tmp_path):
    with BrokerProcess(tmp_path / "b", settings="max_auto_created_addresses = 5\n") as b:
        reply = _stomp(b, b"".join(_send(f"/topic/t{i}") for i in range(5)))
        assert b"ERROR" not in reply, reply
        reply = _stomp(b, _send("/topic/t5"))
        assert b"ERROR" in reply and b"max_auto_created_addresses" in reply, reply
        with Connection(f"tcp://127.0.0.1:{b.port}") as conn:
            conn.create_address("on.purpose")


def test_metrics_give_series_of_at_most_metrics_max_queues(tmp_path):
    with BrokerProcess(tmp_path / "b", http=True, settings="metrics_max_queues = 10\n") as b:
        with Connection(f"tcp://127.0.0.1:{b.port}") as conn:
            for i in range(300):
                conn.create_queue(f"many.{i:03d}")
        text = _http(b, "/metrics").decode()
        series = re.findall(r'^petrel_message_count\{address="[^"]*",queue="([^"]*)"\}', text, re.M)
        assert len(series) == 10, series
        assert series == sorted(series)
        total = int(float(re.search(r"^petrel_queue_count (\S+)", text, re.M).group(1)))
        assert total >= 300
        omitted = int(float(re.search(r"^petrel_queue_series_omitted (\S+)", text, re.M).group(1)))
        assert omitted == total - 10
        assert len(re.findall(r"^petrel_address_memory_usage_bytes\{", text, re.M)) == 10
        assert json.loads(_http(b, "/api/v1/queues?name=many."))["count"] == 300  # the API still lists all


def test_a_user_makes_the_broker_create_at_most_max_queues_per_user(tmp_path):
    """Artemis's max-queues: the queues a user's connections made (a STOMP auto-create, a CORE
    create, whatever the kind) count against that user only; deleting one frees a place; the
    counts survive a restart (each queue remembers who made it)."""
    from petrel.security.users import UserStore
    from petrel.testing.process import OWN_SECURITY

    b = BrokerProcess(tmp_path / "b", env=OWN_SECURITY, settings=(
        'max_queues_per_user = 2\n[security]\nusers_file = "users.toml"\nlogin_failure_delay = 100\n'))
    users = UserStore(b.workdir / "users.toml")
    for name in ("alice", "bob"):
        users.add(name, f"{name}-pw", ["admin"])
    users.save()

    def core(user: str) -> Connection:
        return Connection(f"tcp://127.0.0.1:{b.port}", user=user, password=f"{user}-pw")

    def stomp_send(user: str, queue: str) -> bytes:
        s = raw(b, b.stomp_port)
        s.sendall(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{user}\npasscode:{user}-pw\n\n\x00"
                  f"SEND\ndestination:/queue/{queue}\nreceipt:r\n\nx\x00DISCONNECT\nreceipt:bye\n\n\x00".encode())
        return read_until_closed(s)

    b.start()
    try:
        assert b"RECEIPT" in stomp_send("alice", "alice.auto")  # auto-created: hers
        with core("alice") as conn:
            conn.create_queue("alice.made")
            with pytest.raises(Exception, match="max_queues_per_user"):
                conn.create_queue("alice.third")
        refused = stomp_send("alice", "alice.auto2")
        assert b"ERROR" in refused and b"max_queues_per_user" in refused, refused
        with core("bob") as conn:  # another user's count
            conn.create_queue("bob.made")
        b.stop()
        b.start()  # the counts come back from the journal
        with core("alice") as conn:
            with pytest.raises(Exception, match="max_queues_per_user"):
                conn.create_queue("alice.third")
            conn.delete_queue("alice.made")
            conn.create_queue("alice.third")  # a place was freed
    finally:
        b.kill9()
