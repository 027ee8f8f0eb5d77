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
- a batch whose range on a node could not be read before that node left (a query killed
  mid-batch, run again after the scale-down) reads that range from the copies instead: every
  other node's queue of that name, from the batch's start there (or its first message when
  the batch has no offset there yet), keeping the copies whose hop on the gone node falls in
  the range and that the batch does not read elsewhere (`read_copies`).

Every batch (and its replay) applies the same rule to the same offsets, so the rows of all
committed batches hold each message once. What the rule cannot know: a replayed batch that
reads a gone node's range from its copies while that node's messages are still moving (a
scale-down or a drain not yet finished) reads the copies that have arrived; see the README.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from petrel.client import ClientError, NotFound, RangeRecord, SeqRange
from petrel.core.remote import origin_hops
from petrel.spark.offsets import key

__all__ = ["NoCopies", "owned", "owner", "read_copies"]

log = logging.getLogger("petrel.spark.source")


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
