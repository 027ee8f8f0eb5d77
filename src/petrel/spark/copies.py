"""Messages that moved between nodes (scale-down, the drainer, ``petrel spark recover``), as the
source reads them: each exactly once, whichever node it was read on.

A migrated message gets a new sequence number on the node it moves to, but carries where it
was (``_PETREL_ORIGIN``: the node, queue and sequence number of every earlier position, see
`petrel.core.remote.ORIGIN`). Its positions, oldest first and its current one last, are its
*hops*. A batch ``[start, end)`` reads a message at exactly one of them, its *owner*: the first
hop whose key the batch's ``end`` offset has passed (``seq < end[key]``). So

- a copy of a message the query read on the node it left (an earlier batch, or this one) is
  skipped where it arrived: that hop is covered by the node's offset, which never moves again
  once the node is gone (it no longer answers);
- a copy of a message the query had not read there (the node's offset is below it) is read
  where it arrived, once;
- a batch whose range on a node could not be read before that node left (its tasks find the
  node gone, `moved_away`; or a query killed mid-batch runs it again after the scale-down)
  reads that range from the copies instead: every other node's queue of that name, from the
  batch's start there (or its first message when the batch has no offset there yet), keeping
  the copies whose hop on the gone node falls in the range and that the batch does not read
  elsewhere (`read_copies`).

Every batch (and its replay) applies the same rule to the same offsets, so the rows of all
committed batches hold each message once. A gone node's range is read from its copies only
once no other node says the node is moving messages to it (``migrating_from`` of
`queue_info`: a scale-down or a drain connected to it, or one that began and has not finished,
such as a drainer killed part way), so they have all arrived: a batch run again before the
drainer is run again waits for it (up to ``reconnectTimeout``, then fails and is run again).
The target keeps that mark in its store (core/migrations_open.py), across its own restarts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from collections.abc import Callable, Mapping
from typing import TypeVar

from petrel.client import ClientError, Connection, NotFound, RangeRecord, SeqRange
from petrel.core.remote import origin_hops
from petrel.spark.nodes import Nodes, connect, retrying
from petrel.spark.offsets import key

__all__ = ["NoCopies", "moved_away", "owned", "owner", "read_copies", "read_gone_range"]

log = logging.getLogger("petrel.spark.source")

T = TypeVar("T")
PAGE = 1000  # messages per browse request
MOVING_WAIT = 0.5  # s between looks at a node still moving its messages
LOOK_TIMEOUT = 5.0  # s to reach a peer when looking at whether a node has left


def owner(message: RangeRecord, node: str, queue: str, cover: Mapping[str, int]) -> str | None:
    """The key (``<node>/<queue>``) of the hop at which a batch ending at ``cover`` reads
    ``message``, now at sequence number ``message.seq`` of ``queue`` on ``node``; None when no
    hop is covered (a later batch reads it)."""
    for n, q, s in origin_hops(message.properties):
        k = key(n, q)
        if s < cover.get(k, -1):
            return k
    here = key(node, queue)
    return here if message.seq < cover.get(here, -1) else None


def owned(messages: list[RangeRecord], node: str, queue: str, cover: Mapping[str, int]) -> list[RangeRecord]:
    """The ``messages`` of a range read on ``node`` that the batch reads there (copies whose
    earlier position the batch or an earlier one covers are left out)."""
    if not cover:
        return messages
    here = key(node, queue)
    out = []
    for m in messages:
        if m.properties and owner(m, node, queue, cover) != here:
            continue
        out.append(m)
    return out


class NoCopies(ClientError):
    """No other node holds a copy from that range or after it: the node did not move its messages."""


def read_copies(gone: str, queue: str, lo: int, hi: int, peers: tuple[tuple[str, str, int], ...],
                cover: Mapping[str, int],
                browse: Callable[[str, str, int], SeqRange]) -> list[tuple[str, list[RangeRecord]]]:
    """The copies of ``[lo, hi)`` of ``queue`` on node ``gone`` (no longer in the cluster) that
    the batch reads there, as (the node holding them, messages in their hop's order), from
    ``peers`` ((node, url, first sequence number to look at)); ``browse(node, url, from_seq)``
    reads a page of ``queue`` there (NotFound: no such queue). Raises NoCopies when no peer
    holds a copy from that queue of that node at ``lo`` or after: the node was not scaled down
    or drained, it is only away (or restarted on a directory drained before), and its
    messages are read from it."""
    gone_key = key(gone, queue)
    found: dict[int, tuple[str, RangeRecord]] = {}
    moved = False
    for node, url, from_seq in peers:
        at = from_seq
        while True:
            try:
                got = browse(node, url, at)
            except NotFound:
                break
            for m in got.messages:
                s = next((h[2] for h in origin_hops(m.properties) if key(h[0], h[1]) == gone_key), None)
                if s is None or s < lo:
                    continue
                moved = True
                if s < hi and s not in found and owner(m, node, queue, cover) == gone_key:
                    found[s] = (node, m)
            if got.next_seq <= at or got.next_seq >= got.tail_seq:
                break
            at = got.next_seq
    if not moved:
        raise NoCopies(f"petrel source: node {gone} is not in the cluster, and no other node holds a message of "
                       f"its queue {queue} moved from [{lo}, ...)")
    log.warning("petrel source: node %s has left the cluster; %d messages of %s [%d, %d) read from where they "
                "moved", gone, len(found), queue, lo, hi, extra={"event": "spark.source.copies"})
    by_node: dict[str, list[RangeRecord]] = {}
    for s in sorted(found):
        node, m = found[s]
        by_node.setdefault(node, []).append(m)
    return list(by_node.items())


def read_gone_range(part, credentials: dict[str, str], timeout: float) -> list[tuple[str, list[RangeRecord]]]:
    """`read_copies` of the source's task ``part`` (a ``QueueRange`` of a node not in the
    cluster, with its ``peers`` and ``cover``), over connections of its own; first waits, for
    up to ``timeout`` seconds, while a peer says the node is moving its messages to it (their
    copies are not all there yet). Raises NoCopies as `read_copies` does."""
    conns: dict[str, Connection] = {}

    def conn(node: str, url: str) -> Connection:
        c = conns.get(url)
        if c is None:
            c = conns[url] = connect(url, credentials, timeout)
        if c.node_id != node:
            _close(conns.pop(url))
            raise ClientError(f"petrel source: the broker at {url} is node {c.node_id}, not node {node}")
        return c

    def ask(node: str, url: str, request: Callable[[Connection], T], what: str) -> T:
        def once() -> T:
            c = conn(node, url)
            try:
                return request(c)
            except NotFound:
                raise
            except ClientError:
                _close(conns.pop(url, c))
                raise
        return retrying(once, timeout, f"{what} on node {node} at {url}")

    def moving() -> list[str]:
        out = []
        for node, url, _ in part.peers:
            info = ask(node, url, lambda c: c.queue_info(part.queue), f"look at {part.queue}")
            if info is not None and part.node in info.get("migrating_from", ()):
                out.append(node)
        return out

    try:
        deadline = time.monotonic() + timeout
        while still := moving():
            if time.monotonic() > deadline:
                raise ClientError(f"petrel source: node {part.node} has left the cluster and is still moving its "
                                  f"messages to {', '.join(still)} after {timeout:g} s; the batch reads "
                                  f"[{part.lo}, {part.hi}) of {part.queue} from there once it is done: run "
                                  f"its drain again to the end (petrel drain), or, if node {part.node} is never "
                                  f"coming back, DELETE /api/v1/migrations/{part.node} on {', '.join(still)}")
            time.sleep(MOVING_WAIT)
        return read_copies(part.node, part.queue, part.lo, part.hi, part.peers, dict(part.cover),
                           lambda node, url, at: ask(node, url, lambda c: c.browse_range(part.queue, at, 2 ** 62, PAGE),
                                                     f"read {part.queue}"))
    finally:
        for c in conns.values():
            _close(c)


def moved_away(part, at: int, credentials: dict[str, str],
               timeout: float) -> list[tuple[str, list[RangeRecord]]] | None:
    """For a task that cannot reach its node: ``[at, hi)`` of ``part`` from the copies on the
    other nodes (`read_gone_range`) when the node is no longer in the topology of the first of
    them and has moved messages there; None when it is still a member, or moved nothing (only
    away: read it from itself once it is back)."""
    peers = Nodes(part.peers[0][1], [], credentials, min(LOOK_TIMEOUT, timeout))
    try:
        if part.node in peers.discover():
            return None
    except ClientError:
        return None
    finally:
        peers.close()
    try:
        found = read_gone_range(replace(part, lo=at), credentials, timeout)
    except NoCopies:
        return None
    log.warning("petrel source: node %s left the cluster while [%d, %d) of %s was read from it; the rest read "
                "from where it moved", part.node, at, part.hi, part.queue, extra={"event": "spark.source.node_gone"})
    return found


def _close(c: Connection) -> None:
    try:
        c.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close
        pass
