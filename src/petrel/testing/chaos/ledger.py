"""The accounting of a chaos run, Jepsen-style: what the clients were told, checked at the end.

Clients record, as it happens (any thread):

- ``sent(mid, streams, durable=...)``: a send was attempted; ``confirmed(mids)``: its receipt,
  send confirmation or commit came back. A send never confirmed is *in doubt*: it may arrive or not.
- ``delivered(stream, mid)``: a consumer of queue `stream` got the message.
- ``ack_sent(stream, mids)``: an acknowledgement (or the commit holding it) left the client, so
  its outcome is in doubt; ``ack_confirmed(stream, mids)``: its receipt / commit came back.
- ``drained(stream, mid)``: found by the final drain, after every fault was healed and every
  broker restarted (`stream` None for the dead-letter and expiry queues, which say no stream).

`check()` then finds, per (stream, message):

- LOST: confirmed and never acknowledged nor found by the drain (a delivery that was not
  acknowledged does not count: the broker owes a redelivery);
- DUPLICATE: delivered or drained again after its acknowledgement was confirmed;
- REDELIVERED: delivered more than once before that (allowed, counted);
- REORDERED: on a stream where the contract promises order, a message of a producer after a
  later one of the same producer, before any redelivery on that stream;
- UNKNOWN: a message nobody sent.

A send the client's protocol may have stored twice (``may_repeat(mids)``: an OpenWire failover
client's send replayed on another node of a cluster) may have a second copy: its copies after
the acknowledgement are REPEATED (allowed, counted), not DUPLICATE.

Every event carries a number from one clock, so "after" is well defined across threads.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["Ledger", "Verdict", "message_id", "parse_id"]


def message_id(producer: int, seq: int) -> str:
    return f"p{producer}-{seq}"


def parse_id(mid: str) -> tuple[int, int]:
    """(producer, seq) of a message id."""
    p, s = mid[1:].split("-", 1)
    return int(p), int(s)


@dataclass
class _Sent:
    streams: tuple[str, ...]
    durable: bool
    confirmed: bool = False


@dataclass
class Verdict:
    sent: int = 0
    confirmed: int = 0
    in_doubt: int = 0  # sends never confirmed (arrived or not, either is allowed)
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    redelivered: int = 0
    reordered: int = 0
    unknown: int = 0
    dropped_non_durable: int = 0  # non-durable messages gone after a broker restart (allowed)
    in_flight: int = 0  # gone on the wire to an auto-acknowledging STOMP consumer that dropped (allowed)
    repeated: int = 0  # copies of a send that may have been stored twice (`Ledger.may_repeat`; allowed)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.unknown)

    def defects(self) -> str:
        parts = [f"{name.upper()} {n}: {', '.join(self.examples.get(name, [])[:8])}"
                 for name, n in (("lost", self.lost), ("duplicated", self.duplicated),
                                 ("reordered", self.reordered), ("unknown", self.unknown)) if n]
        return "; ".join(parts)


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self._sent: dict[str, _Sent] = {}
        # (stream, mid) -> clocks
        self._deliveries: dict[tuple[str, str], list[int]] = defaultdict(list)
        self._drained: dict[tuple[str | None, str], list[int]] = defaultdict(list)
        self._ack_sent: set[tuple[str, str]] = set()
        self._ack_confirmed: dict[tuple[str, str], int] = {}
        self._resent: set[str] = set()
        self._may_repeat: set[str] = set()
        self._at_most_once: set[str] = set()
        self._by_stream: dict[str, list[tuple[str, bool]]] = defaultdict(list)  # (mid, redelivered) in order

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    # -- recording (any thread) ---------------------------------------------------------------

    def sent(self, mid: str, streams: tuple[str, ...] | list[str], *, durable: bool = True) -> None:
        with self._lock:
            if mid not in self._sent:
                self._sent[mid] = _Sent(tuple(streams), durable)

    def resent(self, mids) -> None:
        """These in-doubt sends went again (same id): they are no longer in their producer's order."""
        with self._lock:
            self._resent.update(mids)

    def may_repeat(self, mids) -> None:
        """These sends may have been stored twice, by the protocol's contract (see the module)."""
        with self._lock:
            self._may_repeat.update(mids)
            self._resent.update(mids)

    def confirmed(self, mids) -> None:
        with self._lock:
            for mid in mids:
                self._sent[mid].confirmed = True

    def delivered(self, stream: str, mid: str, *, redelivered: bool = False) -> None:
        """`redelivered`: the broker marked it so (order is no longer promised from there)."""
        with self._lock:
            t = self._tick()
            self._deliveries[(stream, mid)].append(t)
            self._by_stream[stream].append((mid, redelivered))

    def ack_sent(self, stream: str, mids) -> None:
        with self._lock:
            self._ack_sent.update((stream, mid) for mid in mids)

    def ack_confirmed(self, stream: str, mids) -> None:
        with self._lock:
            t = self._tick()
            for mid in mids:
                self._ack_sent.add((stream, mid))
                self._ack_confirmed.setdefault((stream, mid), t)

    def at_most_once(self, stream: str) -> None:
        """A consumer of `stream` whose broker acknowledges on sending (STOMP ack=auto) lost its
        connection: what was on the wire to it is gone by contract, so a confirmed message of
        `stream` that never arrives is counted as `in_flight`, not LOST."""
        with self._lock:
            self._at_most_once.add(stream)

    def drained(self, stream: str | None, mid: str) -> None:
        with self._lock:
            self._drained[(stream, mid)].append(self._tick())

    @property
    def confirmed_count(self) -> int:
        with self._lock:
            return sum(s.confirmed for s in self._sent.values())

    def unconfirmed(self) -> list[str]:
        """Ids of sends not (yet) confirmed, in the order they were recorded."""
        with self._lock:
            return [mid for mid, s in self._sent.items() if not s.confirmed]

    # -- the check --------------------------------------------------------------------------------

    def check(self, *, ordered: bool = False, restarted: bool = False) -> Verdict:
        """`ordered`: the plan promises per-producer order on every stream; `restarted`: a broker
        was restarted, so non-durable messages may be gone."""
        with self._lock:
            return self._check(ordered, restarted)

    def _check(self, ordered: bool, restarted: bool) -> Verdict:
        v = Verdict()
        examples: dict[str, list[str]] = defaultdict(list)

        def flag(kind: str, text: str) -> None:
            if len(examples[kind]) < 20:
                examples[kind].append(text)

        # Drained copies without a stream (DLQ, ExpiryQueue) satisfy one stream of their message.
        orphans: dict[str, int] = defaultdict(int)
        for (stream, mid), clocks in self._drained.items():
            if stream is None:
                orphans[mid] += len(clocks)
        for mid, sent in self._sent.items():
            v.sent += 1
            v.confirmed += sent.confirmed
            v.in_doubt += not sent.confirmed
        for (stream, mid), clocks in list(self._deliveries.items()) + [
                (k, c) for k, c in self._drained.items() if k[0] is not None]:
            if mid not in self._sent:
                v.unknown += 1
                flag("unknown", f"{stream}:{mid}")
        for mid in orphans:
            if mid not in self._sent:
                v.unknown += 1
                flag("unknown", f"DLQ/expiry:{mid}")

        for mid, sent in self._sent.items():
            for stream in sent.streams:
                key = (stream, mid)
                deliveries = self._deliveries.get(key, [])
                drains = self._drained.get(key, [])
                v.delivered += bool(deliveries)
                acked_at = self._ack_confirmed.get(key)
                copies = sorted(deliveries + drains)
                if acked_at is not None:
                    after = [c for c in copies if c > acked_at]
                    if after and mid in self._may_repeat and len(after) == 1:  # one copy more, at most
                        v.repeated += len(after)
                    elif after:
                        v.duplicated += len(after)
                        flag("duplicated", f"{stream}:{mid}")
                    v.redelivered += max(len([c for c in copies if c < acked_at]) - 1, 0)
                else:
                    v.redelivered += max(len(copies) - 1, 0)
                settled = key in self._ack_sent or bool(drains)
                if not settled and orphans.get(mid):
                    orphans[mid] -= 1
                    settled = True
                if sent.confirmed and not settled:
                    if not sent.durable and restarted:
                        v.dropped_non_durable += 1
                    elif stream in self._at_most_once:
                        v.in_flight += 1
                    else:
                        v.lost += 1
                        flag("lost", f"{stream}:{mid}")
        if ordered:
            for stream, events in self._by_stream.items():
                v.reordered += self._reorders(stream, events, flag, self._resent)
        v.examples = dict(examples)
        return v

    @staticmethod
    def _reorders(stream: str, events: list[tuple[str, bool]], flag, resent: set[str]) -> int:
        """Per-producer order of first deliveries, until the first redelivery on the stream."""
        last: dict[int, int] = {}
        seen: set[str] = set()
        count = 0
        for mid, redelivered in events:
            if mid in seen or redelivered:
                break  # a redelivery: order is no longer promised
            seen.add(mid)
            if mid in resent:
                continue
            producer, seq = parse_id(mid)
            if seq < last.get(producer, -1):
                count += 1
                flag("reordered", f"{stream}:{mid} after p{producer}-{last[producer]}")
            else:
                last[producer] = seq
        return count
