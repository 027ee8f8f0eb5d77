"""The post office with remote bindings: load balancing, forwarding, bridged receipt, redistribution."""

from __future__ import annotations

import pytest
from office_harness import consume, make_office, msg

from petrel.core.message import RoutingType
from petrel.core.postoffice import SendOutcome
from petrel.core.remote import KEY_SEPARATOR, ROUTE_TO, Balancing, RemoteBinding
from petrel.core.selector import compile_selector

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST


class FakeLink:
    """The next hop: what the cluster's bridge is to the post office (a node id and its SF queue)."""

    def __init__(self, office, node_id: str) -> None:
        self.node_id = node_id
        self.connected = True
        self.sf_queue = office.create_queue(f"$.petrel.sf.test.{node_id}", f"$.petrel.sf.test.{node_id}", ANY)


def remote(office, link, name, address, rt=ANY, consumers=0, selector=None, consumer_selectors=None):
    b = RemoteBinding(f"{name}@{link.node_id}", name, name, address, rt,
                      compile_selector(selector) if selector else None, origin=link.node_id, distance=1,
                      link=link, consumer_count=consumers,
                      consumer_selectors=[compile_selector(s) if s else None for s in consumer_selectors or []])
    office.add_remote_binding(b)
    return b


def forwarded(link):
    """(route-to keys, body) of every copy waiting in the link's store-and-forward queue."""
    return [(r.message.properties[ROUTE_TO].split(KEY_SEPARATOR), r.message.body) for r in link.sf_queue.iter_refs()]


def send(office, address, n, rt=ANY, **kw):
    for i in range(n):
        result = office.send(msg(office, address, body=str(i).encode(), **kw), rt)
        assert result.outcome == SendOutcome.ROUTED


@pytest.fixture
def office():
    office, clock = make_office()
    office.clock = clock
    return office


def test_on_demand_keeps_messages_local_while_no_remote_consumer(office) -> None:
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=0)
    send(office, "orders", 4)
    assert office.queues["orders"].message_count == 4
    assert forwarded(link) == []


def test_on_demand_sends_everything_to_the_only_node_with_a_consumer(office) -> None:
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=1)
    send(office, "orders", 4)
    assert office.queues["orders"].message_count == 0
    assert forwarded(link) == [(["orders"], str(i).encode()) for i in range(4)]


def test_on_demand_round_robins_when_both_sides_consume(office) -> None:
    office.create_queue("orders", "orders", ANY)
    _, sink = consume(office, "orders")
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=2)
    send(office, "orders", 6)
    assert len(sink.got) == 3 and len(forwarded(link)) == 3


def test_on_demand_honours_remote_consumer_filters(office) -> None:
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=1, consumer_selectors=["colour = 'red'"])
    office.send(msg(office, "orders", body=b"red", properties={"colour": "red"}), ANY)
    office.send(msg(office, "orders", body=b"blue", properties={"colour": "blue"}), ANY)
    assert [body for _, body in forwarded(link)] == [b"red"]
    assert office.queues["orders"].message_count == 1


def test_strict_round_robins_without_consumers(office) -> None:
    office.balancing = Balancing.STRICT
    office.create_queue("orders", "orders", ANY)
    b, c = FakeLink(office, "B"), FakeLink(office, "C")
    remote(office, b, "orders", "orders")
    remote(office, c, "orders", "orders")
    send(office, "orders", 9)
    assert office.queues["orders"].message_count == 3
    assert len(forwarded(b)) == 3 and len(forwarded(c)) == 3


def test_a_disconnected_node_is_skipped(office) -> None:
    office.balancing = Balancing.STRICT
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=1)
    link.connected = False
    send(office, "orders", 4)
    assert office.queues["orders"].message_count == 4


@pytest.mark.parametrize("mode", [Balancing.OFF, Balancing.OFF_WITH_REDISTRIBUTION])
def test_off_modes_never_forward_anycast_but_multicast_reaches_every_subscription(office, mode) -> None:
    office.balancing = mode
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    remote(office, link, "orders", "orders", consumers=5)
    send(office, "orders", 3)
    assert office.queues["orders"].message_count == 3
    remote(office, link, "sub1", "news", MULTI)
    send(office, "news", 1, rt=MULTI)
    assert forwarded(link) == [(["sub1"], b"0")]


def test_multicast_sends_one_copy_per_node_naming_each_subscription(office) -> None:
    office.create_queue("local-sub", "news", MULTI)
    b, c = FakeLink(office, "B"), FakeLink(office, "C")
    remote(office, b, "s1", "news", MULTI)
    remote(office, b, "s2", "news", MULTI, selector="x = 1")
    remote(office, b, "s3", "news", MULTI)
    remote(office, c, "s4", "news", MULTI)
    office.send(msg(office, "news", body=b"m", properties={"x": 2}), MULTI)
    assert forwarded(b) == [(["s1", "s3"], b"m")]
    assert forwarded(c) == [(["s4"], b"m")]
    assert office.queues["local-sub"].message_count == 1


def test_forwarded_messages_reach_the_named_queues_once_per_duplicate_id(office) -> None:
    office.create_queue("orders", "orders", ANY)
    office.create_queue("other", "orders", ANY)
    first = office.receive_forwarded(msg(office, "orders", body=b"a"), ["orders"], "nodeA:17")
    again = office.receive_forwarded(msg(office, "orders", body=b"a"), ["orders"], "nodeA:17")
    assert (first.outcome, again.outcome) == (SendOutcome.ROUTED, SendOutcome.DUPLICATE)
    assert office.queues["orders"].message_count == 1
    assert office.queues["other"].message_count == 0


def test_a_forwarded_message_can_go_on_to_the_next_hop(office) -> None:
    link = FakeLink(office, "C")
    remote(office, link, "orders", "orders", consumers=1)
    result = office.receive_forwarded(msg(office, "orders", body=b"a"), ["orders@C"], "nodeA:1")
    assert result.outcome == SendOutcome.ROUTED
    assert forwarded(link) == [(["orders"], b"a")]


def test_redistribution_moves_messages_after_the_delay() -> None:
    office, clock = make_office({"#": {"redistribution_delay": 1000}})
    office.create_queue("orders", "orders", ANY)
    consumer, _ = consume(office, "orders", window=0)
    link = FakeLink(office, "B")
    binding = remote(office, link, "orders", "orders", consumers=0)
    send(office, "orders", 5)
    office.queues["orders"].remove_consumer(consumer)  # idle from now
    office.update_remote_consumers(binding.key, 1, [None])
    clock.advance(500)
    assert office.queues["orders"].message_count == 5
    clock.advance(600)
    assert office.queues["orders"].message_count == 0
    assert [body for _, body in forwarded(link)] == [str(i).encode() for i in range(5)]
    assert office.messages_redistributed == 5


def test_no_redistribution_while_a_local_consumer_stays_or_when_off() -> None:
    office, clock = make_office({"#": {"redistribution_delay": 0}})
    office.create_queue("orders", "orders", ANY)
    consume(office, "orders", window=0)  # attached but taking nothing
    link = FakeLink(office, "B")
    office.balancing = Balancing.OFF_WITH_REDISTRIBUTION
    remote(office, link, "orders", "orders", consumers=1)
    send(office, "orders", 3)
    clock.advance(10)
    assert office.queues["orders"].message_count == 3
    office2, clock2 = make_office({"#": {"redistribution_delay": 0}})
    office2.balancing = Balancing.STRICT
    office2.create_queue("orders", "orders", ANY)
    link2 = FakeLink(office2, "B")
    send(office2, "orders", 2)
    remote(office2, link2, "orders", "orders", consumers=1)
    clock2.advance(10)
    assert office2.queues["orders"].message_count == 2


def test_redistribution_includes_scheduled_messages() -> None:
    office, clock = make_office({"#": {"redistribution_delay": 0}})
    office.balancing = Balancing.OFF_WITH_REDISTRIBUTION
    office.create_queue("orders", "orders", ANY)
    link = FakeLink(office, "B")
    send(office, "orders", 1, scheduled=clock.now + 60_000)
    send(office, "orders", 1)
    remote(office, link, "orders", "orders", consumers=1)
    clock.advance(1)
    assert office.queues["orders"].message_count == 0
    assert len(list(link.sf_queue.iter_refs())) == 2


def test_remote_consumer_counts_never_go_negative(office) -> None:
    link = FakeLink(office, "B")
    binding = remote(office, link, "orders", "orders", consumers=1)
    office.update_remote_consumers(binding.key, -3, [])
    assert binding.consumer_count == 0


@pytest.mark.parametrize("policy", ["FAIL", "BLOCK", "DROP"])
def test_forwarded_messages_respect_a_full_address(policy) -> None:
    from petrel.core.limits import AddressFull

    office, _ = make_office({"orders": {"max_size_bytes": 2000, "address_full_policy": policy}})
    office.create_queue("orders", "orders", ANY)
    office.receive_forwarded(msg(office, "orders", body=b"x" * 3000), ["orders"], "n:1")  # fills it
    late = msg(office, "orders", body=b"y")
    if policy == "DROP":
        assert office.receive_forwarded(late, ["orders"], "n:2").outcome == SendOutcome.DROPPED
    else:
        with pytest.raises(AddressFull, match="stays on the sending node"):
            office.receive_forwarded(late, ["orders"], "n:2")
        # not remembered as received: the bridge's retry gets in once there is room
        office.queues["orders"].purge()
        assert office.receive_forwarded(late, ["orders"], "n:2").outcome == SendOutcome.ROUTED
    assert office.queues["orders"].message_count == 1  # the first message, or the late one after the purge


def test_a_remote_binding_on_a_pattern_address_gets_what_is_sent_to_matching_addresses(office) -> None:
    link = FakeLink(office, "B")
    remote(office, link, "sub-star", "news.*", MULTI)
    remote(office, link, "sub-hash", "news.#", MULTI, selector="kind = 'x'")
    with office.names_from_elsewhere():  # a pattern address, as MQTT makes it
        office.ensure_address_for("news.#", MULTI)
        office.create_queue("local-hash", "news.#", MULTI)
    send(office, "news.eu", 1, MULTI, properties={"kind": "x"})
    send(office, "news.eu.fr", 1, MULTI, properties={"kind": "y"})  # only the local pattern queue
    assert [(sorted(keys), body) for keys, body in forwarded(link)] == [
        (["sub-hash", "sub-star"], b"0")]  # one copy for the node, naming both of its queues
    assert office.queues["local-hash"].message_count == 2
    office.remove_remote_binding("sub-star@B")
    office.remove_remote_binding("sub-hash@B")
    send(office, "news.us", 1, MULTI, properties={"kind": "x"})
    assert len(forwarded(link)) == 1  # gone: nothing more forwarded
