"""Limits on what clients may hold: connections, unfinished handshakes and frames, silence.

`LimitSettings` defines top-level settings that `BrokerConfig` declares; `ConnectionLimits` (``broker.limits``)
applies them to every accepted socket, whatever its protocol:

- ``max_connections`` per acceptor (Artemis's ``connectionsAllowed``), and never more client
  connections in all than the open-files limit (``RLIMIT_NOFILE``) less a reserve, so that the
  journal, ``/health`` and the management API still get file descriptors: a socket over either is
  closed at once (one log line per acceptor every `LOG_EVERY` seconds says how many);
- ``handshake_timeout``: a socket that has not finished its handshake (STOMP CONNECT, CORE
  CONNECT) within it is closed, however many bytes it trickles in (slowloris);
- ``max_partial_frames_size``: the bytes all connections' unfinished frames hold together; the
  connection whose unfinished frame would take them over it gets a protocol error and is closed.
  Before its handshake, a connection's unfinished frame may hold `HANDSHAKE_MAX_BYTES`;
- ``max_connections_per_user``: counted once a connection's login is done;
- ``max_pending_writes_size``: a client that does not read what it is sent is closed.

`watch_silence` closes a connection that sends nothing for a time (``connection_ttl`` for a STOMP
session without heart-beats). The caps on auto-created queues and addresses are applied by the
post office (`petrel.core.quotas`), ``metrics_max_queues`` by `/metrics` through `capped`.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import resource
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from petrel.config import BrokerConfig
    from petrel.server.connection import Connection

__all__ = ["HANDSHAKE_MAX_BYTES", "ConnectionLimits", "LimitSettings", "capped", "handshaken", "open_files_budget",
           "refuse", "watch_silence"]

log = logging.getLogger("petrel.server.limits")

MIB = 1024 * 1024
#: Bytes a connection's unfinished frame may hold before its handshake is done.
HANDSHAKE_MAX_BYTES = 64 * 1024
#: Seconds between two log lines about the same limit (the lines count what happened meanwhile).
LOG_EVERY = 10.0


class LimitSettings(BaseModel):
    """The limits' settings: top-level keys of broker.toml, declared by `BrokerConfig` with these fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_connections: int = Field(
        10000, ge=-1, description="client connections each acceptor takes at once; one more is closed at once "
        "(-1 = no limit of its own; the open-files limit less a reserve always applies)")
    max_connections_per_user: int = Field(
        -1, ge=-1, description="connections one user may hold at once, all acceptors together (Artemis's "
        "resource-limit max-connections); one more is closed with a protocol error (-1 = no limit; "
        "anonymous and cluster connections are not counted)")
    max_queues_per_user: int = Field(
        -1, ge=-1, description="queues one user's connections may have made the broker create and still hold "
        "(Artemis's resource-limit max-queues; auto-created, temporary and durable subscriptions included); "
        "one more is refused with a protocol error (-1 = no limit; anonymous and cluster ones are not counted)")
    handshake_timeout: int = Field(
        10000, ge=0, description="ms a new connection has to finish its handshake (STOMP CONNECT, CORE CONNECT) "
        "before it is closed, however slowly it sends (0 = no limit)")
    max_partial_frames_size: int = Field(
        256 * MIB, ge=-1, description="bytes all connections' unfinished frames may hold together; the "
        "connection that would go over gets a protocol error and is closed (-1 = no limit)")
    max_pending_writes_size: int = Field(
        128 * MIB, ge=-1, description="bytes waiting to be written to one client that does not read them; "
        "over it the connection is closed as a slow client (-1 = no limit; cluster and replication links "
        "are exempt)")
    max_auto_created_queues: int = Field(
        10000, ge=-1, description="auto-created and temporary queues the broker holds at most; a send or "
        "subscribe that would create one more is refused (-1 = no limit)")
    max_auto_created_addresses: int = Field(
        10000, ge=-1, description="auto-created addresses the broker holds at most (-1 = no limit)")
    metrics_max_queues: int = Field(
        5000, ge=-1, description="queues (and addresses) /metrics gives series of, durable ones first, then by "
        "name; petrel_queue_series_omitted counts the rest (-1 = all)")


def open_files_budget() -> int:
    """Client connections the process can hold: the soft open-files limit less a reserve (a tenth,
    at least 64) for the journal, paging, large-message files, the management API and cluster links."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 1 << 30
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1 << 30
    return max(soft - max(64, soft // 10), 16)


def capped(things: list, limit: int) -> list:
    """At most `limit` queues or addresses (-1: all): durable before temporary, then by name."""
    if limit < 0 or len(things) <= limit:
        return things
    return heapq.nsmallest(limit, things, key=lambda t: (bool(getattr(t, "temporary", False)), t.name))


def handshaken(adapter: Any) -> bool:
    """Whether the protocol's handshake is done: STOMP's CONNECT answered, CORE's CONNECT accepted."""
    if adapter is None:
        return False
    connected = getattr(adapter, "connected", None)  # STOMP
    if connected is not None:
        return bool(connected)
    return getattr(getattr(adapter, "codec", None), "version", None) is not None  # CORE


def refuse(conn: Connection, message: str) -> None:
    """Close `conn` with a protocol error saying `message` (STOMP ERROR, CORE ERROR) when its
    protocol is known, plainly otherwise."""
    if conn.closed:
        return
    adapter = conn.adapter
    stomp_error = getattr(adapter, "error", None)
    if callable(stomp_error):  # StompAdapter.error: ERROR frame, then close
        stomp_error(message)
        return
    codec = getattr(adapter, "codec", None)
    if codec is not None:
        from petrel.codec.core import Error, ErrorCode

        adapter._closing = True  # (CoreAdapter: handle nothing more)
        try:
            conn.write(codec.send(Error(int(ErrorCode.PROTOCOL), message[:1000])))
        except Exception:  # an ERROR is not allowed in this state: just close
            pass
    conn.close()


class _RateLog:
    """One log line per key every `LOG_EVERY` seconds, with the count of what it stands for."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def __call__(self, key: str, text: str, *args: object, event: str) -> None:
        self._count[key] = self._count.get(key, 0) + 1
        now = time.monotonic()
        if now - self._last.get(key, -LOG_EVERY) < LOG_EVERY:
            return
        count = self._count.pop(key)
        self._last[key] = now
        log.warning(text + " (%d in the last %.0fs)", *args, count, LOG_EVERY, extra={"event": event})


class ConnectionLimits:
    """The broker's count of connections, handshakes and unfinished frames (``broker.limits``)."""

    def __init__(self, config: LimitSettings | BrokerConfig) -> None:
        self.max_connections = config.max_connections
        self.max_per_user = config.max_connections_per_user
        self.handshake_timeout = config.handshake_timeout / 1000
        self.max_partial = config.max_partial_frames_size
        self.max_pending = config.max_pending_writes_size
        self.files_budget = open_files_budget()
        self.per_acceptor: dict[int, int] = {}  # local port -> open connections
        self.total = 0
        self.partial = 0  # bytes of unfinished frames, all connections
        self.refused = 0  # connections closed by a limit (all kinds)
        self._acceptor: dict[Connection, int] = {}
        self._since: dict[Connection, float] = {}  # connections still in their handshake
        self._held: dict[Connection, int] = {}  # unfinished frame bytes per connection
        self._user: dict[Connection, str] = {}  # logged-in connections' users (max_connections_per_user)
        self.per_user: dict[str, int] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._log = _RateLog()

    # -- connections ------------------------------------------------------------------------

    def admit(self, conn: Connection) -> bool:
        """Count a new connection, or close it at once if its acceptor (or the process) is full."""
        transport = conn.transport
        sock = transport.get_extra_info("sockname") if transport is not None else None
        port = sock[1] if isinstance(sock, tuple) and len(sock) > 1 else 0
        count = self.per_acceptor.get(port, 0)
        if (0 <= self.max_connections <= count) or self.total >= self.files_budget:
            self.refused += 1
            which = (f"max_connections {self.max_connections}" if 0 <= self.max_connections <= count
                     else f"{self.files_budget} connections, the open-files limit less a reserve")
            self._log(f"full:{port}", "acceptor on port %d is full (%s): closing new connections at once",
                      port, which, event="limits.connections")
            conn.closed = True
            if transport is not None:
                transport.abort()
            return False
        self.per_acceptor[port] = count + 1
        self.total += 1
        self._acceptor[conn] = port
        self._since[conn] = time.monotonic()
        if self._sweep is None:
            self._schedule_sweep()
        return True

    def release(self, conn: Connection) -> None:
        """Forget a closed connection (called more than once: fine)."""
        port = self._acceptor.pop(conn, None)
        if port is None:
            return
        self.per_acceptor[port] -= 1
        self.total -= 1
        self._since.pop(conn, None)
        self.partial -= self._held.pop(conn, 0)
        user = self._user.pop(conn, None)
        if user is not None:
            self.per_user[user] -= 1
            if not self.per_user[user]:
                del self.per_user[user]

    # -- handshakes ---------------------------------------------------------------------------

    def _schedule_sweep(self) -> None:
        period = min(1.0, max(self.handshake_timeout / 4, 0.05)) if self.handshake_timeout > 0 else 1.0
        self._sweep = asyncio.get_running_loop().call_later(period, self._sweep_handshakes)

    def _sweep_handshakes(self) -> None:
        """Close the connections whose handshake is overdue; forget those that finished theirs."""
        self._sweep = None
        now = time.monotonic()
        for conn, since in list(self._since.items()):
            if conn.closed:
                self._since.pop(conn, None)
            elif handshaken(conn.adapter):
                self._handshake_done(conn)
            elif 0 < self.handshake_timeout < now - since:
                self._since.pop(conn, None)
                self.refused += 1
                self._log("handshake", "closing connections that did not finish their handshake within "
                          "handshake_timeout (%d ms), e.g. %s", int(self.handshake_timeout * 1000), conn.peer,
                          event="limits.handshake")
                refuse(conn, f"no handshake within handshake_timeout ({int(self.handshake_timeout * 1000)} ms)")
        if self._since:
            self._schedule_sweep()

    def _handshake_done(self, conn: Connection) -> None:
        """The connection logged in: count it for its user (close it if that is one too many)."""
        self._since.pop(conn, None)
        subject = getattr(getattr(conn.adapter, "access", None), "subject", None)
        user = getattr(subject, "user", None)
        if self.max_per_user < 0 or user is None:
            return
        if getattr(getattr(conn.adapter, "access", None), "internal", False):
            return  # the cluster's own links
        count = self.per_user.get(user, 0)
        if count >= self.max_per_user:
            self.refused += 1
            self._log(f"user:{user}", "closing connections of user %s over max_connections_per_user (%d)", user,
                      self.max_per_user, event="limits.user_connections")
            refuse(conn, f"user {user!r} already holds {count} connections, its max_connections_per_user")
            return
        self.per_user[user] = count + 1
        self._user[conn] = user

    # -- unfinished frames --------------------------------------------------------------------

    def account(self, conn: Connection) -> None:
        """After a read: count what the connection's unfinished frame holds, and close it with a
        protocol error if that takes it (or all connections) over a limit."""
        if conn in self._since and handshaken(conn.adapter):
            self._handshake_done(conn)
        codec = getattr(conn.adapter, "codec", None)
        held = codec.buffered_bytes if codec is not None else 0
        old = self._held.get(conn, 0)
        if held == old or conn not in self._acceptor:
            return
        self.partial += held - old
        if held:
            self._held[conn] = held
        else:
            del self._held[conn]
        if held <= old:
            return
        if conn in self._since and held > HANDSHAKE_MAX_BYTES and not handshaken(conn.adapter):
            problem = f"{held} bytes of a frame before the handshake is done (at most {HANDSHAKE_MAX_BYTES})"
        elif 0 <= self.max_partial < self.partial:
            problem = (f"unfinished frames of all connections would hold {self.partial} bytes, over "
                       f"max_partial_frames_size ({self.max_partial}); this connection's holds {held}")
        else:
            return
        self.refused += 1
        self._log("partial", "closing connections whose unfinished frame is over a limit, e.g. %s: %s",
                  conn.peer, problem, event="limits.frames")
        refuse(conn, f"refused: {problem}")
        self.partial -= self._held.pop(conn, 0)  # the buffer goes with the connection


    # -- pending writes -------------------------------------------------------------------------

    def check_writes(self, conn: Connection) -> None:
        """After a write while the client reads slower than the broker writes: close a client (not
        a cluster or replication link) whose unread bytes are over ``max_pending_writes_size``."""
        transport = conn.transport
        if self.max_pending < 0 or transport is None or conn.closed:
            return
        pending = transport.get_write_buffer_size()
        if pending <= self.max_pending:
            return
        adapter = conn.adapter
        if any(getattr(adapter, name, None) is not None for name in ("cluster_peer", "replicator", "migration_source")):
            return
        self.refused += 1
        self._log("writes", "closing slow clients that do not read what they are sent, e.g. %s: %d bytes "
                  "unread, over max_pending_writes_size (%d)", conn.peer, pending, self.max_pending,
                  event="limits.writes")
        conn.close(after_flush=False)


def watch_silence(conn: Connection, ttl_ms: int, last_read: Callable[[], float], paused: Callable[[], bool],
                  why: str) -> None:
    """Close `conn` with a protocol error once nothing arrived from it for `ttl_ms` (`last_read`:
    the monotonic time of its last read; while `paused()` the broker is not reading, so silence
    does not count). ``ttl_ms`` <= 0: never."""
    if ttl_ms <= 0:
        return
    ttl = ttl_ms / 1000

    def check() -> None:
        if conn.closed:
            return
        silent = time.monotonic() - last_read()
        if paused() or silent < ttl:
            conn.call_later(ttl - silent if silent < ttl else ttl, check)
            return
        log.info("closing %s: nothing received for %.1fs (%s)", conn.peer, silent, why,
                 extra={"event": "limits.ttl"})
        refuse(conn, f"nothing received for {silent:.1f}s ({why})")

    conn.call_later(ttl, check)
