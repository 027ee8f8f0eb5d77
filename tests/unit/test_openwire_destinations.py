"""ActiveMQ's destination names as Petrel's: wildcards for topic consumers, composite
destinations for producers, and the refusals of what Petrel does not take."""

from __future__ import annotations

import pytest

from petrel.codec.openwire import DataType, Destination, Message, ProducerId
from petrel.core.message import RoutingType
from petrel.server.adapters.openwire_destinations import consumer_address, consumer_parts, send_targets
from petrel.server.adapters.openwire_producers import message_size
from petrel.server.refusals import Refused

A, M = RoutingType.ANYCAST, RoutingType.MULTICAST


def topic(name: str) -> Destination:
    return Destination(DataType.ACTIVEMQ_TOPIC, name)


def queue(name: str) -> Destination:
    return Destination(DataType.ACTIVEMQ_QUEUE, name)


@pytest.mark.parametrize("name, address", [
    ("prices", ("prices", False)),
    ("prices.>", ("prices.#", True)),
    ("prices.*.eu", ("prices.*.eu", True)),
    ("*.>", ("*.#", True)),
    (">", ("#", True)),
])
def test_topic_consumer_wildcards(name, address):
    assert consumer_address(topic(name)) == address


def test_queue_consumer_wildcards():
    assert consumer_address(queue("orders.>")) == ("orders.#", True)
    assert consumer_address(queue("orders.*.eu")) == ("orders.*.eu", True)
    assert consumer_parts(queue("orders.>")) == [("orders.#", A, True)]


def test_composite_consumers():
    assert consumer_parts(queue("a,b")) == [("a", A, False), ("b", A, False)]
    assert consumer_parts(topic("a, queue://b.>,a")) == [("a", M, False), ("b.#", A, True)]
    assert consumer_parts(queue("queue://a,topic://t.*")) == [("a", A, False), ("t.*", M, True)]
    for bad in (",", "a,b.>.c", "a,b..*"):
        with pytest.raises(Refused):
            consumer_parts(queue(bad))


@pytest.mark.parametrize("dest, why", [
    (queue("orders.>.eu"), "last word"),
    (topic("a.>.b"), "last word"),
    (topic("a..*"), "empty word"),
    (topic("a,b"), "composite"),
    (queue("queue://a,queue://b"), "composite"),
])
def test_refused_consumers(dest, why):
    with pytest.raises(Refused, match=why):
        consumer_address(dest)


def test_composite_destinations():
    assert send_targets(queue("orders")) == [("orders", A)]
    assert send_targets(topic("news")) == [("news", M)]
    assert send_targets(queue("a,b")) == [("a", A), ("b", A)]
    assert send_targets(topic("a, b")) == [("a", M), ("b", M)]
    assert send_targets(queue("queue://a,topic://b,c,a")) == [("a", A), ("b", M), ("c", A)]
    with pytest.raises(Refused, match="names no destination"):
        send_targets(queue(" , "))
    for name in ("prices.>", "prices.*.eu", "a,topic://b.>"):
        with pytest.raises(Refused, match="wildcard destination"):
            send_targets(topic(name))


def test_message_size_as_activemq_counts_it():
    m = Message(kind=DataType.ACTIVEMQ_BYTES_MESSAGE, producer_id=ProducerId("c", 1, 1), content=b"x" * 100)
    assert message_size(m) == 1124
    assert message_size(Message(content=b"", properties={"a": 1})) == 1024 + 4 + 2 + 1 + 1 + 4
