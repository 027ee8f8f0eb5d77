"""The brokers a source reads, as its driver sees them: which nodes the cluster has, where to
reach each one, which of their queues the ``queues`` option names, and their sequence numbers.

The ``brokers`` option gives one or more ways in (``tcp://a:61616,tcp://b:61616`` or a
failover URL). The first that answers tells its node ID and the cluster's topology (every
live node with its connector and backup); each node is then reached on its own URL
(``failover:(live,backup)`` when it has a backup, so a failed-over node is read from its
backup, which serves the same node ID and sequence numbers). Without a topology the node is
the one reached.

Connections are kept for the life of the query's driver-side source process and made again
after a failure, for up to ``reconnectTimeout`` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from petrel.client import ClientError, Connection, NotFound, QueueSequence, RequestFailed, parse_url
from petrel.core.redistribution import INTERNAL_PREFIX

__all__ = ["Nodes", "connect", "retrying", "seed_urls"]

log = logging.getLogger("petrel.spark.source")

T = TypeVar("T")
TOPOLOGY_WAIT = 1.0  # s to wait for the first topology update of a new connection


def seed_urls(brokers: str) -> list[str]:
    """The ways in named by ``brokers``: a failover URL is one, a list of plain URLs is one each."""
    parsed = parse_url(brokers)
    if parsed.is_failover or len(parsed.endpoints) == 1:
        return [brokers.strip()]
    query = brokers.partition("?")[2]
    return [str(e) + (f"?{query}" if query else "") for e in parsed.endpoints]


def connect(url: str, credentials: dict[str, str], timeout: float) -> Connection:
    """A connection to ``url``, tried again until ``timeout`` seconds have passed."""
    return retrying(lambda: Connection(url, **credentials), timeout, f"connect to {url}")


def retrying(call: Callable[[], T], timeout: float, what: str) -> T:
    """``call()``, again after a connection failure until ``timeout`` seconds have passed.
    What the broker refused (`RequestFailed`) is not tried again."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        try:
            return call()
        except RequestFailed:
            raise
        except (ClientError, OSError) as exc:
            if time.monotonic() + pause > deadline:
                raise ClientError(f"petrel source: could not {what} within {timeout:g} s: {exc}") from exc
            log.info("petrel source: cannot %s yet (%s); trying again", what, exc)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


class Nodes:
    """Driver-side: the cluster's nodes and their queues (see the module docstring)."""

    def __init__(self, brokers: str, patterns: list[str], credentials: dict[str, str], timeout: float) -> None:
        self.seeds = seed_urls(brokers)
        self.patterns = patterns
        self.credentials = credentials
        self.timeout = timeout
        self.urls: dict[str, str] = {}  # node ID -> URL
        self._conns: dict[str, Connection] = {}  # URL -> connection

    # -- nodes -----------------------------------------------------------------------------
    def discover(self, timeout: float | None = None) -> dict[str, str]:
        """Node ID -> URL of every live node (one request-free look at the topology), trying for
        up to ``timeout`` seconds (default: the source's ``reconnectTimeout``)."""
        return retrying(self._discover, self.timeout if timeout is None else timeout, f"reach any of {self.seeds}")

    def _discover(self) -> dict[str, str]:
        failure: Exception | None = None
        known = [u for u in self.urls.values() if u not in self.seeds]
        for seed in self.seeds + known:  # then the nodes found before (a seed's node may have failed over)
            try:
                conn = self._conn(seed)
            except ClientError as exc:
                failure = exc
                continue
            found = {conn.node_id: seed}
            for m in conn.topology:
                if m.leaving:
                    continue
                if m.node_id == conn.node_id:  # the seed reached it; its backup serves it after a failover
                    if m.backup and not parse_url(seed).is_failover:
                        found[m.node_id] = f"failover:({seed.partition('?')[0]},tcp://{m.backup})?randomize=false"
                elif m.live:
                    found[m.node_id] = (f"failover:(tcp://{m.live},tcp://{m.backup})?randomize=false"
                                        if m.backup else f"tcp://{m.live}")
            self.urls.update(found)
            return found
        raise failure or ClientError("no brokers")

    def url(self, node: str) -> str:
        if node not in self.urls:
            self.discover()
        if node not in self.urls:
            raise ClientError(f"petrel source: node {node} is not in the cluster's topology (reached through "
                              f"{', '.join(self.seeds)}): its queues cannot be read")
        return self.urls[node]

    # -- requests --------------------------------------------------------------------------
    def queues(self) -> dict[str, list[str]]:
        """Node ID -> the names of its queues that the ``queues`` option names; never the broker's
        own (``$.petrel.*``): a store-and-forward queue holds copies on their way to another node,
        which the query reads where they arrive (and `#` names them too)."""
        out = {}
        for node, url in sorted(self.discover().items()):
            try:
                names = self.call(node, lambda c: sorted({n for p in self.patterns for n in c.queue_names(p)
                                                          if not n.startswith(INTERNAL_PREFIX)}))
            except ClientError as exc:
                log.warning("petrel source: cannot list the queues of node %s at %s: %s", node, url, exc)
                continue
            out[node] = names
        return out

    def seqs(self, node: str, queue: str) -> QueueSequence | None:
        """The queue's earliest and tail sequence numbers on ``node``, None if it has no such queue."""
        try:
            return self.call(node, lambda c: c.queue_seqs(queue))
        except NotFound:
            return None

    def call(self, node: str, request: Callable[[Connection], T], timeout: float | None = None) -> T:
        """``request(connection to node)``, after a connection failure on a new connection, for
        up to ``timeout`` seconds (default: the source's ``reconnectTimeout``)."""
        url = self.url(node)

        def once() -> T:
            conn = self._conn(url)
            if conn.node_id != node:
                self._drop(url)
                raise ClientError(f"the broker at {url} is node {conn.node_id}, not {node}")
            try:
                return request(conn)
            except RequestFailed:
                raise
            except ClientError:
                self._drop(url)
                raise

        return retrying(once, self.timeout if timeout is None else timeout, f"reach node {node} at {url}")

    def _conn(self, url: str) -> Connection:
        conn = self._conns.get(url)
        if conn is not None and conn.connected:
            return conn
        self._drop(url)
        conn = Connection(url, **self.credentials)
        deadline = time.monotonic() + TOPOLOGY_WAIT
        while not conn.topology and time.monotonic() < deadline:
            time.sleep(0.01)
        self._conns[url] = conn
        return conn

    def _drop(self, url: str) -> None:
        conn = self._conns.pop(url, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close
                pass

    def close(self) -> None:
        for url in list(self._conns):
            self._drop(url)
