"""Address-full policies seen by an AMQP producer (a real `petrel run`, proton): BLOCK stops
reading the producer until consumers make room, losing nothing; FAIL rejects the transfer."""

from __future__ import annotations

import threading

import pytest
from proton import Message
from proton.utils import BlockingConnection, SendException

from petrel.testing.process import BrokerProcess, wait_for

SETTINGS = """
[address_settings."blocking"]
max_size_messages = 10
address_full_policy = "BLOCK"

[address_settings."failing"]
max_size_messages = 10
address_full_policy = "FAIL"
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("amqp-limits"), settings=SETTINGS).start()
    yield b
    b.kill9()


def connect(b: BrokerProcess) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=30)


def test_block_stops_the_producer_until_consumers_make_room(limited):
    sent: list[int] = []
    errors: list[BaseException] = []

    def produce() -> None:
        c = connect(limited)
        try:
            s = c.create_sender("queue://blocking")
            for i in range(60):
                s.send(Message(body=f"b{i}", durable=True))  # returns once accepted
                sent.append(i)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            c.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    # the producer stalls short of its 60 messages: its reads are paused while the address is full
    wait_for(lambda: len(sent) >= 10, 20)
    last = -1
    while len(sent) != last:
        last = len(sent)
        producer.join(1.0)
    assert len(sent) < 60 and producer.is_alive()
    c = connect(limited)
    try:
        r = c.create_receiver("queue://blocking", credit=5)
        got = []
        while len(got) < 60:
            got.append(r.receive(timeout=20).body)
            r.accept()
        producer.join(30)
        assert not producer.is_alive() and errors == []
        assert got == [f"b{i}" for i in range(60)]
    finally:
        c.close()


def test_fail_rejects_the_transfer_and_the_link_goes_on(limited):
    c = connect(limited)
    try:
        s = c.create_sender("queue://failing")
        for i in range(10):
            s.send(Message(body=f"f{i}"))
        with pytest.raises(SendException) as info:
            s.send(Message(body="one too many"))
        assert info.value.state == 37  # rejected (proton's PN_REJECTED)
        r = c.create_receiver("queue://failing")
        r.receive(timeout=10)
        r.accept()
        c.create_sender("queue://elsewhere")  # a round trip: the acceptance is in
        s.send(Message(body="room again"))  # the same link, accepted now
    finally:
        c.close()
