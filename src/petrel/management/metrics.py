"""Prometheus metrics with Artemis-like names, one registry per broker.

NodeContext, address, queue and (on a clustered node) cluster figures are read from the live objects at scrape time by a
custom collector (the scrape runs on the broker's loop, like every other reader). The
journal's per-batch figures arrive from its writer thread through ``on_batch_stats`` and
go into histograms, whose ``observe`` is thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from petrel.management.usage import address_memory_bytes, journals
from petrel.server.limits import capped

if TYPE_CHECKING:
    from petrel.server.node import NodeContext

__all__ = ["BrokerMetrics", "CONTENT_TYPE"]

log = logging.getLogger("petrel.management.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RECORD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
BYTE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)

# (metric, help, queue attribute); counters get `_total` from the client library.
_QUEUE_GAUGES = (
    ("petrel_message_count", "Messages in the queue (waiting, scheduled or delivering)", "message_count"),
    ("petrel_delivering_message_count", "Messages out with consumers, not yet acknowledged", "delivering_count"),
    ("petrel_scheduled_message_count", "Messages waiting for their scheduled delivery time", "scheduled_count"),
    ("petrel_consumer_count", "Consumers attached to the queue", "consumer_count"),
)
_QUEUE_COUNTERS = (
    ("petrel_messages_added", "Messages added to the queue since the broker started", "messages_added"),
    ("petrel_messages_acknowledged", "Messages acknowledged (or removed) from the queue", "messages_acked"),
    ("petrel_messages_expired", "Messages that expired in the queue", "messages_expired"),
    ("petrel_messages_killed", "Messages sent to the dead-letter address after too many attempts", "messages_killed"),
)
_JOURNAL_GAUGES = (
    ("petrel_journal_live_bytes", "Bytes of live records in the journal", "live_bytes"),
    ("petrel_journal_used_bytes", "Bytes used in the journal's segment files", "used_bytes"),
    ("petrel_journal_segments", "Journal segment files in use", "segments"),
)

# (metric, help, key of a bridge in ClusterConnection.describe(), family) with the label `node`.
_BRIDGE_FIGURES = (
    ("petrel_cluster_bridge_up", "1 while the bridge to the node is connected", "connected", GaugeMetricFamily),
    ("petrel_cluster_bridge_backlog", "Messages in the store-and-forward queue for the node", "backlog",
     GaugeMetricFamily),
    ("petrel_cluster_bridge_forwarded", "Messages the bridge sent to the node (a resend counts again)",
     "messages_forwarded", CounterMetricFamily),
    ("petrel_cluster_bridge_reconnects", "Times the bridge to the node reconnected", "reconnects",
     CounterMetricFamily),
)


class _BrokerCollector:
    """Reads the broker's counters at scrape time; must be called on the broker's loop."""

    def __init__(self, broker: NodeContext) -> None:
        self.broker = broker
        self.journal_stats: dict[str, dict] = {}

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        if broker.activation is not None:  # a waiting backup has no office, but has its HA figures
            yield from _ha(broker.activation.describe())
        office = broker.office
        if office is None:
            return
        queues = list(office.queues.values())
        limit = broker.config.metrics_max_queues
        shown = capped(queues, limit)  # (a broker with 100,000 queues made /metrics 69 MB)
        labels = ["address", "queue"]
        for name, doc, attr in _QUEUE_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for q in shown:
                family.add_metric([q.address, q.name], getattr(q, attr))
            yield family
        for name, doc, attr in _QUEUE_COUNTERS:
            family = CounterMetricFamily(name, doc, labels=labels)
            for q in shown:
                family.add_metric([q.address, q.name], getattr(q, attr))
            yield family
        memory = GaugeMetricFamily(
            "petrel_address_memory_usage_bytes", "Body bytes of the messages held for the address", labels=["address"]
        )
        for address in capped(list(office.addresses.values()), limit):
            memory.add_metric([address.name], address_memory_bytes(address))
        yield memory
        yield GaugeMetricFamily("petrel_connection_count", "Client connections open", value=len(broker.connections))
        yield GaugeMetricFamily("petrel_address_count", "Addresses on the broker", value=len(office.addresses))
        yield GaugeMetricFamily("petrel_queue_count", "Queues on the broker", value=len(queues))
        yield GaugeMetricFamily("petrel_queue_series_omitted", "Queues left out of the per-queue series "
                                "(over metrics_max_queues)", value=len(queues) - len(shown))
        yield GaugeMetricFamily(
            "petrel_routed_message_count", "Messages routed to at least one queue", value=office.messages_routed
        )
        yield GaugeMetricFamily(
            "petrel_unrouted_message_count", "Messages sent to an address with no queue to take them",
            value=office.unrouted,
        )
        yield GaugeMetricFamily(
            "petrel_duplicate_message_count", "Messages dropped as duplicates by duplicate detection",
            value=office.duplicates,
        )
        info = GaugeMetricFamily("petrel_broker_info", "The broker's identity", labels=["name", "node_id", "version"])
        info.add_metric([broker.config.name, broker.node_id, broker.version], 1)
        yield info
        yield GaugeMetricFamily("petrel_active", "1 while the broker serves clients", value=1)
        yield from self._journal()
        if broker.cluster is not None:
            yield from _cluster(broker.cluster.describe())

    def _journal(self) -> Iterator[Metric]:
        stats = self.journal_stats
        if not stats:
            return
        for name, doc, key in _JOURNAL_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["journal"])
            for journal, values in stats.items():
                family.add_metric([journal], values.get(key, 0))
            yield family


def _ha(view: dict) -> Iterator[Metric]:
    """The HA figures, from the same view as ``GET /api/v1/ha``; replication's only with replication,
    a link's lag only while the link copies (a lost backup's last figure is not current)."""
    yield GaugeMetricFamily("petrel_ha_live", "1 while this broker is the live of its node, 0 while it waits as a "
                            "backup, syncs, starts or stops", value=1 if view.get("state") == "live" else 0)
    if view.get("failovers") is not None:
        yield CounterMetricFamily("petrel_ha_failovers", "Times this broker took over as the live of its node "
                                  "(failover or failback)", value=view["failovers"])
    repl = view.get("replication")
    if not isinstance(repl, dict):
        return
    # peer="backup": this live's copy on its backup; peer="live": this backup's copy of its live
    lag = GaugeMetricFamily("petrel_ha_replication_lag_operations", "Replicated operations the backup has not "
                            "yet confirmed (peer=backup, on the live) or applied (peer=live, on the backup)",
                            labels=["peer"])
    in_sync = GaugeMetricFamily("petrel_ha_replica_in_sync", "1 while the backup holds an in-sync copy of the "
                                "live's data (as the live sees its backup, peer=backup, or the backup its copy, "
                                "peer=live)", labels=["peer"])
    state = view.get("state")
    for peer in ("backup", "live"):
        side = repl.get(peer)
        if isinstance(side, dict) and side.get("state") != "lost" and side.get("lag_operations") is not None:
            lag.add_metric([peer], side["lag_operations"])
    live, backup = repl.get("live"), repl.get("backup")
    if state == "live":
        in_sync.add_metric(["backup"], int(isinstance(backup, dict) and backup.get("state") == "in-sync"))
    elif state in ("backup", "syncing"):
        in_sync.add_metric(["live"], int(isinstance(live, dict) and live.get("state") == "in-sync"))
    yield lag
    yield in_sync


def _cluster(view: dict) -> Iterator[Metric]:
    """The cluster figures, from the same view as ``GET /api/v1/cluster``."""
    yield GaugeMetricFamily("petrel_cluster_members", "Cluster members connected to this node, itself included",
                            value=sum(m["connected"] for m in view["members"]))
    bridges: dict[str, dict] = {}
    for bridge in view["bridges"]:  # one series per peer: a stopped bridge gives way to its successor
        node = bridge["node_id"] or bridge["connector"]
        if node not in bridges or bridges[node]["state"] == "stopped":
            bridges[node] = bridge
    for name, doc, key, kind in _BRIDGE_FIGURES:
        family = kind(name, doc, labels=["node"])
        for node, bridge in bridges.items():
            family.add_metric([node], int(bridge[key]))
        yield family
    yield GaugeMetricFamily("petrel_cluster_remote_bindings", "Queues on other nodes this node routes to",
                            value=len(view["remote_bindings"]))
    yield CounterMetricFamily("petrel_cluster_messages_redistributed",
                              "Messages moved to another node because nobody consumed them here",
                              value=view["messages_redistributed"])
    yield CounterMetricFamily("petrel_cluster_duplicates_dropped",
                              "Bridged messages dropped because they had already arrived",
                              value=view["duplicates_dropped"])


class BrokerMetrics:
    """The registry of one broker and the hooks that feed it."""

    def __init__(self, broker: NodeContext) -> None:
        disable_created_metrics()  # no `_created` series: Artemis has none, and they double the text
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = _BrokerCollector(broker)
        self.registry.register(self.collector)
        ProcessCollector(namespace="petrel", registry=self.registry)
        self.sync_seconds = Histogram(
            "petrel_journal_sync_latency_seconds", "Time one journal batch took to sync to disk",
            ["journal"], registry=self.registry, buckets=SYNC_BUCKETS,
        )
        self.batch_records = Histogram(
            "petrel_journal_batch_records", "Records written in one journal batch",
            ["journal"], registry=self.registry, buckets=RECORD_BUCKETS,
        )
        self.batch_bytes = Histogram(
            "petrel_journal_batch_size_bytes", "Bytes written in one journal batch",
            ["journal"], registry=self.registry, buckets=BYTE_BUCKETS,
        )
        self._attached: list[object] = []

    def attach(self) -> None:
        """Start receiving each journal batch's figures (from the writer thread)."""
        for name, journal in journals(self.broker.store).items():
            if hasattr(journal, "on_batch_stats"):
                journal.on_batch_stats = self._observer(name)
                self._attached.append(journal)

    def detach(self) -> None:
        for journal in self._attached:
            journal.on_batch_stats = None
        self._attached.clear()

    def _observer(self, journal: str) -> Callable[[int, int, float], None]:
        records = self.batch_records.labels(journal)
        size = self.batch_bytes.labels(journal)
        sync = self.sync_seconds.labels(journal)

        def observe(n_records: int, n_bytes: int, seconds: float) -> None:
            records.observe(n_records)
            size.observe(n_bytes)
            if seconds > 0:
                sync.observe(seconds)

        return observe

    def read_journal_stats(self) -> None:
        """Take the journals' figures (blocking: call it off the loop)."""
        stats = {}
        for name, journal in journals(self.broker.store).items():
            try:
                stats[name] = journal.stats()
            except Exception as exc:  # a failed journal still lets the rest be scraped
                log.debug("journal %s stats unavailable: %s", name, exc)
        self.collector.journal_stats = stats

    def render(self) -> bytes:
        """The exposition text; call it on the broker's loop."""
        return generate_latest(self.registry)
