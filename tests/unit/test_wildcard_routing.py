"""Pattern addresses (`a.*`, `a.#`): their multicast queues receive what is sent to any
address the pattern matches, and they survive a restart."""

from __future__ import annotations

from office_harness import consume, flush, make_office, msg, open_file_office

from petrel.core.message import RoutingType


def subscribe(office, pattern, name, durable=False):
    with office.names_from_elsewhere():
        return office.create_queue(name, pattern, RoutingType.MULTICAST, durable=durable)


def test_a_pattern_address_receives_what_matching_addresses_get():
    office, _ = make_office()
    subscribe(office, "a.*", "one")
    subscribe(office, "a.#", "many")
    subscribe(office, "b.*", "other")
    _, one = consume(office, "one")
    _, many = consume(office, "many")
    _, other = consume(office, "other")
    for address in ("a.x", "a.x.y", "a", "b.z"):
        office.send(msg(office, address, address.encode()), RoutingType.MULTICAST)
    assert one.bodies == [b"a.x"]
    assert many.bodies == [b"a.x", b"a.x.y", b"a"]
    assert other.bodies == [b"b.z"]
    office.send(msg(office, "q"), RoutingType.ANYCAST)  # anycast sends do not reach topic patterns
    subscribe(office, "#", "everything")
    subscribe(office, "$sys.*", "dollar")
    _, everything = consume(office, "everything")
    _, dollar = consume(office, "dollar")
    office.send(msg(office, "$sys.x", b"$"), RoutingType.MULTICAST)
    assert (everything.bodies, dollar.bodies) == ([], [b"$"])  # a leading wildcard skips "$" names
    office.delete_queue("many")
    office.send(msg(office, "a.x", b"again"), RoutingType.MULTICAST)
    assert many.bodies == [b"a.x", b"a.x.y", b"a"]
    assert one.bodies == [b"a.x", b"again"]


def test_pattern_subscriptions_survive_a_restart(tmp_path):
    office, store = open_file_office(tmp_path)
    subscribe(office, "s.*", "durable-sub", durable=True)
    office.send(msg(office, "s.one", b"kept", durable=True), RoutingType.MULTICAST)
    flush(store)
    store.close()
    office, store = open_file_office(tmp_path)
    assert office.queues["durable-sub"].message_count == 1
    office.send(msg(office, "s.two", b"new", durable=True), RoutingType.MULTICAST)
    assert office.queues["durable-sub"].message_count == 2
    store.close()
