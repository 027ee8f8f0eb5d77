"""UDP discovery on real sockets: multicast on loopback, unicast and broadcast addresses."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from petrel.cluster.beacon import Announcement, encode
from petrel.cluster.beacon_auth import BeaconKey, seal
from petrel.cluster.config import BroadcastGroupModel, DiscoveryGroupModel
from petrel.cluster.discovery import BroadcastGroup, DiscoveryGroup
from petrel.testing.udp import discovery_group, udp_port

GROUP = discovery_group()  # multicast on loopback, or its broadcast address where that fails
LOOP = "127.0.0.1"
KEY = BeaconKey.derive("petrel-test", "test-cluster-secret")


async def until(condition, timeout: float = 5.0, message: str = "condition not met"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := condition()):
        if loop.time() > deadline:
            raise AssertionError(f"{message} within {timeout}s")
        await asyncio.sleep(0.01)
    return value


def announcement(node: str, *connectors: str, unique: str = "u1") -> Announcement:
    return Announcement(node, f"{node}-{unique}", "petrel-cluster", connectors or (f"127.0.0.1:{6160 + len(node)}",))


class Node:
    """One broker's pair of groups, recording every on_change call."""

    def __init__(self, node_id: str, address: str, port: int, *, local: str | None = LOOP,
                 period: int = 50, refresh: int = 2000, initial_wait: int = 3000, connectors=()) -> None:
        self.changes: list[dict[str, Announcement]] = []
        self.broadcast = BroadcastGroup(
            BroadcastGroupModel(name="bg", group_address=address, group_port=port,
                                broadcast_period=period, local_bind_address=local),
            announcement(node_id, *connectors), key=KEY)
        self.discovery = DiscoveryGroup(
            DiscoveryGroupModel(name="dg", group_address=address, group_port=port,
                                refresh_timeout=refresh, initial_wait_timeout=initial_wait,
                                local_bind_address=local),
            node_id, self.changes.append, key=KEY)

    async def start(self) -> Node:
        await self.discovery.start()
        await self.broadcast.start()
        return self

    async def stop(self) -> None:
        await self.broadcast.stop()
        await self.discovery.stop()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_three_nodes_find_each_other_over_multicast_on_loopback():
    async def main():
        port = udp_port()
        nodes = [await Node(n, GROUP, port).start() for n in ("a", "b", "c")]
        try:
            for node, others in zip(nodes, (("b", "c"), ("a", "c"), ("a", "b"))):
                await until(lambda node=node, others=others: sorted(node.discovery.entries) == list(others),
                            message=f"{node.broadcast.announcement.node_id} did not see {others}")
                entries = node.discovery.entries
                for other in nodes:
                    a = other.broadcast.announcement
                    if a.node_id in others:
                        assert entries[a.node_id] == a
                assert node.changes[-1] == entries
                assert node.changes[-1] is not entries  # a copy
                assert len(node.changes) == 2  # one per node found, none for repeats
                assert await node.discovery.wait_initial() is True
        finally:
            for node in nodes:
                await node.stop()
    run(main())


def test_first_announcement_is_sent_on_start():
    async def main():
        port = udp_port()
        listener = await Node("a", GROUP, port).start()
        talker = await Node("b", GROUP, port, period=60_000).start()
        try:
            await until(lambda: "b" in listener.discovery.entries, timeout=3,
                        message="the first announcement was not sent at start")
        finally:
            await talker.stop()
            await listener.stop()
    run(main())


def test_silent_node_is_dropped_after_refresh_timeout():
    async def main():
        port = udp_port()
        a = await Node("a", GROUP, port, refresh=500).start()
        b = await Node("b", GROUP, port, refresh=500).start()
        loop = asyncio.get_running_loop()
        try:
            await until(lambda: "b" in a.discovery.entries, message="a did not find b")
            # Heard every 50 ms, b stays for longer than a refresh timeout.
            seen_since = loop.time()
            await until(lambda: loop.time() - seen_since > 0.8 or "b" not in a.discovery.entries)
            assert "b" in a.discovery.entries, "b was dropped while still announcing"
            await b.broadcast.stop()
            stopped = loop.time()
            await until(lambda: "b" not in a.discovery.entries, timeout=3, message="b was not dropped")
            assert loop.time() - stopped >= 0.4  # refresh 500 ms, minus up to one 50 ms period
            assert a.changes[-1] == {}
            assert [sorted(c) for c in a.changes] == [["b"], []]
            # It comes back as a new node when it announces again.
            await b.broadcast.start()
            await until(lambda: "b" in a.discovery.entries, message="b did not come back")
            assert [sorted(c) for c in a.changes] == [["b"], [], ["b"]]
        finally:
            await a.stop()
            await b.stop()
    run(main())


def test_changed_connectors_call_on_change_but_repeats_do_not():
    async def main():
        port = udp_port()
        a = await Node("a", GROUP, port).start()
        b = await Node("b", GROUP, port, connectors=("127.0.0.1:1111",)).start()
        received = []
        original = a.discovery._received
        a.discovery._received = lambda data, addr: (received.append(data), original(data, addr))
        try:
            await until(lambda: "b" in a.discovery.entries)
            await until(lambda: len(received) >= 8, message="repeated announcements not heard")
            assert len(a.changes) == 1
            b.broadcast.update(announcement("b", "127.0.0.1:2222", "127.0.0.1:3333"))
            await until(lambda: len(a.changes) == 2, message="no on_change for new connectors")
            assert a.changes[-1]["b"].connectors == ("127.0.0.1:2222", "127.0.0.1:3333")
            assert a.discovery.entries["b"].connectors == ("127.0.0.1:2222", "127.0.0.1:3333")
            # A restart (new unique id, same connectors) is not a change worth a callback...
            b.broadcast.update(announcement("b", "127.0.0.1:2222", "127.0.0.1:3333", unique="u2"))
            await until(lambda: a.discovery.entries["b"].unique_id == "b-u2")
            n = len(received)
            await until(lambda: len(received) >= n + 4)
            assert len(a.changes) == 2
        finally:
            await a.stop()
            await b.stop()
    run(main())


def test_duplicate_node_id_is_warned_once(caplog):
    async def main():
        port = udp_port()
        listener = await Node("a", GROUP, port).start()
        twin1 = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=GROUP, group_port=port,
                                                   broadcast_period=30, local_bind_address=LOOP),
                               announcement("twin", unique="first"), key=KEY)
        twin2 = BroadcastGroup(twin1.model, announcement("twin", unique="second"), key=KEY)
        await twin1.start()
        await twin2.start()
        try:
            await until(lambda: [r for r in caplog.records if r.levelno == logging.WARNING],
                        message="no duplicate node id warning")
            received = []
            original = listener.discovery._received
            listener.discovery._received = lambda data, addr: (received.append(data), original(data, addr))
            await until(lambda: len(received) >= 10)
        finally:
            await twin1.stop()
            await twin2.stop()
            await listener.stop()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "duplicate node id" in warnings[0].getMessage()
        assert "twin" in warnings[0].getMessage()
        assert warnings[0].event == "cluster.duplicate_node"
        assert warnings[0].name == "petrel.cluster.discovery"

    caplog.set_level(logging.DEBUG, logger="petrel.cluster.discovery")
    run(main())


def test_restart_with_a_new_unique_id_is_not_a_duplicate(caplog):
    async def main():
        port = udp_port()
        listener = await Node("a", GROUP, port).start()
        model = BroadcastGroupModel(name="bg", group_address=GROUP, group_port=port,
                                    broadcast_period=30, local_bind_address=LOOP)
        first = BroadcastGroup(model, announcement("b", unique="run1"), key=KEY)
        await first.start()
        await until(lambda: "b" in listener.discovery.entries)
        await first.stop()
        second = BroadcastGroup(model, announcement("b", unique="run2"), key=KEY)
        await second.start()
        try:
            await until(lambda: listener.discovery.entries["b"].unique_id == "b-run2")
            received = []
            original = listener.discovery._received
            listener.discovery._received = lambda data, addr: (received.append(data), original(data, addr))
            await until(lambda: len(received) >= 5)
        finally:
            await second.stop()
            await listener.stop()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    caplog.set_level(logging.INFO, logger="petrel.cluster.discovery")
    run(main())


def test_another_broker_with_our_own_node_id_is_a_duplicate(caplog):
    async def main():
        port = udp_port()
        me = await Node("a", GROUP, port, period=30).start()
        impostor = BroadcastGroup(me.broadcast.model, announcement("a", unique="other"), key=KEY)
        await impostor.start()
        try:
            await until(lambda: [r for r in caplog.records if r.levelno == logging.WARNING],
                        message="no duplicate node id warning")
        finally:
            await impostor.stop()
            await me.stop()
        assert me.discovery.entries == {} and me.changes == []

    caplog.set_level(logging.INFO, logger="petrel.cluster.discovery")
    run(main())


def test_malformed_datagrams_are_logged_at_debug_and_ignored(caplog):
    async def main():
        port = udp_port()
        a = await Node("a", LOOP, port, local=None).start()
        await a.broadcast.stop()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"garbage", (LOOP, port))
                s.sendto(seal(KEY, encode(announcement("b"))[:-3]), (LOOP, port))
                s.sendto(seal(KEY, encode(announcement("c"))), (LOOP, port))
            await until(lambda: "c" in a.discovery.entries)
        finally:
            await a.stop()
        assert a.changes == [{"c": announcement("c")}]
        debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
        assert any("bad magic" in m for m in debug), debug
        assert any("malformed" in m or "truncated" in m for m in debug), debug

    caplog.set_level(logging.DEBUG, logger="petrel.cluster.discovery")
    run(main())


def test_unicast_address():
    async def main():
        port = udp_port()
        listener = await Node("a", LOOP, port, local=None).start()
        c = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=LOOP, group_port=port,
                                               broadcast_period=50, local_bind_address=LOOP,
                                               local_bind_port=udp_port()),
                           announcement("c"), key=KEY)
        b = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=LOOP, group_port=port,
                                               broadcast_period=50), announcement("b"), key=KEY)
        await c.start()
        await b.start()
        try:
            await until(lambda: sorted(listener.discovery.entries) == ["b", "c"])
            assert listener.discovery.entries["c"] == announcement("c")
        finally:
            for g in (c, b, listener):
                await g.stop()
    run(main())


def test_broadcast_address_reaches_every_listener_on_the_port():
    async def main():
        port = udp_port()
        bcast = "127.255.255.255"
        nodes = [await Node(n, bcast, port, local=None).start() for n in ("a", "b")]
        try:
            await until(lambda: list(nodes[0].discovery.entries) == ["b"] and list(nodes[1].discovery.entries) == ["a"],
                        message="broadcast announcements not heard by both listeners")
        finally:
            for node in nodes:
                await node.stop()
    run(main())


def test_ipv6_unicast():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")

    async def main():
        port = udp_port()
        listener = await Node("a", "::1", port, local=None).start()
        talker = BroadcastGroup(BroadcastGroupModel(name="bg", group_address="::1", group_port=port,
                                                    local_bind_address="::1"), announcement("b"), key=KEY)
        await talker.start()
        try:
            await until(lambda: "b" in listener.discovery.entries)
        finally:
            await talker.stop()
            await listener.stop()
    run(main())


def test_wait_initial_times_out_when_nobody_announces():
    async def main():
        port = udp_port()
        dg = DiscoveryGroup(DiscoveryGroupModel(name="dg", group_address=GROUP, group_port=port,
                                                initial_wait_timeout=200, local_bind_address=LOOP),
                            "a", lambda entries: None, key=KEY)
        with pytest.raises(RuntimeError, match="start"):
            await dg.wait_initial()
        loop = asyncio.get_running_loop()
        await dg.start()
        try:
            t0 = loop.time()
            assert await dg.wait_initial() is False
            assert 0.15 <= loop.time() - t0 < 2
        finally:
            await dg.stop()
    run(main())


def test_wait_initial_returns_as_soon_as_a_node_is_heard():
    async def main():
        port = udp_port()
        a = Node("a", GROUP, port, initial_wait=10_000)
        await a.discovery.start()
        b = await Node("b", GROUP, port, period=60_000).start()
        loop = asyncio.get_running_loop()
        try:
            t0 = loop.time()
            assert await a.discovery.wait_initial() is True
            assert loop.time() - t0 < 5
            assert "b" in a.discovery.entries
        finally:
            await a.stop()
            await b.stop()
    run(main())


def test_failing_on_change_does_not_stop_discovery(caplog):
    async def main():
        port = udp_port()
        calls = []

        def on_change(entries):
            calls.append(dict(entries))
            raise RuntimeError("boom")

        dg = DiscoveryGroup(DiscoveryGroupModel(name="dg", group_address=GROUP, group_port=port,
                                                local_bind_address=LOOP), "a", on_change, key=KEY)
        await dg.start()
        talkers = [BroadcastGroup(BroadcastGroupModel(name="bg", group_address=GROUP, group_port=port,
                                                      local_bind_address=LOOP), announcement(n), key=KEY)
                   for n in ("b", "c")]
        try:
            for t in talkers:
                await t.start()
            await until(lambda: sorted(dg.entries) == ["b", "c"])
            assert len(calls) == 2
        finally:
            for t in talkers:
                await t.stop()
            await dg.stop()
        assert any(r.event == "cluster.discovery_callback_failed" for r in caplog.records)

    run(main())


def test_stop_is_idempotent_and_restartable():
    async def main():
        port = udp_port()
        node = Node("a", GROUP, port)
        await node.stop()  # never started
        await node.start()
        await node.start()  # already running: no second socket or task
        assert node.broadcast.running and node.discovery.running
        await node.stop()
        await node.stop()
        assert not node.broadcast.running and not node.discovery.running
        assert node.discovery.entries == {}
    run(main())


def test_bad_addresses_say_what_to_fix():
    async def main():
        bg = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=GROUP, group_port=udp_port(),
                                                local_bind_address="::1"), announcement("a"), key=KEY)
        with pytest.raises(ValueError, match="same family"):
            await bg.start()
        dg = DiscoveryGroup(DiscoveryGroupModel(name="dg", group_address="no-such-host.invalid",
                                                group_port=udp_port()), "a", lambda e: None, key=KEY)
        with pytest.raises(OSError, match="does not resolve"):
            await dg.start()
    run(main())
