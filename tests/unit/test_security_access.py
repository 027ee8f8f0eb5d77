"""A connection's `Access` on a real post office: what a send or a consumer would create needs its
permission, every time it would create it, even after the same send was allowed before."""

from __future__ import annotations

import pytest

from office_harness import make_office, msg
from petrel.core.message import RoutingType
from petrel.security import NotAuthorized, Security, Subject
from petrel.server.access import Access

SETTINGS = {"q.#": {"send": ["app", "maker"], "consume": ["app", "maker"], "createAddress": ["maker"],
                    "createDurableQueue": ["maker"], "createNonDurableQueue": ["maker"]}}


def access(*roles: str) -> Access:
    return Access(Security(settings=SETTINGS), Subject("u", frozenset(roles)))


def refused(fn, *args, **kwargs) -> str:
    with pytest.raises(NotAuthorized) as info:
        fn(*args, **kwargs)
    return info.value.permission


def test_a_send_needs_what_it_would_create_each_time() -> None:
    office, _ = make_office()
    app, maker = access("app"), access("maker")
    assert refused(app.send, office, "q.a", RoutingType.ANYCAST) == "createAddress"
    maker.send(office, "q.auto", RoutingType.ANYCAST)
    office.send(msg(office, "q.auto"), RoutingType.ANYCAST)  # creates the address and its queue
    app.send(office, "q.auto", RoutingType.ANYCAST)
    app.send(office, "q.auto", RoutingType.ANYCAST)  # remembered
    office.create_address("q.a", {RoutingType.ANYCAST})
    office.create_queue("q.a", "q.a", RoutingType.ANYCAST)
    app.send(office, "q.a", RoutingType.ANYCAST)
    office.delete_queue("q.a")  # the queue goes, the address stays: sending would make the queue again
    assert refused(app.send, office, "q.a", RoutingType.ANYCAST) == "createDurableQueue"
    office.delete_address("q.a")
    assert refused(app.send, office, "q.a", RoutingType.ANYCAST) == "createAddress"
    assert refused(app.send, office, "q.a", None) == "createAddress"
    assert refused(access("other").send, office, "q.a", None) == "send"


def test_consumers_need_consume_and_what_they_create() -> None:
    office, _ = make_office()
    app, maker = access("app"), access("maker")
    office.create_address("q.t", {RoutingType.MULTICAST})
    assert refused(app.subscribe, office, "q.t", RoutingType.MULTICAST) == "createNonDurableQueue"
    maker.subscribe(office, "q.t", RoutingType.MULTICAST)
    assert refused(app.subscribe, office, "q.t", RoutingType.MULTICAST, durable_queue="c.s") == "createDurableQueue"
    office.create_queue("c.s", "q.t", RoutingType.MULTICAST, client_id="c", subscription="s")
    app.subscribe(office, "q.t", RoutingType.MULTICAST, durable_queue="c.s")  # exists: consume is enough
    assert refused(access("other").subscribe, office, "q.t", RoutingType.MULTICAST, durable_queue="c.s") == "consume"
    assert refused(app.subscribe, office, "q.new", RoutingType.ANYCAST) == "createAddress"


def test_disabled_security_checks_nothing() -> None:
    office, _ = make_office()
    off = Access(Security(enabled=False))
    off.send(office, "anything", None)
    off.subscribe(office, "anything", RoutingType.ANYCAST)
    off.check("deleteAddress", "x")
    assert off.internal
