"""Run one seed: brokers up, the workload under the plan's faults, heal, drain, restart every
broker, drain again, check the ledger.

The first drain (every queue on every node, DLQ and ExpiryQueue included, until every queue and
every store-and-forward backlog is empty) settles every message still owed; the restart after
it shows whether anything acknowledged comes back (a DUPLICATE) and the second drain takes it.
"""

from __future__ import annotations

import shutil
import traceback
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from petrel.client import Connection
from petrel.testing.chaos import security
from petrel.testing.chaos.channels import body_mid
from petrel.testing.chaos.faults import DiskMount, Injector
from petrel.testing.chaos.ledger import Ledger, Verdict, message_id
from petrel.testing.chaos.drain import DrainPair
from petrel.testing.chaos.pair import SharedStorePair
from petrel.testing.chaos.replication import LiveDisk, ReplicationPair
from petrel.testing.chaos.scale_down import ScaleDown
from petrel.testing.chaos.spark import SparkQuery, spark_available
from petrel.testing.chaos.plan import (EXTRA_PROTOCOLS, EXTRA_TOPOLOGIES, LARGE_THRESHOLD, SPARK_TOPOLOGIES, Plan,
                                       make_plan)
from petrel.testing.chaos.timeline import Timeline
from petrel.testing.chaos.workload import QUEUE, TOPIC, Ports, Workload, streams_of
from petrel.testing.cluster import (api_request, backlog, make_cluster, start_all, stop_all, wait_bindings,
                                    wait_connected)
from petrel.testing.process import OWN_DISK_LIMIT, BrokerProcess, free_port, wait_for
from petrel.testing.proxy import TcpProxy

__all__ = ["RunResult", "replay_command", "run_plan", "run_seed"]

DEAD_ENDS = ("DLQ", "ExpiryQueue")  # their messages say no stream


def replay_command(seed: int, scale: float = 1.0, topology: str | None = None, protocol: str | None = None) -> str:
    extra = f" --scale {scale:g}" if scale != 1.0 else ""
    if topology in EXTRA_TOPOLOGIES:
        extra += f" --topology {topology}"
    if protocol in EXTRA_PROTOCOLS:
        extra += f" --protocol {protocol}"
    return f".venv/bin/python -m petrel.testing.chaos --seed {seed}{extra}"


@dataclass
class RunResult:
    plan: Plan
    verdict: Verdict
    injected: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # hangs, crashes, queues that never emptied
    timeline: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    scale: float = 1.0

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems

    def summary(self) -> str:
        v = self.verdict
        state = "ok" if self.ok else "FAILED"
        return (f"seed {self.plan.seed}: {state} in {self.elapsed:.0f}s: confirmed {v.confirmed}, in doubt {v.in_doubt}, "
                f"lost {v.lost}, duplicated {v.duplicated}, redelivered {v.redelivered}, reordered {v.reordered}"
                + (f", repeated {v.repeated} (allowed)" if v.repeated else ""))

    def report(self) -> str:
        """What a failing run prints: the verdict, the seed's replay command, the plan and the timeline."""
        lines = [self.summary()]
        if self.verdict.defects():
            lines.append(f"  {self.verdict.defects()}")
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        lines.append(f"  replay: {replay_command(self.plan.seed, self.scale, self.plan.topology, self.plan.protocol)}")
        lines.append("  plan: " + self.plan.describe().replace("\n", "\n  "))
        if self.skipped:
            lines.append("  skipped: " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items()))
        lines.append("  timeline:")
        lines += self.timeline
        return "\n".join(lines)


def _settings_top(plan: Plan) -> str:
    """`_settings` with the address settings as an inline table, so that more tables may follow."""
    text = f"min_large_message_size = {LARGE_THRESHOLD}\njournal_file_size = 1048576\n"
    entries = [f'max_size_bytes = 262144, address_full_policy = "{plan.limit}", page_size_bytes = 65536'] \
        if plan.limit != "none" else []
    entries.append("max_delivery_attempts = 20")
    return text + f'address_settings = {{ "chaos.#" = {{ {", ".join(entries)} }} }}\n'


def _settings(plan: Plan) -> str:
    text = f"min_large_message_size = {LARGE_THRESHOLD}\njournal_file_size = 1048576\n"
    if plan.protocol == "OPENWIRE" and plan.topology == "cluster":
        # a node back after a restart gets failover clients back: moves under the run's faults
        text += "rebalance_cluster_clients = true\n"
    text += '[address_settings."chaos.#"]\n'
    if plan.limit != "none":
        text += f'max_size_bytes = 262144\naddress_full_policy = "{plan.limit}"\npage_size_bytes = 65536\n'
    text += "max_delivery_attempts = 20\n"
    return text


def _own_disk_limit(node) -> None:
    """A node whose data directory is a small tmpfs has the broker's own disk limit (the fault
    fills the disk over it), not the test run's none (`petrel.testing.process.HOST_DISK`)."""
    for proc in getattr(node, "nodes", (node,)):
        proc.env.update(OWN_DISK_LIMIT)


class _Brokers:
    """The plan's brokers, their link proxies and tmpfs mounts."""

    def __init__(self, plan: Plan, workdir: Path, timeline: Timeline) -> None:
        self.plan = plan
        self.timeline = timeline
        self.proxies: dict[tuple[int, int], TcpProxy] = {}
        self.disks: dict[int, DiskMount] = {}
        self.pair: SharedStorePair | ReplicationPair | None = None
        self.drain: DrainPair | None = None
        self.scale: ScaleDown | None = None  # spark-scale: node 1 leaving
        self.zookeeper = None
        own = plan.topology in ("single", "pair", "drain")  # topologies without cluster credentials of their own
        top = security.settings_top(plan, workdir, cluster_credentials=own)
        if plan.topology == "pair":
            self.pair = SharedStorePair(workdir, top + _settings_top(plan))
            self.nodes = [self.pair]
        elif plan.topology == "replication":
            connect = None
            if plan.lock == "zookeeper":
                from petrel.testing.zookeeper import ZooKeeperServer, zookeeper_available

                missing = zookeeper_available()
                if missing:
                    raise RuntimeError(f"this seed's pair needs ZooKeeper: {missing}")
                self.zookeeper = ZooKeeperServer(workdir / "zookeeper").start()
                connect = self.zookeeper.connect_string
            self.pair = ReplicationPair(workdir, top + _settings_top(plan), failback=plan.failback, zookeeper=connect)
            self.nodes = [self.pair]
            if "disk_full" in plan.fault_kinds:
                disk = LiveDisk(self.pair)
                why = disk.mount()
                if why is None:
                    self.disks[0] = disk
                    _own_disk_limit(self.pair)
                else:
                    timeline.note(f"disk_full will be skipped: {why}")
        elif plan.topology == "drain":
            self.drain = DrainPair(workdir, top + _settings(plan), login=security.drainer_login(plan))
            self.nodes = self.drain.nodes
        elif plan.nodes == 1:
            self.nodes = [BrokerProcess(workdir / "node0", settings=top + _settings(plan), name="node0", http=True)]
        else:
            via = {}
            for i in range(plan.nodes):
                for j in range(plan.nodes):
                    if i != j:
                        self.proxies[(i, j)] = TcpProxy("127.0.0.1", 0, listen_port=free_port())
                        via[(i, j)] = self.proxies[(i, j)].listen_port
            self.nodes = make_cluster(workdir, plan.nodes, redistribution_delay=0, extra_top=top + _settings(plan),
                                      connection_ttl=2000, via=via)
            for (i, j), proxy in self.proxies.items():
                proxy.target_port = self.nodes[j].port
                proxy.start()
            if plan.topology == "spark-scale":
                self.scale = ScaleDown(self.nodes, timeline)
        security.secure(plan, workdir, [proc for node in self.nodes for proc in getattr(node, "nodes", (node,))])
        for fault in plan.faults:
            if plan.topology == "replication":
                break
            if fault.kind == "disk_full" and fault.node not in self.disks:
                disk = DiskMount(self.nodes[fault.node].data_dir)
                why = disk.mount()
                if why is None:
                    self.disks[fault.node] = disk
                    _own_disk_limit(self.nodes[fault.node])
                else:
                    timeline.note(f"disk_full will be skipped: {why}")

    @property
    def retired(self) -> set[int]:
        """Nodes gone for good (the drain topology's drained source, spark-scale's node that left)."""
        if self.scale is not None:
            return self.scale.retired
        return self.drain.retired if self.drain is not None else set()

    def serving(self) -> list[tuple[int, BrokerProcess]]:
        return [(i, n) for i, n in enumerate(self.nodes) if i not in self.retired]

    def consumer_ports(self) -> list[Ports] | None:
        """The drain topology's consumers read from the target from the start, so that what the
        source holds when it dies reaches them only through the drainer."""
        if self.drain is None:
            return None
        t = self.drain.target
        return [Ports(1, t.stomp_port, t.port)]

    def ports(self) -> list[Ports]:
        if self.drain is not None:
            s, t = self.drain.nodes
            return [Ports(0, s.stomp_port, s.port, ((t.stomp_port, t.port),))]
        if self.pair is not None:
            p, b = self.pair.nodes
            return [Ports(0, p.stomp_port, p.port, ((b.stomp_port, b.port),))]
        if self.scale is not None:  # the first producer on the leaving node, then on the other
            n0, n1 = self.nodes
            return [Ports(1, n1.stomp_port, n1.port, ((n0.stomp_port, n0.port),)), Ports(0, n0.stomp_port, n0.port)]
        return [Ports(i, n.stomp_port, n.port) for i, n in enumerate(self.nodes)]

    def start(self) -> None:
        if self.pair is not None:
            self.pair.start()
            return
        if self.drain is not None:
            start_all([n for _, n in self.serving()])
            if self.plan.destination == "durable-topic":
                self.drain.create_subscriptions(TOPIC, streams_of(self.plan))  # on both brokers
            return
        start_all(self.nodes)
        if len(self.nodes) > 1:
            wait_connected(self.nodes, timeout=60)

    def stop(self) -> None:
        if self.pair is not None:
            self.pair.stop_all()
        else:
            stop_all([n for _, n in self.serving()])

    def restart(self) -> None:
        if isinstance(self.pair, ReplicationPair):
            self.pair.restart_all()
            return
        self.stop()
        self.start()

    def close(self) -> None:
        if isinstance(self.pair, ReplicationPair):
            self.pair.close()
        else:
            self.stop()
        if self.drain is not None:
            self.drain.close()
        for proxy in self.proxies.values():
            proxy.stop()
        for disk in self.disks.values():
            disk.unmount()
        if self.zookeeper is not None:
            self.zookeeper.close()


def _queues(node: BrokerProcess) -> list[dict]:
    import json
    import urllib.request

    with urllib.request.urlopen(api_request(node, "/api/v1/queues"), timeout=10) as r:  # as the cluster
        return json.loads(r.read())["queues"]


def _drain_queue(conn: Connection, name: str, stream: str | None, ledger: Ledger) -> int:
    session = conn.session()
    consumer = session.consumer(name, ack="client")
    taken = 0
    batch: list[str] = []
    last = None  # received, not yet acknowledged
    try:
        while True:
            m = consumer.receive(1.0)
            if m is not None:
                if last is not None:
                    last.ack()  # batched, sent before the confirmed one below
                last = m
                mid = body_mid(m.body)
                ledger.drained(stream, mid)
                batch.append(mid)
                taken += 1
            if last is not None and (m is None or len(batch) >= 100):
                session._run(consumer._async.ack(last))  # returns once this and the earlier acks are on disk
                if stream is not None:
                    ledger.ack_confirmed(stream, batch)
                batch, last = [], None
            if m is None:
                return taken
    finally:
        consumer.close()
        session.close()


def drain(brokers: _Brokers, ledger: Ledger, timeline: Timeline, timeout: float = 120) -> list[str]:
    """Take every message from every queue of every node until all are empty; the problems left."""
    streams = set(streams_of(brokers.plan))
    deadline = time.monotonic() + timeout
    total = 0
    while True:
        left: dict[str, int] = {}
        for i, node in brokers.serving():
            queues = [q for q in _queues(node) if not q["name"].startswith("$")]
            with Connection(f"tcp://127.0.0.1:{node.port}", **security.core_login(brokers.plan)) as conn:
                for q in queues:
                    name = q["name"]
                    stream = None if name in DEAD_ENDS else name
                    if stream is not None and stream not in streams and q["message_count"] == 0:
                        continue
                    total += _drain_queue(conn, name, stream, ledger)
            for q in _queues(node):
                waiting = q["message_count"] + q.get("scheduled_count", 0)
                if waiting and not q["name"].startswith("$"):
                    left[f"node{i}:{q['name']}"] = waiting
            if brokers.plan.nodes > 1:
                sf = backlog(node)
                if sf:
                    left[f"node{i}:store-and-forward"] = sf
        if not left:
            timeline.note(f"drained {total} messages")
            return []
        if time.monotonic() > deadline:
            return [f"queues not empty after {timeout:.0f}s of draining: {left}"]
        time.sleep(0.5)


def _wait_subscriptions(workload: Workload, brokers: _Brokers) -> None:
    """Every producer's node routes to every durable subscription before the first send: a
    subscription made on another node is known there once its binding arrives (a message
    published before that is not for it, as in any cluster)."""
    for c in workload.consumers:
        for p in workload.producers:
            if p.ports.node != c.ports.node:
                wait_bindings(brokers.nodes[p.ports.node], c.stream, timeout=30)


def run_seed(seed: int, workdir: Path, *, scale: float = 1.0, topology: str | None = None,
             protocol: str | None = None) -> RunResult:
    return run_plan(make_plan(seed, scale=scale, topology=topology, protocol=protocol), workdir, scale=scale)


def run_plan(plan: Plan, workdir: Path, *, scale: float = 1.0) -> RunResult:
    started = time.monotonic()
    timeline = Timeline()
    ledger = Ledger()
    workdir = Path(workdir)
    problems: list[str] = []
    if plan.protocol == "OPENWIRE":  # the JMS process compiled and started (or why not) before the brokers
        from petrel.testing.chaos.openwire_channels import start_jvm

        start_jvm()
    brokers = _Brokers(plan, workdir, timeline)
    injector = query = None
    try:
        brokers.start()
        let_in = security.anonymous_let_in(plan, brokers.ports()[0].stomp)
        if let_in:
            problems.append(let_in)
        if plan.topology in SPARK_TOPOLOGIES:
            query = _start_query(plan, brokers, workdir, timeline, ledger)
        workload = Workload(replace(plan, producers=0) if plan.topology == "spark-sink" else plan, ledger, timeline,
                            brokers.ports(), brokers.consumer_ports())
        injector = Injector(brokers.nodes, brokers.proxies, brokers.disks, workload, timeline, brokers.drain)
        injector.drain_kills = plan.drain_kills
        injector.query = query
        injector.scale, injector.scale_when = brokers.scale, plan.scale_when
        workload.start_consumers()
        if plan.nodes > 1 and plan.destination == "queue":
            for c in workload.consumers:
                try:
                    wait_bindings(brokers.nodes[0], QUEUE, consumers=1, timeout=20)
                except TimeoutError:
                    timeline.note(f"node 0 saw no remote consumer of {QUEUE} ({c.name})")
                break
        elif plan.nodes > 1:
            _wait_subscriptions(workload, brokers)
        timeline.note("workload starts")
        t0 = time.monotonic()
        workload.start_producers()
        _inject(plan, injector, t0, brokers, timeline)
        limit = plan.duration * 4 + 120
        try:
            wait_for(workload.producers_done, limit, 0.1)
        except TimeoutError:
            unconfirmed = len(ledger.unconfirmed())
            problems.append(f"producers not done {limit:.0f}s after the start ({unconfirmed} sends unconfirmed): "
                            "a hang?")
        if brokers.drain is not None:
            problems += brokers.drain.wait()  # the consumers read what the drainer brings to the target
        if brokers.scale is not None:
            problems += brokers.scale.wait()  # every message of the leaving node on the other
        if query is None:
            _settle(workload)
        workload.stop()
        problems += workload.errors()
        injector.heal_all()
        for i, node in brokers.serving():
            if node.proc is not None and node.proc.poll() is not None:
                full = any(f.kind == "disk_full" and f.node == i for f in plan.faults)
                note = f"node {i} exited by itself with code {node.proc.returncode}"
                timeline.note(note)
                if not full:
                    problems.append(note + ":\n" + node.log()[-1500:])
                node.start()
        if plan.nodes - len(brokers.retired) > 1:
            wait_connected(brokers.nodes, timeout=60)
        if isinstance(brokers.pair, ReplicationPair):
            brokers.pair.wait_ready()  # every restarted process is back as the backup, in sync
            timeline.note(f"the pair settled: {brokers.pair.states()}")
        if query is not None and query.sink_chunk:
            problems += _finish_sink(plan, query, brokers, ledger, timeline)
        elif query is not None:
            problems += _finish_query(plan, query, brokers, ledger, timeline)
        else:
            problems += drain(brokers, ledger, timeline)
            timeline.note("restart every broker")
            brokers.restart()
            problems += drain(brokers, ledger, timeline, timeout=60)
    except Exception as exc:  # noqa: BLE001 - reported with the seed
        where = [f for f in traceback.extract_tb(exc.__traceback__) if "/petrel/" in f.filename][-1]
        problems.append(f"run aborted: {exc!r} ({Path(where.filename).name}:{where.lineno} in {where.name})")
        timeline.note(f"run aborted: {exc!r}")
    finally:
        if isinstance(brokers.pair, ReplicationPair):
            problems += brokers.pair.two_lives
        if query is not None:
            query.stop()
        try:
            brokers.close()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"stopping the brokers failed: {exc!r}")
    restarted = injector is not None and injector.restarted
    verdict = ledger.check(ordered=plan.ordered, restarted=restarted)
    result = RunResult(plan, verdict, dict(injector.injected) if injector else {},
                       dict(injector.skipped) if injector else {}, problems, timeline.lines(),
                       time.monotonic() - started, scale)
    if result.ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _start_query(plan: Plan, brokers: _Brokers, workdir: Path, timeline: Timeline, ledger: Ledger) -> SparkQuery:
    """The spark topology's consumer: the queue made, the query process started and ready (its
    JVM up) before the first send. spark-sink: the query is the producer, its input files written
    (every row sent, confirmed once the query has run to the end)."""
    missing = spark_available()
    if missing:
        raise RuntimeError(f"the spark topology needs pyspark: {missing}")
    node = brokers.nodes[0]
    for each in brokers.nodes:  # spark-scale: the queue on both nodes
        with Connection(f"tcp://127.0.0.1:{each.port}") as conn:
            conn.create_queue(QUEUE, QUEUE, "ANYCAST", exists_ok=True)
    query = SparkQuery(workdir, f"tcp://127.0.0.1:{node.port}", QUEUE, timeline, max_per_batch=plan.batch_limit,
                       sink_chunk=plan.sink_chunk)
    query.start()
    query.wait_ready()
    if plan.sink_chunk:  # after the query's first pass (an empty input): read from the next one
        mids = _sink_rows(plan)
        for mid in mids:
            ledger.sent(mid, (QUEUE,))
        query.write_input(mids, plan.rows_per_file, plan.body_size)
    timeline.note("the spark query is ready")
    return query


def _finish_query(plan: Plan, query: SparkQuery, brokers: _Brokers, ledger: Ledger, timeline: Timeline) -> list[str]:
    """The query's last run and its output into the ledger; what the queue still holds is its
    last batch (in the output already), so it is counted, not drained."""
    problems = query.finish()
    problems += query.feed(ledger, QUEUE, str(plan.seed) if plan.duplicate_ids else None)
    held = {q["name"]: q["message_count"] for q in _queues(brokers.nodes[0]) if not q["name"].startswith("$")}
    timeline.note(f"after the query: {query.starts} query processes, {query.kills} killed "
                  f"({query.mid_batch} mid-batch); the broker holds {held}")
    for dead in DEAD_ENDS:
        if held.get(dead):
            problems.append(f"{held[dead]} messages in {dead}")
    return problems


def _sink_rows(plan: Plan) -> list[str]:
    return [message_id(p, i) for p in range(plan.producers) for i in range(plan.messages)]


def _finish_sink(plan: Plan, query: SparkQuery, brokers: _Brokers, ledger: Ledger, timeline: Timeline) -> list[str]:
    """The sink query's last run; then every row is confirmed, and the queue drained must hold
    each exactly once."""
    problems = query.finish()
    if not problems:
        ledger.confirmed(_sink_rows(plan))

    class Found:  # what `_drain_queue` takes, in order
        def __init__(self) -> None:
            self.mids: list[str] = []

        def drained(self, stream, mid):
            self.mids.append(mid)

        def ack_confirmed(self, stream, mids):
            pass

    found = Found()
    node = brokers.nodes[0]
    with Connection(f"tcp://127.0.0.1:{node.port}") as conn:
        _drain_queue(conn, QUEUE, QUEUE, found)
    query.count_drained(ledger, QUEUE, found.mids)
    held = {q["name"]: q["message_count"] for q in _queues(node) if not q["name"].startswith("$")}
    timeline.note(f"after the sink query: {query.starts} query processes, {query.kills} killed "
                  f"({query.mid_batch} mid-batch); {len(found.mids)} drained; the broker holds {held}")
    problems += [f"{n} messages left in {name}" for name, n in held.items() if n]
    return problems


def _inject(plan: Plan, injector: Injector, t0: float, brokers: _Brokers, timeline: Timeline) -> None:
    events = sorted([(f.at, 0, n) for n, f in enumerate(plan.faults)]
                    + [(f.at + f.hold, 1, n) for n, f in enumerate(plan.faults)])
    for at, heal, n in events:
        delay = t0 + injector.waited + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        fault = plan.faults[n]
        (injector.heal if heal else injector.apply)(fault)


def _settle(workload: Workload, quiet: float = 1.5, limit: float = 20) -> None:
    """Let the consumers take what is there until nothing has come for `quiet` seconds."""
    deadline = time.monotonic() + limit
    last, still = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = sum(c.received for c in workload.consumers)
        if now != last:
            last, still = now, time.monotonic()
        elif time.monotonic() - still > quiet:
            return
        time.sleep(0.1)
