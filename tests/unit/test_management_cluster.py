"""The cluster routes and metrics against two clustered in-process brokers in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

import petrel
from petrel.cluster.config import ClusterConnectionModel
from petrel.config import BrokerConfig
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.queue import Consumer
from petrel.testing.process import free_port
from petrel.testing.proxy import TcpProxy


def config(path, port: int, peer: int, **cc_settings) -> BrokerConfig:
    cc = ClusterConnectionModel(connector=f"tcp://127.0.0.1:{port}", static_connectors=[f"tcp://127.0.0.1:{peer}"],
                                retry_interval=50, max_retry_interval=200, **cc_settings)
    return BrokerConfig(max_disk_usage=100, security_enabled=False, data_dir=path, name=path.name, host="127.0.0.1", port=port, stomp_port=-1, http_port=0,
                        message_expiry_scan_period=-1, cluster_user="petrel-test", cluster_password="s3cret-pair",
                        cluster_connections=[cc], address_settings={"#": {"redistribution_delay": 0}})


async def wait_until(condition, timeout: float = 10.0, what: str = "condition", detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout}s {detail()}")
        await asyncio.sleep(0.02)
    return value


def bridges_up(*brokers) -> bool:
    return all(b.cluster.bridges and all(br.connected for br in b.cluster.bridges) for b in brokers)


@contextlib.asynccontextmanager
async def pair(tmp_path, proxy: TcpProxy | None = None):
    """Two brokers clustered with each other, their bridges up, and an HTTP session on each.

    With `proxy` (started, its target b's port), a's only bridge to b goes through it. b starts
    first, so that the proxy never accepts a's connection while it cannot reach b.
    """
    port_a = free_port()
    port_b = proxy.target_port if proxy else free_port()
    via = proxy.port if proxy else port_b
    async with petrel.Broker(config(tmp_path / "b", port_b, port_a)) as b, \
            petrel.Broker(config(tmp_path / "a", port_a, via, allow_direct_connections_only=proxy is not None)) as a:
        await wait_until(lambda: bridges_up(a, b), what="both bridges up",
                         detail=lambda: {n.config.name: n.cluster.describe()["bridges"] for n in (a, b)})
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{a.ports['http']}") as http_a, \
                aiohttp.ClientSession(base_url=f"http://127.0.0.1:{b.ports['http']}") as http_b:
            yield (a, http_a), (b, http_b)


async def get(http: aiohttp.ClientSession, path: str, expect: int = 200, **params) -> dict:
    async with http.get(path, params=params) as resp:
        body = await resp.json()
        assert resp.status == expect, (path, resp.status, body)
        return body


async def scrape(http: aiohttp.ClientSession) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}"""
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def send(broker, address: str, body: bytes) -> Message:
    office = broker.office
    message = Message(id=office.store.next_id(), address=address, body=body, durable=True, timestamp=now_ms())
    office.send(message, RoutingType.ANYCAST)
    return message


def consume(broker, name: str, received: list) -> Consumer:
    queue = broker.office.queues[name]
    consumer = Consumer(queue, lambda _c, ref: received.append(ref))
    broker.office.add_consumer(queue, consumer)
    return consumer


def public_queues(broker) -> set[str]:
    """The queues a node advertises: all but the internal ones (DLQ and ExpiryQueue included)."""
    return {name for name in broker.office.queues if not name.startswith("$.petrel.")}


def bound(broker) -> set[str]:
    return {x.name for x in broker.office.remote_bindings.values()}


def node(node_id: str) -> tuple:
    return (("node", node_id),)


def test_members_bridges_and_bindings(tmp_path):
    async def main():
        async with pair(tmp_path) as ((a, http_a), (b, http_b)):
            b.office.create_queue("orders", "orders", RoutingType.ANYCAST)
            b.office.create_queue("invoices", "invoices", RoutingType.ANYCAST)
            await wait_until(lambda: {"orders", "invoices"} <= bound(a), what="b's queues bound on a")

            members = await get(http_a, "/api/v1/cluster/members")
            assert members["node_id"] == a.node_id and members["name"] == "petrel-cluster"
            assert members["count"] == members["connected"] == 2
            by_id = {m["node_id"]: m for m in members["members"]}
            assert set(by_id) == {a.node_id, b.node_id}
            assert by_id[a.node_id]["self"] and not by_id[b.node_id]["self"]
            assert by_id[b.node_id]["http"] == f"http://127.0.0.1:{b.ports['http']}"
            assert by_id[b.node_id]["connector"] == f"127.0.0.1:{b.ports['all']}"

            bridges = await get(http_a, "/api/v1/cluster/bridges")
            assert bridges["count"] == bridges["up"] == 1 and bridges["backlog"] == 0
            (bridge,) = bridges["bridges"]
            assert bridge["node_id"] == b.node_id and bridge["state"] == "up" and bridge["connected"] is True
            assert bridge["remote_bindings"] == len(public_queues(b)) == 4  # with DLQ and ExpiryQueue

            everything = await get(http_a, "/api/v1/cluster/bindings")
            assert everything["count"] == 4
            assert {x["address"] for x in everything["remote_bindings"]} == public_queues(b)
            assert {x["node_id"] for x in everything["remote_bindings"]} == {b.node_id}
            orders = await get(http_a, "/api/v1/cluster/bindings", address="orders")
            (binding,) = orders["remote_bindings"]
            assert orders["count"] == 1
            assert binding["name"] == "orders" and binding["node_id"] == b.node_id and binding["via"] == b.node_id
            assert binding["routing_type"] == "ANYCAST" and binding["distance"] == 1
            assert (await get(http_a, "/api/v1/cluster/bindings", address="nowhere"))["remote_bindings"] == []

            # each slice is the whole view's, from either side
            whole = await get(http_b, "/api/v1/cluster")
            assert (await get(http_b, "/api/v1/cluster/members"))["members"] == whole["members"]
            assert (await get(http_b, "/api/v1/cluster/bindings"))["remote_bindings"] == whole["remote_bindings"]
            assert {x["name"] for x in whole["remote_bindings"]} == public_queues(a) == {"DLQ", "ExpiryQueue"}

    asyncio.run(main())


def test_metrics_follow_forwarding_redistribution_and_duplicates(tmp_path):
    async def main():
        loop = asyncio.get_running_loop()
        proxies = [TcpProxy("127.0.0.1", free_port()).start()]
        try:
            async with pair(tmp_path, proxies[0]) as ((a, http_a), (b, http_b)):
                await scenario(loop, proxies, a, http_a, b, http_b)
        finally:
            for proxy in proxies:
                proxy.stop()

    async def scenario(loop, proxies, a, http_a, b, http_b):
        proxy = proxies[0]
        # forwarding: a consumer on b's "orders", messages sent on a
        b.office.create_queue("orders", "orders", RoutingType.ANYCAST)
        got: list = []
        consume(b, "orders", got)
        await wait_until(lambda: any(x.consumer_count for x in a.office.remote_bindings.values()),
                         what="b's consumer known on a")
        for i in range(3):
            send(a, "orders", b"order %d" % i)
        await wait_until(lambda: len(got) == 3, what="3 orders forwarded to b")
        bridge_a = a.cluster.by_node[b.node_id]
        await wait_until(lambda: bridge_a.backlog == 0, what="a's backlog confirmed")

        # redistribution: messages wait on a's "work"; a consumer on b's "work" draws them over
        a.office.create_queue("work", "work", RoutingType.ANYCAST)
        b.office.create_queue("work", "work", RoutingType.ANYCAST)
        await wait_until(lambda: "work" in bound(a) and "work" in bound(b), what="work bound on both")
        send(a, "work", b"w1")
        send(a, "work", b"w2")
        assert a.office.queues["work"].message_count == 2
        work: list = []
        consume(b, "work", work)
        await wait_until(lambda: len(work) == 2, what="a's work redistributed to b")
        await wait_until(lambda: bridge_a.backlog == 0, what="the redistributed work confirmed by b")

        # a bridged message that arrives twice is dropped the second time
        for _ in range(2):
            copy = Message(id=b.office.store.next_id(), address="orders", body=b"again", durable=False,
                           timestamp=now_ms())
            b.office.receive_forwarded(copy, ["orders"], "some-node:42")

        ma, mb = await scrape(http_a), await scrape(http_b)
        assert ma["petrel_cluster_members"][()] == 2
        assert ma["petrel_cluster_bridge_up"] == {node(b.node_id): 1}
        assert ma["petrel_cluster_bridge_backlog"] == {node(b.node_id): 0}
        assert ma["petrel_cluster_bridge_forwarded_total"] == {node(b.node_id): 5}  # 3 orders + 2 work
        assert ma["petrel_cluster_bridge_reconnects_total"] == {node(b.node_id): 0}
        assert ma["petrel_cluster_remote_bindings"][()] == len(public_queues(b)) == 4  # orders, work, DLQ...
        assert ma["petrel_cluster_messages_redistributed_total"][()] == 2
        assert ma["petrel_cluster_duplicates_dropped_total"][()] == 0
        assert mb["petrel_cluster_bridge_forwarded_total"] == {node(a.node_id): 0}
        # a's work, DLQ, ExpiryQueue and orders (auto-created on a by the first send there)
        assert mb["petrel_cluster_remote_bindings"][()] == len(public_queues(a)) == 4
        assert mb["petrel_cluster_duplicates_dropped_total"][()] == 1
        assert mb["petrel_cluster_messages_redistributed_total"][()] == 0

        # a silent link: the bridge stays up, what a sends waits unconfirmed in its backlog
        await loop.run_in_executor(None, proxy.freeze)
        send(a, "orders", b"frozen 1")
        send(a, "orders", b"frozen 2")
        ma = await scrape(http_a)
        assert ma["petrel_cluster_bridge_up"] == {node(b.node_id): 1}
        assert ma["petrel_cluster_bridge_backlog"] == {node(b.node_id): 2}
        assert len(got) == 4  # 3 orders, and the first "again"

        # the link cut (the proxy gone: connections reset, new ones refused): the bridge is down and
        # the backlog stays; a proxy on the same port again: the bridge reconnects and delivers
        await loop.run_in_executor(None, proxy.stop)
        await wait_until(lambda: not bridge_a.connected, what="a's bridge down")
        ma = await scrape(http_a)
        assert ma["petrel_cluster_members"][()] == 1
        assert ma["petrel_cluster_bridge_up"] == {node(b.node_id): 0}
        assert ma["petrel_cluster_bridge_backlog"] == {node(b.node_id): 2}
        bridges = await get(http_a, "/api/v1/cluster/bridges")
        assert bridges["up"] == 0 and bridges["backlog"] == 2
        proxies.append(TcpProxy("127.0.0.1", proxy.target_port, listen_port=proxy.port))
        await loop.run_in_executor(None, proxies[-1].start)
        await wait_until(lambda: len(got) == 6 and bridge_a.backlog == 0, what="the backlog delivered after heal")
        ma = await scrape(http_a)
        assert ma["petrel_cluster_bridge_up"] == {node(b.node_id): 1}
        assert ma["petrel_cluster_bridge_reconnects_total"] == {node(b.node_id): 1}
        assert ma["petrel_cluster_bridge_forwarded_total"][node(b.node_id)] >= 7

    asyncio.run(main())


def test_a_broker_outside_a_cluster_answers_404(tmp_path):
    async def main():
        config = BrokerConfig(max_disk_usage=100, security_enabled=False, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=0,
                              message_expiry_scan_period=-1)
        async with petrel.Broker(config) as broker:
            async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{broker.ports['http']}") as http:
                for path in ("/api/v1/cluster", "/api/v1/cluster/members", "/api/v1/cluster/bridges",
                             "/api/v1/cluster/bindings"):
                    body = await get(http, path, 404)
                    assert "not in a cluster" in body["error"] and "cluster_connections" in body["error"]
                names = {f.name for f in text_string_to_metric_families((await (await http.get("/metrics")).text()))}
                assert "petrel_queue_count" in names
                assert not any(n.startswith("petrel_cluster_") for n in names)

    asyncio.run(main())
