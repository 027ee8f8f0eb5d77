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
