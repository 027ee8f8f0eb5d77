"""AMQP 1.0 link features through a real `petrel run` with proton: JMS selectors, dynamic
(temporary) queues, the anonymous relay, heart-beats keeping an idle connection, and
pre-settled (at-most-once) deliveries."""

from __future__ import annotations

import time

from proton import Message
from proton.reactor import AtMostOnce, Selector
from proton.utils import BlockingConnection

from petrel.testing.process import BrokerProcess


def connect(b: BrokerProcess, **kw) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=20, **kw)


def bodies(receiver, timeout: float = 1.5) -> list:
    got = []
    while True:
        try:
            m = receiver.receive(timeout=timeout)
        except Exception:
            return got
        receiver.accept()
        got.append(m.body)


def test_a_selector_filters_what_a_receiver_gets(broker):
    c = connect(broker)
    try:
        s = c.create_sender("queue://sel")
        for i in range(6):
            s.send(Message(body=f"m{i}", properties={"color": "red" if i % 2 else "blue", "n": i}))
        r = c.create_receiver("queue://sel", name="reds", options=Selector("color = 'red' AND n > 1"))
        assert bodies(r) == ["m3", "m5"]
        rest = c.create_receiver("queue://sel", name="rest")
        assert bodies(rest) == ["m0", "m1", "m2", "m4"]
    finally:
        c.close()


def test_a_dynamic_receiver_gets_a_temporary_queue_others_can_send_to(broker):
    c = connect(broker)
    other = connect(broker)
    try:
        r = c.create_receiver(None, dynamic=True)
        address = r.link.remote_source.address
        assert address
        other.create_sender(address).send(Message(body="reply"))
        assert bodies(r) == ["reply"]
    finally:
        c.close()
        other.close()


def test_the_anonymous_relay_routes_by_each_messages_to(broker):
    c = connect(broker)
    try:
        relay = c.create_sender(None)
        relay.send(Message(address="queue://relay.a", body="to a"))
        relay.send(Message(address="queue://relay.b", body="to b"))
        assert bodies(c.create_receiver("queue://relay.a")) == ["to a"]
        assert bodies(c.create_receiver("queue://relay.b")) == ["to b"]
    finally:
        c.close()


def test_heartbeats_keep_an_idle_connection_open(broker_factory):
    b = broker_factory(settings="connection_ttl = 1500\n").start()
    c = connect(b, heartbeat=1)  # the broker beats every 0.5 s; proton every 0.75 s (half the broker's 1.5 s)
    try:
        s = c.create_sender("queue://idle")
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            c.container.process()  # proton answers and sends its beats while we wait
            time.sleep(0.05)
        s.send(Message(body="after idling"))
        assert bodies(c.create_receiver("queue://idle")) == ["after idling"]
    finally:
        c.close()


def test_at_most_once_receiver_gets_pre_settled_deliveries(broker):
    c = connect(broker)
    try:
        s = c.create_sender("queue://amo")
        for i in range(3):
            s.send(Message(body=f"a{i}"))
        r = c.create_receiver("queue://amo", options=AtMostOnce())
        got = []
        for _ in range(3):
            got.append(r.receive(timeout=10).body)
        assert got == ["a0", "a1", "a2"]
        r.close()
        # settled when sent: nothing comes back
        assert bodies(c.create_receiver("queue://amo", name="again"), 1.0) == []
    finally:
        c.close()
