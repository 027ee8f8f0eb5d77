"""Which names and properties a client may write: the cluster's own ($.petrel.*, _PETREL_*) only
for the cluster's subject, whether security is enabled or not."""

from __future__ import annotations

from types import SimpleNamespace

from petrel.cluster.internal_names import drop_reserved, internal_name_problem, internal_write_problem
from petrel.core.remote import INSTANCE, ROUTE_TO
from petrel.security.subject import INTERNAL, Subject

CLIENT = SimpleNamespace(access=SimpleNamespace(subject=Subject("app", frozenset({"admin"}))))
ANONYMOUS = SimpleNamespace(access=SimpleNamespace(subject=None))
NOT_LOGGED_IN = SimpleNamespace()
CLUSTER = SimpleNamespace(access=SimpleNamespace(subject=INTERNAL))


def test_clients_may_not_write_the_clusters_names_or_properties():
    for adapter in (CLIENT, ANONYMOUS, NOT_LOGGED_IN):
        assert "internal to the cluster" in internal_write_problem(adapter, "$.petrel.sf.c.n")
        assert "internal to the cluster" in internal_write_problem(adapter, "$.petrel.x")
        for prop in (ROUTE_TO, INSTANCE, "_PETREL_ANYTHING"):
            properties = {"a": 1, prop: "x", "_petrel_lower": 2}
            drop_reserved(adapter, properties)  # dropped, not refused: a received message may be sent on
            assert properties == {"a": 1, "_petrel_lower": 2}
        assert "internal to the cluster" in internal_name_problem(adapter, "orders", "$.petrel.sf.c.n")
        assert internal_name_problem(adapter, "orders", None, "") is None


def test_ordinary_names_and_properties_pass():
    for adapter in (CLIENT, ANONYMOUS, CLUSTER):
        assert internal_write_problem(adapter, "orders") is None
        properties = {"_petrel_lower": 1, "PETREL_X": 2, "x_PETREL_": 3}
        drop_reserved(adapter, properties)
        assert properties == {"_petrel_lower": 1, "PETREL_X": 2, "x_PETREL_": 3}
        drop_reserved(adapter, None)
        assert internal_write_problem(adapter, "$.other") is None
        assert internal_name_problem(adapter, "orders.petrel") is None


def test_the_cluster_itself_may():
    assert internal_write_problem(CLUSTER, "$.petrel.sf.c.n") is None
    properties = {INSTANCE: "n:1", ROUTE_TO: "q"}
    drop_reserved(CLUSTER, properties)
    assert properties == {INSTANCE: "n:1", ROUTE_TO: "q"}
    assert internal_name_problem(CLUSTER, "$.petrel.sf.c.n") is None
