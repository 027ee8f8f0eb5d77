"""AMQP 1.0 link features through a real `petrel run` with proton: JMS selectors, dynamic
(temporary) queues, the anonymous relay, heart-beats keeping an idle connection, drain, and
pre-settled (at-most-once) deliveries."""

from __future__ import annotations

import threading
import time

import pytest
from proton import Data, Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, DurableSubscription, ReceiverOption, Selector, SenderOption
from proton.utils import BlockingConnection, SendException

from petrel.testing.process import BrokerProcess


def connect(b: BrokerProcess, **kw) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=20, **kw)


class DynamicTarget(SenderOption):
    """A sender asking for a dynamic target (how Qpid JMS makes a temporary queue)."""

    def apply(self, sender) -> None:
        sender.target.dynamic = True


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


def test_a_dynamic_receiver_gets_a_temporary_queue_gone_when_its_link_closes(broker_factory):
    b = broker_factory(settings='[address_settings."dyn.#"]\nauto_create_addresses = false\n'
                                'auto_create_queues = false\n').start()
    c = connect(b)
    other = connect(b)
    try:
        r = c.create_receiver(None, dynamic=True)
        address = r.link.remote_source.address
        assert address.startswith("dyn.")
        s = other.create_sender(address)
        s.send(Message(body="reply"))
        assert bodies(r) == ["reply"]
        r.close()  # delete-on-close: the temporary queue goes with its link
        with pytest.raises(SendException):
            s.send(Message(body="too late"))
        # a temporary queue made by a dynamic target goes with the connection
        t = c.create_sender(None, options=DynamicTarget())
        target = t.link.remote_target.address
        s2 = other.create_sender(target)
        s2.send(Message(body="while it lives"))
        c.close()
        with pytest.raises(SendException):
            s2.send(Message(body="after the connection"))
    finally:
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


class Drainer(MessagingHandler):
    """Drain a receiver (credit 10, drain mode, as Qpid JMS's receiveNoWait does): the broker sends
    what it has, then answers with the credit used up."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__(prefetch=0)
        self.url, self.address = url, address
        self.bodies: list[str] = []
        self.drained_with_credit: int | None = None

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.url)
        self.receiver = event.container.create_receiver(self.conn, self.address)

    def on_link_opened(self, event) -> None:
        if event.link.name == self.receiver.name:  # (proton's wrappers are new objects each time)
            self.receiver.drain(10)

    def on_message(self, event) -> None:
        self.bodies.append(event.message.body)

    def on_link_flow(self, event) -> None:
        if event.link.name == self.receiver.name and not self.receiver.draining() and self.drained_with_credit is None:
            self.drained_with_credit = self.receiver.credit
            self.conn.close()


def test_drain_sends_what_there_is_then_gives_the_credit_back(broker):
    c = connect(broker)
    s = c.create_sender("queue://drain")
    for i in range(3):
        s.send(Message(body=f"d{i}"))
    c.close()
    drainer = Drainer(f"amqp://127.0.0.1:{broker.port}", "queue://drain")
    thread = threading.Thread(target=Container(drainer).run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert drainer.bodies == ["d0", "d1", "d2"]
    assert drainer.drained_with_credit == 0


class Capabilities(ReceiverOption):
    """Source capabilities, as Qpid JMS sets them for shared subscriptions ("shared", "global")."""

    def __init__(self, *caps: str) -> None:
        self.caps = caps

    def apply(self, receiver) -> None:
        data = receiver.source.capabilities
        data.put_array(False, Data.SYMBOL)
        data.enter()
        for cap in self.caps:
            data.put_symbol(cap)
        data.exit()


def test_a_shared_subscription_spreads_over_its_links_and_goes_with_the_last(broker):
    c = connect(broker)
    try:
        r1 = c.create_receiver("topic://shared.t", name="sub", options=Capabilities("shared", "topic"), credit=3)
        r2 = c.create_receiver("topic://shared.t", name="sub|2", options=Capabilities("shared", "topic"), credit=3)
        s = c.create_sender("topic://shared.t")
        for i in range(6):
            s.send(Message(body=f"s{i}"))
        got1, got2 = bodies(r1), bodies(r2)
        assert sorted(got1 + got2) == [f"s{i}" for i in range(6)]  # each once, not once per link
        assert got1 and got2
        r1.close()
        r2.close()
        s.send(Message(body="nobody subscribed"))
        r3 = c.create_receiver("topic://shared.t", name="sub", options=Capabilities("shared", "topic"))
        assert bodies(r3, 1.0) == []  # a new subscription: the old one went with its last link
    finally:
        c.close()


def test_a_global_shared_durable_subscription_is_one_queue_across_containers(broker):
    a = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20, container=Container(container_id="app-a"))
    b = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20, container=Container(container_id="app-b"))
    try:
        options = [DurableSubscription(), Capabilities("shared", "global", "topic")]
        ra = a.create_receiver("topic://shared.g", name="gsub|global", options=options, credit=2)
        rb = b.create_receiver("topic://shared.g", name="gsub|global", options=options, credit=2)
        s = a.create_sender("topic://shared.g")
        for i in range(4):
            s.send(Message(body=f"g{i}", durable=True))
        got_a, got_b = bodies(ra), bodies(rb)
        assert sorted(got_a + got_b) == ["g0", "g1", "g2", "g3"]
        ra.detach()
        rb.detach()
        s.send(Message(body="kept", durable=True))  # the subscription outlives its links
        rc = b.create_receiver("topic://shared.g", name="gsub|global2", options=options)
        assert bodies(rc) == ["kept"]
    finally:
        a.close()
        b.close()
