"""CORE frames of replication (types 0x60-0x7F), registered with the codec on import.

A backup opens a CORE connection to its live (CONNECT with the "replication" capability),
then REPLICA_REGISTER with the cluster credentials and its group name. The live answers with
a RESULT (its node ID and activation sequence, or why it refuses), then streams the
data directory: REPLICA_OPS frames carry the store's file operations in one order, the
initial copy's chunks among them, the end of the copy marked by a ``sync-done`` operation.
The backup answers REPLICA_ACK with the last operation it has made durable; the live
confirms a client's send only once the backup has acknowledged everything written before it.
REPLICA_STOPPING tells the backup why the live goes away (to fail over to it, or not).

Operations are plain lists, ``[kind, path, a, b]``: see :data:`OP_KINDS`.
"""

from __future__ import annotations

from typing import ClassVar

from .events import Event, register

__all__ = ["ReplicaRegister", "ReplicaOps", "ReplicaAck", "ReplicaStopping", "ReplicaVote", "ReplicaVoteAnswer",
           "REPLICATION_CAPABILITY", "OP_KINDS"]

REPLICATION_CAPABILITY = "replication"

#: op kind -> meaning of (path, a, b)
OP_KINDS = {
    "write": "path, offset, data",
    "create": "path, size (zeros), -",
    "rename": "path (from), to, -",
    "delete": "path, -, -",
    "truncate": "path, size, -",
    "link": "path (from), to, -",
    "sync-done": "-, -, -",
}


class ReplicaRegister(Event, frozen=True, array_like=True):
    """Backup -> live: pair with me."""

    TYPE: ClassVar[int] = 0x60
    corr: int
    node_id: str  # the backup's own node ID (before it holds a copy of the live's)
    group_name: str | None
    user: str
    password: str
    connector: str  # where the backup will serve once it takes over
    twin: bool = False  # a primary: only a live serving its own node ID may take it


class ReplicaOps(Event, frozen=True, array_like=True, gc=False):
    """Live -> backup: operations ``first``, ``first + 1``, ... in order."""

    TYPE: ClassVar[int] = 0x61
    first: int
    ops: list[list] = []


class ReplicaAck(Event, frozen=True, array_like=True):
    """Backup -> live: every operation up to ``seq`` is durable here."""

    TYPE: ClassVar[int] = 0x62
    seq: int


class ReplicaStopping(Event, frozen=True, array_like=True):
    """Live -> backup: I am stopping after ``seq``; ``fail_over``: take over once you have it all."""

    TYPE: ClassVar[int] = 0x63
    seq: int
    fail_over: bool


class ReplicaVote(Event, frozen=True, array_like=True):
    """A backup that lost its live asks another live: is ``node_id`` gone from your view?

    A live that lost its backup asks about itself, naming its process (``unique_id``, new at
    every start): a link to its backup, which took over under the same node ID, is not one to it."""

    TYPE: ClassVar[int] = 0x64
    corr: int
    node_id: str
    user: str
    password: str
    unique_id: str = ""  # "": any process of node_id


class ReplicaVoteAnswer(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = 0x65
    corr: int
    gone: bool
    cluster_size: int  # the largest cluster the voter has seen, itself included


class ReplicaFailback(Event, frozen=True, array_like=True):
    """A returning primary, in sync: give way to me (the live answers with REPLICA_STOPPING)."""

    TYPE: ClassVar[int] = 0x66


register(ReplicaRegister, client=True, server=False)
register(ReplicaAck, client=True, server=False)
register(ReplicaVote, client=True, server=False)
register(ReplicaFailback, client=True, server=False)
register(ReplicaOps, client=False, server=True)
register(ReplicaStopping, client=False, server=True)
register(ReplicaVoteAnswer, client=False, server=True)
