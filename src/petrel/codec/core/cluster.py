"""CORE frames of cluster links (types 0x40-0x5F), registered with the codec on import.

A node opens a cluster link as a CORE client: CONNECT (with the "cluster" capability), then
CLUSTER_JOIN with the cluster credentials. The accepting node answers with a RESULT, then
CLUSTER_MEMBERS (the topology it knows) and BINDINGS (a snapshot of the bindings within the
joiner's `max_hops`, then changes as they happen). The joiner forwards messages with FORWARD
on a session; the acceptor confirms them with SEND_CONFIRM like ordinary sends. Grouping
proposals travel as GROUP_PROPOSE / GROUP_DECISION.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from .events import Event, Send, register

__all__ = [
    "ClusterJoin",
    "ClusterMember",
    "ClusterMembers",
    "BindingInfo",
    "Bindings",
    "Forward",
    "GroupPropose",
    "GroupDecision",
    "MigrationBegin",
    "MigrateQueue",
    "MigrateDuplicateIds",
    "MigrationDone",
    "Migrated",
    "MigrateBatch",
    "CLUSTER_CAPABILITY",
]

CLUSTER_CAPABILITY = "cluster"


class ClusterJoin(Event, frozen=True, array_like=True):
    """Joiner -> acceptor: who I am, my credentials, how far bindings should reach me."""

    TYPE: ClassVar[int] = 0x40
    corr: int
    cluster: str
    node_id: str
    unique_id: str
    connector: str
    user: str
    password: str
    max_hops: int = 1
    http: str | None = None
    grouping: str | None = None  # LOCAL or REMOTE when the node has a grouping handler


class ClusterMember(msgspec.Struct, frozen=True, array_like=True):
    node_id: str
    connector: str
    http: str | None = None
    backup: str | None = None
    grouping: str | None = None


class ClusterMembers(Event, frozen=True, array_like=True):
    """Acceptor -> joiner: every member the acceptor knows (itself included)."""

    TYPE: ClassVar[int] = 0x41
    members: list[ClusterMember] = []


class BindingInfo(msgspec.Struct, frozen=True, array_like=True):
    """One binding as its advertiser routes to it: `key` is what a FORWARD names."""

    key: str
    name: str
    address: str
    routing_type: int
    filter: str | None
    consumer_count: int
    consumer_filters: list[str | None]
    distance: int  # 0: a queue of the advertiser; n: n hops beyond it
    origin: str  # node id of the node holding the queue


class Bindings(Event, frozen=True, array_like=True):
    """Acceptor -> joiner: `reset` replaces everything known from this acceptor."""

    TYPE: ClassVar[int] = 0x42
    reset: bool
    upserts: list[BindingInfo] = []
    removed: list[str] = []


class Forward(Send, frozen=True, array_like=True, gc=False):
    """Joiner -> acceptor: a message for the bindings `keys` (SEND's fields, then the keys and the
    bridge duplicate ID)."""

    TYPE: ClassVar[int] = 0x43
    keys: list[str] = []
    dup: str | None = None


class GroupPropose(Event, frozen=True, array_like=True):
    """A REMOTE grouping handler asks the LOCAL one who owns `group` (proposing `key`)."""

    TYPE: ClassVar[int] = 0x44
    corr: int
    group: str
    address: str
    key: str


class GroupDecision(Event, frozen=True, array_like=True):
    """The LOCAL handler's answer (`corr` 0: an unsolicited change, e.g. a removed group)."""

    TYPE: ClassVar[int] = 0x45
    corr: int
    group: str
    address: str
    key: str | None


class MigrationBegin(Event, frozen=True, array_like=True):
    """A node scaling down (or a drainer on its data directory) -> a live target: I am ``node_id``
    and will move my messages to you (FORWARD frames, each with its origin's duplicate ID)."""

    TYPE: ClassVar[int] = 0x46
    corr: int
    node_id: str
    user: str
    password: str


class MigrateQueue(Event, frozen=True, array_like=True):
    """Create (when missing) the queue migrated messages go to, as it was on the origin."""

    TYPE: ClassVar[int] = 0x47
    corr: int
    name: str
    address: str
    routing_type: int
    durable: bool
    filter: str | None = None
    client_id: str | None = None
    subscription: str | None = None
    attributes: dict = {}


class MigrateDuplicateIds(Event, frozen=True, array_like=True):
    """Duplicate IDs the origin remembers for ``cache`` (an address, or a bridge's cache), oldest
    first: the target remembers them too, so a client's resend after the move is still dropped."""

    TYPE: ClassVar[int] = 0x48
    corr: int
    cache: str
    ids: list[str] = []


class MigrationDone(Event, frozen=True, array_like=True):
    """The origin moved everything: what the target holds for it in its store-and-forward queue
    (copies on their way to the origin's queues, which are here now) goes to those queues."""

    TYPE: ClassVar[int] = 0x49
    corr: int


class Migrated(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One message of a MIGRATE_BATCH (SEND's fields, its delivery count there, and its origin's
    duplicate ID)."""

    address: str
    durable: bool
    priority: int
    expiration: int
    timestamp: int
    scheduled: int
    properties: dict[str, Any]
    body: bytes
    delivery_count: int
    dup: str


class MigrateBatch(Event, frozen=True, array_like=True, gc=False):
    """The origin -> the target: messages of one queue, in the order that queue would deliver
    them, for the bindings ``keys`` (with the queue's routing type). Each counts as one send on
    the session: SEND_CONFIRM counts them, SEND_FAILED names the one refused (and every later
    one is refused too, until MIGRATE_QUEUE starts the queue again). Large messages go as FORWARD."""

    TYPE: ClassVar[int] = 0x4A
    session: int
    routing_type: int
    keys: list[str]
    messages: list[Migrated]


register(ClusterJoin, client=True, server=False)
register(MigrationDone, client=True, server=False)
register(MigrateDuplicateIds, client=True, server=False)
register(MigrationBegin, client=True, server=False)
register(MigrateQueue, client=True, server=False)
register(Forward, client=True, server=False)
register(MigrateBatch, client=True, server=False)
register(ClusterMembers, client=False, server=True)
register(Bindings, client=False, server=True)
register(GroupPropose, client=True, server=False)
register(GroupDecision, client=False, server=True)
