"""A seed -> a frozen `Plan`: the workload's dimensions and the fault schedule of one chaos run.

Everything random in a run is drawn here, from ``random.Random(seed)``, so a seed names a run
exactly: the same seed gives the same plan on any machine (the moments at which the brokers
and the clients interleave are the only thing a replay does not repeat).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

__all__ = ["ACK_MODES", "DIMENSIONS", "EXTRA_PROTOCOLS", "EXTRA_TOPOLOGIES", "FAULT_KINDS", "HA_FAULT_KINDS", "SPARK_FAULT_KINDS",
           "SPARK_TOPOLOGIES", "Fault",
           "Plan", "make_plan"]

PROTOCOLS = ("STOMP", "CORE")
#: Protocols a run gets only when asked for (``make_plan(seed, protocol="AMQP")``), so that the
#: seeds drawn before them keep their plans. AMQP 1.0 (python-qpid-proton) does everything the
#: plan draws; MQTT 5 (paho-mqtt) speaks topics only, so its runs use the durable topic (one
#: persistent session per subscription), acknowledge transacted batches one by one, and send
#: without priority or delay (MQTT has neither). OPENWIRE: ActiveMQ Classic's JMS client in one
#: JVM (`openwire_channels`, needs Java), over failover URLs; it sends without delay (scheduled
#: delivery is not offered over OpenWire).
EXTRA_PROTOCOLS = ("AMQP", "MQTT", "OPENWIRE")
ACK_MODES = ("auto", "client", "client-individual", "transacted")
SIZES = ("small", "large")
LIMITS = ("none", "PAGE", "BLOCK")
FEATURES = ("plain", "scheduled", "priority", "groups")
DESTINATIONS = ("queue", "durable-topic")
TOPOLOGIES = ("single", "cluster")
#: off: the test run's brokers (security off, anonymous clients); users: the brokers as shipped
#: (security on), a users file the harness writes, every client and the drainer logging in
#: (`petrel.testing.chaos.security`). Drawn from a generator of its own (seeded with the seed), so
#: the plans drawn before it keep their draws and every topology of a seed gets the same.
SECURITY = ("off", "users")
#: A topology a run gets only when asked for (``make_plan(seed, topology="pair")``), so that the
#: seeds drawn before it keep their plans: a shared-store primary and backup serving as one node,
#: every fault that hits "the node" hitting whichever of the two is live.
EXTRA_TOPOLOGIES = ("pair", "replication", "drain", "spark", "spark-sink", "spark-scale")
#: replication: a primary and a backup with a data directory each (`replication.ReplicationPair`),
#: serving as one node; drain: a broker killed mid-run and emptied by ``petrel drain`` into
#: another broker, the clients moving over to that one (`drain.DrainPair`); spark: one broker whose
#: consumer is a Spark streaming query into Parquet, killed and restarted from its checkpoint
#: (`spark.SparkQuery`): queues only, persistent sends, plain messages, no limit or PAGE; spark-sink:
#: the other way round, a Spark query publishing files of rows into the queue through the sink
#: (the producers' messages are its rows), killed and restarted alike, the queue drained at the end;
#: spark-scale: the spark query reading a queue of a 2-node cluster (through node 0) while node 1
#: scales down into node 0 mid-stream (`scale_down.ScaleDown`), the query killed and restarted.
#: kill9/sigterm: a broker killed (or stopped) and started again; link_cut/link_freeze: one
#: node's cluster links reset or silent for a while; consumer_drop: a consumer's connection
#: dropped between receiving a batch and acknowledging it; disk_full: the data directory's
#: file system filled up, then freed.
FAULT_KINDS = ("kill9", "sigterm", "link_cut", "link_freeze", "consumer_drop", "disk_full")
#: backup_kill9: a replication pair's backup killed (the live goes on alone), started again after
#: the hold; drain: the drain topology's first broker killed and drained into the other by
#: ``petrel drain``, the drainer itself killed at the plan's `drain_kills` and run again.
HA_FAULT_KINDS = ("backup_kill9", "drain")
#: query_kill9: the spark topology's query process group killed (SIGKILL), started again from its
#: checkpoint after the hold.
#: scale_down: the spark-scale topology's node 1 leaves, its messages moved to node 0.
SPARK_FAULT_KINDS = ("query_kill9", "scale_down")
SPARK_TOPOLOGIES = ("spark", "spark-sink", "spark-scale")

#: The values each dimension takes (the coverage of a set of seeds is checked against these).
DIMENSIONS: dict[str, tuple] = {
    "protocol": PROTOCOLS,
    "ack": ACK_MODES,
    "persistent": (True, False),
    "size": SIZES,
    "limit": LIMITS,
    "feature": FEATURES,
    "destination": DESTINATIONS,
    "topology": TOPOLOGIES,
    "churn": (True, False),
    "duplicate_ids": (True, False),
    "security": SECURITY,
}

LARGE_THRESHOLD = 16 * 1024  # the brokers' min_large_message_size in a chaos run


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float  # seconds after the workload starts
    node: int  # the broker it hits (consumer_drop: the consumer index)
    hold: float  # seconds the fault lasts before it is healed (the broker restarted, the link healed)

    def describe(self) -> str:
        target = f"consumer {self.node}" if self.kind == "consumer_drop" else f"node {self.node}"
        if self.kind == "query_kill9":
            target = "the spark query"
        if self.kind == "scale_down":  # the faults after it wait as long as it waits (`scale_when`)
            return f"t+{self.at:.1f}s scale_down node {self.node} into node 0"
        return f"t+{self.at:.1f}s {self.kind} {target} (held {self.hold:.1f}s)"


@dataclass(frozen=True)
class Plan:
    seed: int
    protocol: str
    ack: str
    persistent: bool
    size: str
    limit: str
    feature: str
    destination: str
    topology: str
    churn: bool  # consumers leave and join again during the run
    duplicate_ids: bool  # every send carries _AMQ_DUPL_ID (and unconfirmed sends are resent)
    producers: int
    consumers: int  # per queue (a durable topic has one consumer per subscription)
    subscriptions: int  # durable-topic only
    messages: int  # per producer
    duration: float  # seconds over which the producers pace their sends
    faults: tuple[Fault, ...] = field(default=())
    # replication only: a restarted primary takes over again (check_for_live_server), and the lock
    # manager ("none": lone_pair_failover alone, no link faults; "zookeeper": link faults too)
    failback: bool = False
    lock: str = "none"
    # drain only: seconds after each start at which the drainer is killed (then run again)
    drain_kills: tuple[float, ...] = ()
    # spark only: the query's maxMessagesPerBatch (0: everything available in one batch)
    batch_limit: int = 0
    # spark-sink only: rows per broker transaction (the sink's chunkSize)
    sink_chunk: int = 0
    security: str = "off"
    # spark-scale only: when node 1 leaves, from its fault's moment on: "now"; "read" (once a batch
    # the query planned after that moment is committed: what it read of node 1 is behind its
    # cursor); "mid-batch" (once the query plans a batch after that moment, before its commit)
    scale_when: str = ""

    @property
    def nodes(self) -> int:
        """Nodes the clients see (a pair is one node served by one of two processes)."""
        return 3 if self.topology == "cluster" else 2 if self.topology == "spark-scale" else 1

    @property
    def body_size(self) -> int:
        return 200 if self.size == "small" else LARGE_THRESHOLD + 4096

    @property
    def fault_kinds(self) -> set[str]:
        return {f.kind for f in self.faults}

    @property
    def ordered(self) -> bool:
        """Does the contract promise per-producer order on each queue of this run? One consumer
        at a time on one node, no priorities, no scheduled delivery (redeliveries void it from
        the first one on; the ledger stops checking there)."""
        return (self.consumers == 1 and self.topology in ("single", "pair", "replication")
                and self.feature in ("plain", "groups") and self.ack != "transacted")

    def dimensions(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in DIMENSIONS}

    def describe(self) -> str:
        d = self.dimensions()
        head = " ".join(f"{k}={v}" for k, v in d.items())
        work = (f"producers={self.producers} consumers={self.consumers} subscriptions={self.subscriptions} "
                f"messages={self.messages}/producer over {self.duration:.0f}s")
        faults = "; ".join(f.describe() for f in self.faults) or "none"
        if self.topology == "replication":
            work += f" failback={self.failback} lock={self.lock}"
        if self.topology == "drain":
            work += f" drainer killed after {', '.join(f'{k:.2f}s' for k in self.drain_kills)}"
        if self.topology in ("spark", "spark-scale"):
            work += f" query maxMessagesPerBatch={self.batch_limit or 'unlimited'}"
        if self.scale_when:
            work += f" node 1 leaves: {self.scale_when}"
        if self.topology == "spark-sink":
            work += f" query: {self.rows_per_file} rows per file (micro-batch), chunkSize={self.sink_chunk}"
        return f"seed {self.seed}: {head}\n  {work}\n  faults: {faults}"

    @property
    def rows_per_file(self) -> int:
        """spark-sink: the rows of one input file, so of one micro-batch."""
        return self.batch_limit or 1000  # drawn for spark-sink

    def as_dict(self) -> dict:
        return asdict(self)


def make_plan(seed: int, *, scale: float = 1.0, topology: str | None = None, protocol: str | None = None) -> Plan:
    """The plan of run `seed`; `scale` multiplies the message counts (and the pacing time);
    `topology` and `protocol` replace the drawn ones (everything else is drawn as without them,
    but for what the protocol cannot do: see `EXTRA_PROTOCOLS`)."""
    if topology is not None and topology not in TOPOLOGIES + EXTRA_TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}")
    if protocol is not None and protocol not in PROTOCOLS + EXTRA_PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}")
    if protocol == "MQTT" and topology in SPARK_TOPOLOGIES:
        raise ValueError("the spark topologies read and write queues, which MQTT cannot address")
    rng = random.Random(seed)
    protocol_drawn = rng.choice(PROTOCOLS)
    ack = rng.choice(ACK_MODES)
    persistent = rng.random() < 0.8
    size = rng.choice(SIZES)
    limit = rng.choice(LIMITS)
    feature = rng.choice(FEATURES)
    destination = rng.choice(DESTINATIONS)
    drawn = rng.choice(TOPOLOGIES)  # drawn either way: the draws after it stay the same
    topology = topology or drawn
    churn = rng.random() < 0.4
    duplicate_ids = rng.random() < 0.5
    producers = rng.choice((1, 1, 2))
    consumers = 1 if destination == "durable-topic" else rng.choice((1, 1, 2))
    subscriptions = rng.choice((1, 2)) if destination == "durable-topic" else 0
    base = rng.randint(600, 1500) if size == "small" else rng.randint(60, 160)
    messages = max(10, int(base * scale))
    duration = rng.uniform(6.0, 10.0) * max(scale, 0.3)
    nodes = 3 if topology == "cluster" else 2 if topology == "spark-scale" else 1
    kinds = ["kill9", "sigterm", "consumer_drop", "disk_full"]
    if nodes > 1:
        kinds += ["link_cut", "link_freeze"]
    failback, lock, drain_kills, batch_limit, sink_chunk, scale_when = False, "none", (), 0, 0, ""
    faults = []
    if topology == "replication":
        failback = rng.random() < 0.5
        lock = "zookeeper" if rng.random() < 0.35 else "none"
        kinds += ["backup_kill9"] + (["link_cut", "link_freeze"] if lock == "zookeeper" else [])
    elif topology == "drain":
        # the first broker (node 0) is killed and drained; the other faults hit the target (node 1)
        kinds = ["kill9", "sigterm", "consumer_drop"]
        drain_kills = tuple(round(rng.uniform(0.15, 0.8), 2) for _ in range(rng.randint(1, 4)))
        faults.append(Fault("drain", round(rng.uniform(0.2, 0.6) * duration, 2), 0, 0.0))
    elif topology in ("spark", "spark-sink"):
        # the consumer is a Spark query (one): the faults kill it or the broker
        kinds = ["kill9", "kill9", "sigterm", "query_kill9"]
        # (a broker restart skips the rest of a queue's block of 10,000 sequence numbers: with a
        # limit the query crossed that gap in empty batches until 598ac96, one per limit)
        batch_limit = rng.choice((500, 2000, 0))
        faults.append(Fault("query_kill9", round(rng.uniform(0.1, 0.85) * duration, 2), 0,
                            round(rng.uniform(0.2, 1.5), 2)))
    elif topology == "spark-scale":
        # node 1 leaves once, mid-stream; the query is killed 1 to 3 times, once maybe just after
        # the node was asked to leave (while its messages move)
        leave = round(rng.uniform(0.25, 0.7) * duration, 2)
        faults.append(Fault("scale_down", leave, 1, 0.0))
        kills = [round(rng.uniform(0.1, 0.95) * duration, 2) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.5:
            kills[0] = round(leave + rng.uniform(0.0, 1.5), 2)
        faults += [Fault("query_kill9", at, 0, round(rng.uniform(0.2, 1.5), 2)) for at in kills]
        batch_limit = rng.choice((500, 2000, 0))
        scale_when = rng.choice(("now", "read", "mid-batch"))
        kinds = []
    for _ in range(rng.choice((1, 1, 2, 3)) - (topology == "drain") if kinds else 0):
        kind = rng.choice(kinds)
        if kind == "disk_full" and any(f.kind == "disk_full" for f in faults):
            kind = "kill9"
        node = rng.randrange(consumers * max(subscriptions, 1)) if kind == "consumer_drop" else rng.randrange(nodes)
        if topology == "drain" and kind != "consumer_drop":
            node = 1
        hold = rng.uniform(0.3, 2.0)
        if topology == "replication" and kind.startswith("link"):
            hold *= 3  # past the ZooKeeper session (2 s): the backup tries the lock while the live holds it
        faults.append(Fault(kind, round(rng.uniform(0.1, 0.85) * duration, 2), node, round(hold, 2)))
    faults.sort(key=lambda f: f.at)
    if topology == "spark-sink":  # the rows in 3 to 10 files (micro-batches)
        sink_chunk = rng.choice((10, 50, 200))
        batch_limit = max(10, producers * messages // rng.choice((3, 6, 10)))
    if topology in SPARK_TOPOLOGIES:  # what the Spark source reads: queues of persistent, plain messages; no BLOCK
        destination, persistent, feature, churn = "queue", True, "plain", False
        limit = "PAGE" if limit == "BLOCK" else limit
        consumers, subscriptions = 0, 0
    if protocol == "MQTT":
        if destination == "queue":  # each consumer becomes a persistent session of its own
            destination, subscriptions, consumers = "durable-topic", max(consumers, 1), 1
        ack = "client-individual" if ack == "transacted" else ack
    protocol_ = protocol or protocol_drawn
    security = random.Random(f"security-{seed}").choice(SECURITY)
    if topology == "spark-scale":  # one producer on each node (node 1's go to node 0 once it left)
        producers = 2
    if topology in SPARK_TOPOLOGIES:  # the Spark source and sink log in as anonymous clients
        security = "off"
    return Plan(seed, protocol_, ack, persistent, size, limit, feature, destination, topology, churn,
                duplicate_ids, producers, consumers, subscriptions, messages, duration, tuple(faults),
                failback, lock, drain_kills, batch_limit, sink_chunk, security, scale_when)
