"""rebalance_cluster_clients' plan (`ClientBalance`): who is asked to move where when members join."""

from __future__ import annotations

from types import SimpleNamespace

from petrel.server.adapters.openwire_cluster import ClientBalance


class Client:
    protocol = "openwire"

    def __init__(self, movable: bool = True) -> None:
        self._movable = movable

    def movable(self) -> bool:
        return self._movable


def broker_with(*adapters) -> SimpleNamespace:
    return SimpleNamespace(connections=[SimpleNamespace(adapter=a) for a in adapters])


def test_nobody_moves_until_a_member_joins():
    clients = [Client() for _ in range(4)]
    balance = ClientBalance()
    balance.plan(broker_with(*clients), ["tcp://a", "tcp://b"])  # the first view: nothing to compare with
    assert balance.moves == {}
    balance.plan(broker_with(*clients), ["tcp://a"])  # b left
    assert balance.moves == {}


def test_a_joining_member_gets_its_share():
    clients = [Client() for _ in range(6)]
    balance = ClientBalance()
    balance.members = ("tcp://a",)
    balance.plan(broker_with(*clients), ["tcp://a", "tcp://b"])
    assert balance.moves == {id(c): "tcp://b" for c in clients[3:]}


def test_two_newcomers_share_round_robin_and_unmovable_clients_do_not_count():
    clients = [Client() for _ in range(9)]
    other = SimpleNamespace(protocol="stomp")
    balance = ClientBalance()
    balance.members = ("tcp://a",)
    balance.plan(broker_with(*clients, Client(movable=False), other), ["tcp://a", "tcp://b", "tcp://c"])
    assert [balance.moves.get(id(c)) for c in clients] == [None] * 3 + ["tcp://b", "tcp://c"] * 3


def test_a_member_back_after_a_restart_is_a_newcomer_again():
    clients = [Client() for _ in range(4)]
    balance = ClientBalance()
    balance.members = ("tcp://a", "tcp://b")
    balance.plan(broker_with(*clients), ["tcp://a"])
    balance.plan(broker_with(*clients), ["tcp://a", "tcp://b"])
    assert sorted(balance.moves.values()) == ["tcp://b", "tcp://b"]


def _adapter(**kw):
    from petrel.server.adapters.openwire_cluster import OpenWireCluster

    a = OpenWireCluster()
    a.fault_tolerant, a.connection_id, a._closing = True, "ID:c-1", False
    a.conn = SimpleNamespace(closed=False)
    a.subs, a.tx_acks, a.session = {}, {}, SimpleNamespace(transactions={})
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_a_transaction_managers_connection_is_never_moved():
    a = _adapter()
    assert a.movable()
    a.xa_used = True  # its prepared branches are here: a commit on another node would not find them
    assert not a.movable()


def test_a_client_is_quiet_only_with_nothing_unacknowledged_and_no_transaction_open():
    holding = SimpleNamespace(consumers=[SimpleNamespace(delivering={7: object()})])
    idle = SimpleNamespace(consumers=[SimpleNamespace(delivering={})])
    advisory = SimpleNamespace(consumers=[])
    # a wildcard queue consumer: one core consumer per queue, the second holding one
    wildcard = SimpleNamespace(consumers=[SimpleNamespace(delivering={}), SimpleNamespace(delivering={3: object()})])
    assert _adapter(subs={1: idle, 2: advisory}).quiet()
    assert not _adapter(subs={1: idle, 2: holding}).quiet()
    assert not _adapter(subs={1: idle, 2: wildcard}).quiet()
    assert not _adapter(subs={1: idle}, session=SimpleNamespace(transactions={"tx": object()})).quiet()
    assert not _adapter(subs={1: idle}, tx_acks={"tx": []}).quiet()
