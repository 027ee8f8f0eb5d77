"""Clusters of real `petrel run` processes on loopback, for the cluster system tests and the
chaos harness.

`make_cluster(tmp_path, 3)` gives three BrokerProcess objects whose broker.toml carry a cluster
connection to each other (symmetric, or a chain); start them with `start_all`. `cluster_view`
reads a node's `/api/v1/cluster`; `wait_bindings` waits until a node routes to a remote queue.
"""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass

from petrel.management.client import basic_authorization
from petrel.testing.udp import discovery_group
from petrel.testing.process import BrokerProcess, wait_for

PASSWORD = "test-cluster-secret"
GROUP = discovery_group()  # multicast on loopback, or its broadcast address where that fails


@dataclass(frozen=True)
class Discovery:
    """UDP broadcast + discovery groups "bg"/"dg" on loopback, short timers; the cluster
    connection uses `discovery_group = "dg"`."""

    port: int
    group: str = GROUP
    broadcast_period: int = 200
    refresh_timeout: int = 1500
    initial_wait_timeout: int = 0

    def toml(self) -> str:
        where = (f'group_address = "{self.group}"\ngroup_port = {self.port}\n'
                 'local_bind_address = "127.0.0.1"\n')
        return (f'[[broadcast_groups]]\nname = "bg"\n{where}broadcast_period = {self.broadcast_period}\n'
                f'[[discovery_groups]]\nname = "dg"\n{where}refresh_timeout = {self.refresh_timeout}\n'
                f"initial_wait_timeout = {self.initial_wait_timeout}\n")


def make_cluster(tmp_path, n: int, *, balancing: str = "ON_DEMAND", max_hops: int = 1, chain: bool = False,
                 redistribution_delay: int | None = None, password: str | None = None, seeds: str = "all",
                 extra_top: str = "", extra_cc: str = "", connection_ttl: int = 3000,
                 retry_interval: int = 100, discovery: Discovery | None = None,
                 passwords: dict[int, str] | None = None,
                 via: dict[tuple[int, int], int] | None = None) -> list[BrokerProcess]:
    """`seeds`: "all" (every other node), "first" (node 0 only; node 0 gets node 1) or "none"
    (with `discovery`); `chain=True`: each node seeds the next one only.
    `passwords`: node index -> a cluster_password other than the cluster's.
    `via`: {(i, j): port} makes node i's static connector to node j use `port` (a TcpProxy's
    listen port, see petrel.testing.proxy) instead of j's own; node i then connects only
    through its static connectors (allow_direct_connections_only), so that it never bypasses
    the proxy with the connector j reports for itself."""
    via = via or {}
    nodes = [BrokerProcess(tmp_path / f"node{i}", name=f"node{i}", http=True) for i in range(n)]
    for i, node in enumerate(nodes):
        if chain:
            others = [nodes[i + 1]] if i + 1 < n else []
        elif seeds == "first":
            others = [nodes[1 if i == 0 else 0]]
        elif seeds == "none":
            others = []
        else:
            others = [o for o in nodes if o is not node]
        statics = ", ".join(f'"tcp://127.0.0.1:{via.get((i, nodes.index(o)), o.port)}"' for o in others)
        direct_only = chain or any(src == i for src, _ in via)
        secret = (passwords or {}).get(i, password or PASSWORD)
        text = (f'cluster_user = "petrel-test"\ncluster_password = "{secret}"\n'
                f"message_expiry_scan_period = 1000\n{extra_top}")
        if discovery is not None:
            text += discovery.toml()
        if redistribution_delay is not None:
            text += f'[address_settings."#"]\nredistribution_delay = {redistribution_delay}\n'
        text += (
            "[[cluster_connections]]\n"
            f'connector = "tcp://127.0.0.1:{node.port}"\n'
            f"static_connectors = [{statics}]\n"
            f'message_load_balancing = "{balancing}"\n'
            f"max_hops = {max_hops}\n"
            f"retry_interval = {retry_interval}\nmax_retry_interval = {max(retry_interval, 500)}\n"
            f"connection_ttl = {connection_ttl}\n"
            f"allow_direct_connections_only = {'true' if direct_only else 'false'}\n{extra_cc}"
        )
        if discovery is not None:
            text += 'discovery_group = "dg"\n'
        with open(node.config_path, "a") as f:
            f.write(text)
    return nodes


def start_all(nodes: list[BrokerProcess]) -> list[BrokerProcess]:
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_ready()
    return nodes


def stop_all(nodes: list[BrokerProcess]) -> None:
    """SIGTERM every running node at once, then wait for each (faster than one by one)."""
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.terminate()
    for node in nodes:
        node.stop()


def api_request(node: BrokerProcess, path: str) -> urllib.request.Request:
    """A GET of `node`'s management API that logs in with the node's cluster credentials (a node
    with security enabled takes them as its own cluster's; without, they are ignored). A pair
    serving as one node (`petrel.testing.chaos.pair.LivePair`) answers through its live process."""
    if hasattr(node, "live"):
        node = node.live()
    request = urllib.request.Request(f"http://127.0.0.1:{node.http_port}{path}")
    try:
        settings = tomllib.loads(node.config_path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return request
    user, password = settings.get("cluster_user"), settings.get("cluster_password")
    if user and password:
        request.add_header("Authorization", basic_authorization(user, password))
    return request


def cluster_view(node: BrokerProcess) -> dict:
    with urllib.request.urlopen(api_request(node, "/api/v1/cluster"), timeout=5) as r:
        return json.loads(r.read())


def _safe_view(node: BrokerProcess) -> dict:
    try:
        return cluster_view(node)
    except OSError:
        return {}


def wait_connected(nodes: list[BrokerProcess], peers: int | None = None, timeout: float = 30) -> None:
    """Every node has `peers` (default: all others) bridges up."""
    want = len(nodes) - 1 if peers is None else peers

    def ready():
        return all(sum(b["connected"] for b in _safe_view(n).get("bridges", [])) >= want for n in nodes)

    wait_for(ready, timeout, 0.05, f"cluster bridges not up within {timeout}s")


def wait_bindings(node: BrokerProcess, name: str, *, count: int = 1, consumers: int | None = None,
                  timeout: float = 30) -> list[dict]:
    """Wait until `node` has `count` remote bindings named `name` (with >= `consumers` consumers each)."""

    def ready():
        found = [b for b in _safe_view(node).get("remote_bindings", []) if b["name"] == name]
        if consumers is not None:
            found = [b for b in found if b["consumer_count"] >= consumers]
        return found if len(found) >= count else None

    return wait_for(ready, timeout, 0.05, f"{count} remote binding(s) {name!r} not on the node within {timeout}s")


def queue_count(node: BrokerProcess, name: str) -> int | None:
    """`message_count` of queue `name` on `node` (management API); None when there is no such queue."""
    try:
        with urllib.request.urlopen(api_request(node, f"/api/v1/queues/{name}"), timeout=5) as r:
            return json.loads(r.read())["message_count"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def backlog(node: BrokerProcess) -> int:
    """Messages waiting in (or sent and not yet confirmed from) the node's store-and-forward queues."""
    return sum(b["backlog"] for b in cluster_view(node)["bridges"])
