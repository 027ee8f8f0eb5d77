"""Who may send which CORE frames (a part of `CoreAdapter`).

The CONNECT frame's user and password (or, over mutual TLS without a user, the client
certificate) are checked off the event loop (`log_in`); until then the
connection handles nothing more. With security enabled, `protect` puts a gate in front of the
frames that are not a client's: the cluster's (bridges, replication, votes) and a scale-down's
migration need the cluster user and password (the `INTERNAL` subject), and the cursor frames
need ``browse`` (reading) or ``consume`` (moving a cursor) on the queue's address. The other
frames check their permissions where they act (sends, consumers, queues, addresses, browsing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from petrel.codec.core import Connect, ErrorCode
from petrel.codec.core.cluster import (
    ClusterJoin,
    Forward,
    GroupPropose,
    MigrateBatch,
    MigrateDuplicateIds,
    MigrateQueue,
    MigrationBegin,
    MigrationDone,
)
from petrel.codec.core.cursors import BodyRead, BrowseRange, CursorAck, CursorCreate, CursorDelete, CursorQuery, QueueSeqs
from petrel.codec.core.replication import ReplicaAck, ReplicaFailback, ReplicaRegister, ReplicaVote
from petrel.security.errors import AuthenticationFailed
from petrel.server import tls
from petrel.server.adapters.core.session import Fatal

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["INTERNAL_FRAMES", "log_in", "protect"]

log = logging.getLogger("petrel.server.core")

#: Frames only the cluster's own subject may send.
INTERNAL_FRAMES = (ClusterJoin, Forward, GroupPropose, ReplicaRegister, ReplicaAck, ReplicaFailback, ReplicaVote,
                   MigrationBegin, MigrateQueue, MigrateBatch, MigrateDuplicateIds, MigrationDone)
#: Cursor frames and the permission each needs on the queue's address.
CURSOR_FRAMES = {QueueSeqs: "browse", BrowseRange: "browse", BodyRead: "browse", CursorQuery: "browse",
                 CursorAck: "consume", CursorCreate: "consume", CursorDelete: "consume"}


def protect(adapter: CoreAdapter, handlers: dict[type, Callable[[Any], None]]) -> None:
    """Gate ``handlers`` in place (nothing when security is off: no cost per frame)."""
    if not adapter.access.enabled:
        return
    for kind in INTERNAL_FRAMES:
        handlers[kind] = _internal_only(adapter, kind, handlers[kind])
    for kind, permission in CURSOR_FRAMES.items():
        handlers[kind] = _on_queue(adapter, permission, handlers[kind])


def _internal_only(adapter: CoreAdapter, kind: type, handler: Callable[[Any], None]) -> Callable[[Any], None]:
    name = kind.__name__

    def gate(event: Any) -> None:
        if not adapter.access.internal:
            raise Fatal(ErrorCode.UNAUTHORIZED, f"{name} is a frame of the cluster's own links: only a connection "
                                                "logged in with the cluster user and password may send it")
        handler(event)

    return gate


def _on_queue(adapter: CoreAdapter, permission: str, handler: Callable[[Any], None]) -> Callable[[Any], None]:
    def gate(event: Any) -> None:
        queue = adapter.office.queues.get(event.queue)
        if queue is not None:  # (else the handler says it does not exist)
            adapter.access.check(permission, queue.address)
        handler(event)

    return gate


def log_in(adapter: CoreAdapter, e: Connect) -> None:
    """Check the CONNECT's credentials, then handle it again (or refuse it and close)."""
    adapter.hold()
    # (mutual TLS: a client certificate in [security] certificate_users logs in without a user)
    login = tls.login(adapter.broker.security, adapter.conn, e.user, e.password)
    task = asyncio.get_running_loop().create_task(login)
    adapter._login_task = task  # a reference until it is done

    def done(task: asyncio.Task) -> None:
        adapter._login_task = None
        if adapter.conn.closed or adapter._closing or task.cancelled():
            return
        try:
            subject = task.result()
        except Exception as exc:
            adapter.server_session.release_hold()
            if isinstance(exc, AuthenticationFailed):
                adapter.fatal(ErrorCode.UNAUTHORIZED, str(exc))
            else:  # never the broker's end
                log.exception("login failed for %s", adapter.conn.peer)
                adapter.fatal(ErrorCode.INTERNAL, f"internal error while logging in: {exc}")
            adapter._finish_read()
            return
        adapter.access.login(subject)
        adapter.resume_held(lambda: adapter.on_connect(e))

    task.add_done_callback(done)
