"""The source's offsets: ``{"<node id>/<queue>": next sequence number}``, and how they move.

An offset names, for every (node, queue) the source reads, the first sequence number it has
not read yet. Sequence numbers are per node and queue (unrelated from one node to the
next), hence the node in the key. Offsets go to Spark as plain dicts of ints with sorted
keys: Spark compares them as JSON strings, so the same offset must always print the same.

Pure functions only; the broker requests are in nodes.py, the reader in source.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["EARLIEST", "LATEST", "Offsets", "advance", "fair_split", "key", "parse_offsets", "split_key"]

Offsets = dict[str, int]

#: In a JSON ``startingOffsets``/``endingOffsets``: the queue's earliest or latest position.
EARLIEST, LATEST = -2, -1


def key(node: str, queue: str) -> str:
    return f"{node}/{queue}"


def split_key(k: str) -> tuple[str, str]:
    """(node, queue) of a key; a queue name may hold ``/``, a node ID does not."""
    node, sep, queue = k.partition("/")
    if not sep or not node or not queue:
        raise ValueError(f"petrel source: an offset key is '<node id>/<queue>', not {k!r}")
    return node, queue


def sorted_offsets(offsets: Mapping[str, int]) -> Offsets:
    return {k: int(offsets[k]) for k in sorted(offsets)}


def parse_offsets(text: str, option: str) -> dict[str, int]:
    """A JSON offsets option: ``{"<node>/<queue>" or "<queue>": seq}``, where a seq of -2 is
    the queue's earliest position and -1 its latest (tail)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"petrel source: option {option} is 'earliest', 'latest', 'acked' or a JSON "
                         f"object {{\"<node id>/<queue>\": seq}}, not {text!r} ({exc})") from None
    if not isinstance(value, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= -2
                                              for v in value.values()):
        raise ValueError(f"petrel source: option {option} must map '<node id>/<queue>' or '<queue>' to a "
                         f"sequence number (or -2 for earliest, -1 for latest), not {text!r}")
    return {str(k): int(v) for k, v in value.items()}


def lookup(given: Mapping[str, int], k: str) -> int | None:
    """The position a JSON offsets option gives key ``k``: by its full key, else by its queue."""
    if k in given:
        return given[k]
    return given.get(split_key(k)[1])


def fair_split(pending: Mapping[str, int], budget: int, turn: int = 0) -> dict[str, int]:
    """How many of ``budget`` sequence numbers each key may read, given how many it has
    ``pending``: equal shares, what a key cannot use goes to the others (so a busy queue
    never starves a quiet one, nor the other way round). A remainder smaller than the number
    of keys goes one each, starting at key number ``turn`` (so it rotates as offsets move)."""
    grant = {k: 0 for k in pending}
    left = {k: n for k, n in pending.items() if n > 0}
    while budget > 0 and left:
        share = budget // len(left)
        if share == 0:
            order = sorted(left)
            start = turn % len(order)
            for k in (order[start:] + order[:start])[:budget]:
                grant[k] += 1
            break
        for k in sorted(left):
            take = min(share, left[k])
            grant[k] += take
            left[k] -= take
            budget -= take
        left = {k: n for k, n in left.items() if n > 0}
    return grant


def advance(start: Mapping[str, int], available: Mapping[str, int], budget: int | None) -> Offsets:
    """The end offset of the next batch: every key of ``start`` moved towards ``available``
    (never backwards), with at most ``budget`` sequence numbers in all when one is given.
    Keys only in ``start`` stay where they are."""
    end = dict(start)
    pending = {k: max(0, available[k] - start[k]) for k in start if k in available}
    if budget is None:
        grant = pending
    else:
        grant = fair_split(pending, budget, turn=sum(start.values()))
    for k, n in grant.items():
        end[k] = start[k] + n
    return sorted_offsets(end)
