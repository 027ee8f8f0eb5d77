"""Exactly once over cluster bridges, without processes (issue 9, bugs 2, 7 and 8):

- a lost link is not a delivery attempt of the bridge's copies;
- a bridge keeps no more in flight than half of what the peer's duplicate-ID cache holds,
  counting a confirmed copy until its removal is on disk;
- a producer's duplicate ID counts on the node a forwarded message reaches: another send of it
  through another node is dropped there, the same message coming back is not.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from office_harness import make_office, msg

from petrel.cluster.bridge import MAX_IN_FLIGHT, Bridge, in_flight_limit
from petrel.cluster.config import ClusterConnectionModel
from petrel.codec.core.cluster import Forward
from petrel.core.message import DUPLICATE_ID, RoutingType
from petrel.core.postoffice import SendOutcome
from petrel.core.remote import INSTANCE
from petrel.core.settings import AddressSettingsRepository

ANY = RoutingType.ANYCAST


# -- the bridge ---------------------------------------------------------------------------------


class FakeStore:
    """Sync callbacks wait until the test says the disk has caught up."""

    def __init__(self, store) -> None:
        self.store = store
        self.waiting = []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def sync(self, done, *, transactional: bool = False) -> None:
        self.waiting.append(done)

    def caught_up(self) -> None:
        waiting, self.waiting = self.waiting, []
        for done in waiting:
            done()


class FakeLink:
    def __init__(self) -> None:
        self.closed = False
        self.sent = []

    def send(self, event) -> None:
        self.sent.append(event)

    def close(self, reason: str, *, abort: bool = False) -> None:
        self.closed = True


def bridge_on(office, peer_cache_size: int | None = None, **model) -> Bridge:
    office.store = FakeStore(office.store)
    cluster = SimpleNamespace(model=ClusterConnectionModel(**model), office=office, node_id="A",
                              bridge_changed=lambda bridge: None)
    bridge = Bridge(cluster, "tcp://127.0.0.1:1")
    bridge.node_id = "B"
    bridge.sf_queue = office.create_queue("$.petrel.sf.test.B", "$.petrel.sf.test.B", ANY)
    bridge.peer_cache_size = peer_cache_size
    bridge.link = FakeLink()
    bridge._up()
    return bridge


def store_copies(office, bridge, n: int, **props) -> None:
    for i in range(n):
        m = msg(office, "orders", body=b"%d" % i, properties={"_PETREL_ROUTE_TO": "orders", **props})
        office.route_to(m, [bridge.sf_queue], 0)


def test_a_lost_link_is_not_a_delivery_attempt() -> None:
    office, _ = make_office()
    bridge = bridge_on(office)
    store_copies(office, bridge, 5)
    for _ in range(12):  # more than max_delivery_attempts (10)
        assert len(bridge.link.sent) == 5
        bridge.link = None
        bridge._detach()
        bridge.link = FakeLink()
        bridge._up()
    assert [r.delivery_count for r in bridge.consumer.delivering.values()] == [0] * 5
    assert office.queues["DLQ"].message_count == 0
    assert bridge.sf_queue.message_count == 5


@pytest.mark.parametrize(("peer", "fallback", "expected"), [
    (20000, 20000, 10000),  # 10 MiB of 512-byte copies (20,480) would outrun the cache
    (500, 20000, 250),
    (None, 3000, 1500),  # a peer that did not say: this node's own size
    (1, 20000, 1),
    (0, 20000, MAX_IN_FLIGHT),  # no cache there
    (10_000_000, 20000, MAX_IN_FLIGHT),
])
def test_the_window_is_half_the_peers_cache(peer, fallback, expected) -> None:
    assert in_flight_limit(peer, fallback) == expected


def test_no_message_bound_without_duplicate_detection() -> None:
    assert in_flight_limit(500, 500, dedup=False) == MAX_IN_FLIGHT


def test_the_bridge_keeps_half_the_peers_cache_in_flight_until_removals_are_on_disk() -> None:
    office, _ = make_office()
    bridge = bridge_on(office, peer_cache_size=20)
    store_copies(office, bridge, 50)
    assert len(bridge.link.sent) == 10  # small bodies: the byte window would allow all 50
    bridge._confirmed(10)
    assert bridge.sf_queue.message_count == 40
    assert len(bridge.link.sent) == 10  # confirmed, but their removal is not on disk yet
    office.store.caught_up()
    assert len(bridge.link.sent) == 20
    bridge._confirmed(15)  # 5 of the 10 out
    assert len(bridge.link.sent) == 20
    office.store.caught_up()
    assert len(bridge.link.sent) == 25
    assert len(bridge.in_flight) == 10


def test_forwarded_copies_carry_which_send_they_are() -> None:
    office, _ = make_office()
    bridge = bridge_on(office)
    store_copies(office, bridge, 1, **{DUPLICATE_ID: "p-1"})
    store_copies(office, bridge, 1)
    first, second = bridge.link.sent
    assert isinstance(first, Forward)
    assert first.properties[INSTANCE] == first.dup  # "A:<copy id>"
    assert INSTANCE not in second.properties


# -- a producer's duplicate ID on the node a forwarded message reaches -------------------------


def forwarded(office, body: bytes, dup: str, bridge_dup: str, instance: str | None):
    props = {DUPLICATE_ID: dup}
    if instance is not None:
        props[INSTANCE] = instance
    return office.receive_forwarded(msg(office, "orders", body=body, properties=props, durable=True), ["orders"],
                                    bridge_dup)


@pytest.fixture
def node_c():
    office, _ = make_office()
    office.node_id = "C"
    office.create_queue("orders", "orders", ANY)
    return office


def test_a_resend_through_another_node_is_dropped(node_c) -> None:
    # A forwarded the first send of p-1; A died; the client sent it again through B
    assert forwarded(node_c, b"m", "p-1", "A:10", "A:10").outcome == SendOutcome.ROUTED
    assert forwarded(node_c, b"m", "p-1", "B:99", "B:99").outcome == SendOutcome.DUPLICATE
    # ... and A, restarted, sends its copy again (a new bridge ID there would not matter)
    assert forwarded(node_c, b"m", "p-1", "A:10", "A:10").outcome == SendOutcome.DUPLICATE
    assert node_c.queues["orders"].message_count == 1


def test_the_later_send_wins_whichever_arrives_first(node_c) -> None:
    assert forwarded(node_c, b"m", "p-1", "B:99", "B:99").outcome == SendOutcome.ROUTED
    assert forwarded(node_c, b"m", "p-1", "A:10", "A:10").outcome == SendOutcome.DUPLICATE
    assert node_c.queues["orders"].message_count == 1


def test_a_send_to_this_node_after_a_forwarded_one_is_dropped(node_c) -> None:
    forwarded(node_c, b"m", "p-1", "A:10", "A:10")
    again = msg(node_c, "orders", body=b"m", properties={DUPLICATE_ID: "p-1"}, durable=True)
    assert node_c.send(again, ANY).outcome == SendOutcome.DUPLICATE
    assert node_c.queues["orders"].message_count == 1


def test_the_same_message_coming_back_by_redistribution_is_kept(node_c) -> None:
    # it reached C from A, moved to B, and comes back from B: same instance, new bridge ID
    forwarded(node_c, b"m", "p-1", "A:10", "A:10")
    ref = next(node_c.queues["orders"].iter_refs())
    node_c.queues["orders"].take(ref)
    node_c.reference_done(ref, 0)
    assert forwarded(node_c, b"m", "p-1", "B:7", "A:10").outcome == SendOutcome.ROUTED
    # a message C accepted from its producer itself, back after a trip (stamped by C's bridge)
    sent = msg(node_c, "orders", body=b"n", properties={DUPLICATE_ID: "p-2"}, durable=True)
    assert node_c.send(sent, ANY).outcome == SendOutcome.ROUTED
    ref = [r for r in node_c.queues["orders"].iter_refs() if r.message.body == b"n"][0]
    node_c.queues["orders"].take(ref)  # redistributed away
    node_c.reference_done(ref, 0)
    assert forwarded(node_c, b"n", "p-2", "B:8", "C:55").outcome == SendOutcome.ROUTED
    assert sorted(r.message.body for r in node_c.queues["orders"].iter_refs()) == [b"m", b"n"]


def test_bridge_caches_are_per_sender(node_c) -> None:
    node_c.settings = AddressSettingsRepository({"#": {"id_cache_size": 4}})
    assert node_c.bridge_cache_size("A") == 4
    for i in range(4):
        forwarded(node_c, b"a", f"a{i}", f"A:{i}", None)
    for i in range(20):  # B's traffic does not evict what catches A's resends
        forwarded(node_c, b"b", f"b{i}", f"B:{i}", None)
    for i in range(4):
        assert forwarded(node_c, b"a", f"x{i}", f"A:{i}", None).outcome == SendOutcome.DUPLICATE
