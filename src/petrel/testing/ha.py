"""Live-backup pairs of real `petrel run` processes, for the HA tests, the chaos harness and bench.

`make_pair(tmp_path, "replication")` gives a primary and a backup whose broker.toml pair them
(each names the other in its cluster connection); `"shared_store"` gives two processes on one
data directory. `ha_view(node)` reads `/api/v1/ha`; `wait_in_sync(backup)` waits until a
replicating backup holds a complete copy.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from petrel.testing.cluster import api_request
from petrel.testing.process import BrokerProcess, wait_for

__all__ = ["make_pair", "make_pairs", "start_pair", "send_range", "drain", "exactly", "stop_all", "ha_view", "wait_in_sync", "live_of", "route_through", "PASSWORD"]

PASSWORD = "test-ha-secret"


def make_pair(tmp_path: Path, kind: str = "replication", *, primary: str = "", backup: str = "",
              top: str = "", cluster: str = "", connection_ttl: int = 2000,
              others: list[BrokerProcess] = (), name: str = "pair") -> tuple[BrokerProcess, BrokerProcess]:
    """`primary`/`backup`: extra [ha_policy] lines for each; `top`: extra top-level settings for both;
    `others`: lives of other pairs to name as static connectors too (a cluster of pairs)."""
    tmp_path = Path(tmp_path)
    shared = tmp_path / f"{name}-shared" if kind == "shared_store" else None
    p = BrokerProcess(tmp_path / f"{name}-primary", name=f"{name}-primary", http=True, data_dir=shared)
    b = BrokerProcess(tmp_path / f"{name}-backup", name=f"{name}-backup", http=True, data_dir=shared)
    for node, role, extra, peer in ((p, "primary", primary, b), (b, "backup", backup, p)):
        statics = ", ".join(f'"tcp://127.0.0.1:{o.port}"' for o in (peer, *others))
        text = (f'cluster_user = "petrel-test"\ncluster_password = "{PASSWORD}"\n{top}'
                f'[ha_policy]\n{kind} = "{role}"\n{extra}\n')
        if kind == "replication" or cluster:
            text += ("[[cluster_connections]]\n"
                     f'connector = "tcp://127.0.0.1:{node.port}"\n'
                     f"static_connectors = [{statics}]\n"
                     f"retry_interval = 100\nmax_retry_interval = 500\nconnection_ttl = {connection_ttl}\n{cluster}")
        with open(node.config_path, "a") as f:
            f.write(text)
    return p, b


def make_pairs(tmp_path: Path, n: int, *, primary: str = "", backup: str = "", top: str = "",
               connection_ttl: int = 2000) -> list[tuple[BrokerProcess, BrokerProcess]]:
    """``n`` replicated pairs in one cluster (group_name pair<i>): every node names every other."""
    tmp_path = Path(tmp_path)
    pairs = [(BrokerProcess(tmp_path / f"pair{i}-primary", name=f"pair{i}-primary", http=True),
              BrokerProcess(tmp_path / f"pair{i}-backup", name=f"pair{i}-backup", http=True)) for i in range(n)]
    nodes = [node for pair in pairs for node in pair]
    for i, pair in enumerate(pairs):
        for node, role, extra in ((pair[0], "primary", primary), (pair[1], "backup", backup)):
            statics = ", ".join(f'"tcp://127.0.0.1:{o.port}"' for o in nodes if o is not node)
            with open(node.config_path, "a") as f:
                f.write(f'cluster_user = "petrel-test"\ncluster_password = "{PASSWORD}"\n{top}'
                        f'[ha_policy]\nreplication = "{role}"\ngroup_name = "pair{i}"\n{extra}\n'
                        "[[cluster_connections]]\n"
                        f'connector = "tcp://127.0.0.1:{node.port}"\n'
                        f"static_connectors = [{statics}]\n"
                        f"retry_interval = 100\nmax_retry_interval = 500\nconnection_ttl = {connection_ttl}\n")
    return pairs


def ha_view(node: BrokerProcess) -> dict:
    try:
        with urllib.request.urlopen(api_request(node, "/api/v1/ha"), timeout=2) as r:  # as the cluster
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.HTTPError):
        return {}


def wait_in_sync(backup: BrokerProcess, timeout: float = 60.0) -> dict:
    """Wait until a replicating backup has the whole copy and follows its live."""
    def in_sync() -> dict | None:
        if backup.proc is not None and backup.proc.poll() is not None:
            raise RuntimeError(f"backup exited with {backup.proc.returncode}:\n{backup.log()}")
        view = ha_view(backup)
        live = view.get("replication", {}).get("live") or {}
        return view if live.get("state") == "in-sync" else None

    return wait_for(in_sync, timeout, message=f"backup not in sync in {timeout}s:\n{backup.log()}")


def live_of(*nodes: BrokerProcess) -> BrokerProcess | None:
    """The node of a pair that serves now (by /health), or None."""
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None and node.health().get("status") == "ok":
            return node
    return None


def route_through(node: BrokerProcess, target: BrokerProcess, port: int) -> None:
    """Make ``node`` reach ``target`` (its static connector) through ``port`` (a TcpProxy)."""
    text = node.config_path.read_text()
    node.config_path.write_text(text.replace(f'"tcp://127.0.0.1:{target.port}"', f'"tcp://127.0.0.1:{port}"'))


def start_pair(primary: BrokerProcess, backup: BrokerProcess) -> None:
    """Start a replicated pair: the primary serving, the backup in sync."""
    primary.start()
    backup.start(wait=False)
    wait_in_sync(backup)


def stop_all(*nodes: BrokerProcess) -> None:
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.kill9()


# -- numbered messages and the exactly-once check -------------------------------------------------

async def send_range(target: str, queue: str, numbers, *, body: bytes = b"") -> None:
    """Persistent messages ``b"<n>:" + body`` for each n, every one confirmed before returning."""
    from petrel.client import Message, connect

    conn = await connect(target)
    session = await conn.session()
    producer = session.producer(queue)
    for i in numbers:
        await producer.send(Message(b"%d:" % i + body))
    await session.flush()
    await conn.close()


async def drain(target: str, queue: str, idle: float = 1.0) -> list[int]:
    """Consume ``queue`` until it stays empty for ``idle`` s; the numbers received, in order
    (a body that is not one byte repeated after its number fails: it arrived damaged)."""
    from petrel.client import connect

    conn = await connect(target)
    session = await conn.session()
    consumer = await session.consumer(queue)
    out = []
    while (m := await consumer.receive(idle)) is not None:
        number, _, body = m.body.partition(b":")
        assert len(set(body)) <= 1, f"message {number!r} arrived damaged"
        out.append(int(number))
    await session.close()
    await conn.close()
    return out


def exactly(numbers: list[int], expected) -> None:
    """Every expected number once: none lost, none twice."""
    dupes = len(numbers) - len(set(numbers))
    assert dupes == 0, f"{dupes} delivered twice"
    missing = sorted(set(expected) - set(numbers))
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {missing[:10]}"
