"""CORE, Petrel's own protocol, on the post office.

Frames from one read are handled in order. Replies that must wait for the disk (the
confirmations of persistent sends, commits, queue and address changes, acks that asked
for a reply) are gathered per read and released by one `store.sync` per read, and every
read's replies go out in read order, so a confirmation count only grows and a later
reply never overtakes an earlier one still waiting for its sync: the server session's
confirmations (`petrel.server.session`), which also does the sends, acks, local
transactions, holds and flow control; refusals (`petrel.server.refusals`) map to CORE's
error codes here (`RESULT_CODES`, `SEND_CODES`).

Consumers get Artemis-style credit: the client grants window bytes, each delivered
message costs `credit_of(body size)`, and the client hands credit back as its
application takes messages. Large messages arrive in SEND + SEND_CHUNK frames and leave in
DELIVER + DELIVER_CHUNK frames, their bodies streamed through files (`large.py`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from petrel.codec.core import (
    Ack,
    Browse,
    CloseConsumer,
    CloseSession,
    Commit,
    Connect,
    Connected,
    CoreConnection,
    CreateAddress,
    CreateConsumer,
    CreateQueue,
    CreateSession,
    Credit,
    DeleteAddress,
    DeleteQueue,
    Disconnect,
    DisconnectCode,
    Error,
    ErrorCode,
    Member,
    Nack,
    Ping,
    Pong,
    Query,
    Result,
    Role,
    Rollback,
    Send,
    SendChunk,
    SendConfirm,
    Topology,
)
from petrel.codec.errors import RemoteProtocolError
from petrel.core.postoffice import RoutingError
from petrel.core.selector import SelectorError
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
from petrel.security.errors import NotAuthorized
from petrel.server.access import Access
from petrel.server.adapters.core import guard
from petrel.server.adapters.core.admin import AdminFrames
from petrel.server.adapters.core.cluster import ClusterFrames
from petrel.server.adapters.core import large
from petrel.server.adapters.core.consuming import ConsumerFrames
from petrel.server.adapters.core.cursors import CursorFrames
from petrel.server.adapters.core.migration import MigrationFrames
from petrel.server.adapters.core.replication import ReplicationFrames
from petrel.server.adapters.core.sending import SendFrames
from petrel.codec.core.replication import ReplicaAck, ReplicaFailback, ReplicaRegister, ReplicaVote
from petrel.server.adapters.core.session import RESULT_CODES, CoreConsumer, Fatal, RequestFailed, ServerSession
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession as ConnectionSession

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

__all__ = ["CoreAdapter"]

log = logging.getLogger("petrel.server.core")


class CoreAdapter(SendFrames, ConsumerFrames, AdminFrames, ClusterFrames, ReplicationFrames, MigrationFrames,
                  CursorFrames):
    protocol = "core"

    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        self.codec = CoreConnection(Role.SERVER, max_frame_size=broker.config.max_frame_size)
        self.client_id: str | None = None
        self.connection_id = ""
        self.sessions: dict[int, ServerSession] = {}
        self.by_consumer: dict[int, CoreConsumer] = {}  # core consumer id -> consumer (management)
        self.temporary_queues: set[str] = set()
        self.ttl = broker.config.connection_ttl
        self._closing = False
        self._dirty: list[ServerSession] = []  # sessions with sends to confirm after this read
        self._last_read = time.monotonic()
        self._timer = None
        self.large_ok = False  # the client takes large bodies in chunks
        # a body larger than this is a large message (kept in its own file)
        self._large_over = broker.config.min_large_message_size
        self.chunk_size = max(min(self._large_over, broker.config.max_frame_size - 4096), 1024)
        self._stash: list = []  # events decoded but not handled while held
        self._next_id = broker.store.next_id
        self.access = Access(broker.security)  # who logged in (CONNECT's user and password), what it may do
        self._login_task = None
        # replies after the disk and in order, sends, acks, transactions, holds (petrel.server.session)
        self.server_session = ConnectionSession(broker, conn, self.access, run=self._run,
                                                on_sync_failed=self._sync_failed)
        self._confirmations = self.server_session.confirmations
        self._handlers: dict[type, Callable[[Any], None]] = {
            Send: self.on_send,
            SendChunk: self.on_send_chunk,
            Ack: self.on_ack,
            Credit: self.on_credit,
            Nack: self.on_nack,
            Ping: self.on_ping,
            Pong: _ignore,
            Connect: self.on_connect,
            Disconnect: self.on_disconnect,
            Error: self.on_error,
            CreateSession: self.on_create_session,
            CloseSession: self.on_close_session,
            CreateConsumer: self.on_create_consumer,
            CloseConsumer: self.on_close_consumer,
            Commit: self.on_commit,
            Rollback: self.on_rollback,
            CreateAddress: self.on_create_address,
            DeleteAddress: self.on_delete_address,
            CreateQueue: self.on_create_queue,
            DeleteQueue: self.on_delete_queue,
            Query: self.on_query,
            Browse: self.on_browse,
            ClusterJoin: self.on_cluster_join,
            Forward: self.on_forward,
            GroupPropose: self.on_group_propose,
            ReplicaRegister: self.on_replica_register,
            ReplicaAck: self.on_replica_ack,
            ReplicaFailback: self.on_replica_failback,
            ReplicaVote: self.on_replica_vote,
            MigrationBegin: self.on_migration_begin,
            MigrateQueue: self.on_migrate_queue,
            MigrateBatch: self.on_migrate_batch,
            MigrateDuplicateIds: self.on_migrate_duplicate_ids,
            MigrationDone: self.on_migration_done,
            **self.cursor_handlers(),  # sequence ranges and named cursors (cursors.py)
        }
        guard.protect(self, self._handlers)  # cluster frames: the cluster's own; cursors: browse/consume

    @property
    def subject(self):
        return self.access.subject

    @property
    def _out(self) -> list:
        """The replies of the read being handled (bytes, or callables run in their turn)."""
        return self._confirmations.out

    @property
    def _sync(self) -> bool:
        return self._confirmations.sync

    @_sync.setter
    def _sync(self, value: bool) -> None:
        if value:  # this read's replies wait for the disk
            self._confirmations.need_sync()

    @property
    def _held(self) -> bool:
        return self.server_session.held

    # -- input ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_read = time.monotonic()
        self._run(self.codec.receive_data, data)

    def _run(self, fn: Callable, *args) -> None:
        """Call `fn`, then handle the events buffered in the codec, in order, unless held."""
        codec = self.codec
        handlers = self._handlers
        session = self.server_session
        office, creator = self.office, self.office.creator
        office.creator = self.access.user  # the queues created meanwhile are the user's (max_queues_per_user)
        try:
            fn(*args)
            while not self._closing and not session.held:
                if self._stash:
                    events, self._stash = self._stash, []
                else:
                    events = codec.next_events()
                    if not events:
                        break
                for event in events:
                    try:
                        handlers[type(event)](event)
                    except RequestFailed as exc:
                        self.reply(Result(getattr(event, "corr", 0), exc.code, str(exc)))
                    except Refused as exc:
                        self.reply(Result(getattr(event, "corr", 0), RESULT_CODES.get(exc.kind, ErrorCode.INVALID),
                                          str(exc)))
                    except NotAuthorized as exc:
                        self.reply(Result(getattr(event, "corr", 0), ErrorCode.UNAUTHORIZED, str(exc)))
                    except (RoutingError, SelectorError) as exc:
                        self.reply(Result(getattr(event, "corr", 0), ErrorCode.INVALID, str(exc)))
                    if self._closing:
                        break
                    if session.held:  # the rest waits for resume_held
                        at = next(i for i, other in enumerate(events) if other is event)
                        self._stash = events[at + 1 :]
                        break
        except RemoteProtocolError as exc:
            self.fatal(ErrorCode.PROTOCOL, exc.message)
        except Fatal as exc:
            self.fatal(exc.code, str(exc))
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling a CORE frame from %s", self.conn.peer)
            self.fatal(ErrorCode.INTERNAL, f"internal error: {exc}")
        finally:
            office.creator = creator
            self._finish_read()

    # -- replies in order, after the disk ------------------------------------------------------

    def reply(self, event, *, sync: bool = False, transactional: bool = False) -> None:
        self._confirmations.add(self.codec.send(event), sync, transactional)

    def _finish_read(self) -> None:
        if self.forward_tx:
            self.commit_forwarded()
        for session in self._dirty:
            if session.sent != session.confirmed and not session.blocked and not self._closing:
                session.confirmed = session.sent  # (after an ERROR nothing is confirmed)
                self._confirmations.add(self.codec.send(SendConfirm(session.id, session.sent)))
        self._dirty.clear()
        self._confirmations.flush()

    def _sync_failed(self, error: NotDurable) -> None:
        """The store could not make a batch durable: an ERROR naming the cause instead of its
        replies and confirmations (none of them, nor any later one, goes out), then close."""
        self._closing = True
        message = f"{error}; requests since the last confirmation are not confirmed"
        log.info("CORE error for %s: %s", self.conn.peer, message)
        try:
            data = self.codec.send(Error(int(ErrorCode.INTERNAL), message[:1000]))
        except Exception:
            data = b""
        self.conn.write(data)
        self.conn.close()

    def fatal(self, code: ErrorCode, message: str) -> None:
        log.info("CORE error for %s: %s", self.conn.peer, message)
        self._closing = True
        try:
            data = self.codec.send(Error(int(code), message[:1000]))
        except Exception:
            data = b""
        self._out.append(data)
        self._out.append(self.conn.close)

    def disconnect(self, reason: str, redirect: str | None = None, code: DisconnectCode | None = None) -> None:
        """Tell the client to go (to ``redirect``, a ``host:port`` or URL, if given), then close."""
        if self._closing or self.conn.closed:
            return
        if code is None:
            code = DisconnectCode.REDIRECT if redirect else DisconnectCode.SHUTDOWN
        self._closing = True
        items: list = []
        try:
            items.append(self.codec.send(Disconnect(int(code), reason, redirect)))
        except Exception:
            pass
        items.append(self.conn.close)
        self._confirmations.after_pending(items)

    def send_topology(self, members: list[Member], event_id: int | None = None) -> None:
        """Push a topology update (the cluster calls this as nodes come and go)."""
        if "topology" not in self.codec.capabilities or self.conn.closed or self._closing:
            return
        event = Topology(event_id if event_id is not None else time.time_ns() // 1000, members, True)
        self._confirmations.after_pending([self.codec.send(event)])

    # -- connection --------------------------------------------------------------------------

    def on_connect(self, e: Connect) -> None:
        if self.access.enabled and self.access.subject is None:
            guard.log_in(self, e)  # handles this frame again once logged in
            return
        version = self.codec.accept(e)
        if version is None:
            offered = list(self.codec.offered_versions)
            raise Fatal(ErrorCode.UNSUPPORTED, f"no common CORE version: the broker speaks {offered}")
        self.client_id = e.client_id or None
        self.connection_id = e.connection_id or uuid.uuid4().hex
        if e.ttl != 0:
            self.ttl = e.ttl
        config = self.broker.config
        self.large_ok = "large-messages" in self.codec.capabilities
        self._out.append(
            self.codec.send(
                Connected(
                    version,
                    sorted(self.codec.capabilities),
                    f"Petrel/{self.broker.version}",
                    self.broker.node_id,
                    self.connection_id,
                    self.ttl,
                    config.max_frame_size,
                    self.chunk_size,
                )
            )
        )
        if "topology" in self.codec.capabilities:
            cluster = self.broker.cluster
            members = cluster.client_members() if cluster is not None else [
                Member(self.broker.node_id, self.live_connector(), None)]
            self._out.append(self.codec.send(Topology(time.time_ns() // 1000, members, True)))
        if self.ttl > 0:
            self._schedule_ping()

    def live_connector(self) -> str:
        """``host:port`` at which clients reach this broker's all-protocols acceptor."""
        transport = self.conn.transport
        sock = transport.get_extra_info("sockname") if transport is not None else None
        host = self.broker.config.host
        if host in ("0.0.0.0", "::", "") and sock:
            host = sock[0]
        port = self.broker.ports.get("all") or (sock[1] if sock else 0)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def on_ping(self, e: Ping) -> None:
        self._out.append(self.codec.send(Pong(e.nonce)))

    def on_disconnect(self, e: Disconnect) -> None:
        self._closing = True
        self._sync = True  # whatever this client did before leaving is on disk first
        self._out.append(self.conn.close)

    def on_error(self, e: Error) -> None:
        log.info("CORE client %s reported an error: %s", self.conn.peer, e.message)
        self._closing = True
        self._out.append(self.conn.close)

    def _schedule_ping(self) -> None:
        self._timer = self.conn.call_later(max(self.ttl / 3000, 0.05), self._tick)

    def _tick(self) -> None:
        if self.conn.closed or self._closing:
            return
        silent = time.monotonic() - self._last_read
        if silent * 1000 > self.ttl and not self._held:  # held: we stopped reading, not the client
            log.info("closing %s: nothing received for %.1fs (connection TTL %d ms)",
                     self.conn.peer, silent, self.ttl)
            self._closing = True
            self.conn.close(after_flush=False)
            return
        self.conn.write(self.codec.send(Ping(0)))
        self._schedule_ping()

    # -- sessions ------------------------------------------------------------------------------

    def _session(self, session_id: int) -> ServerSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise Fatal(ErrorCode.PROTOCOL, f"no session {session_id} on this connection")
        return session

    def on_create_session(self, e: CreateSession) -> None:
        if e.session in self.sessions:
            raise RequestFailed(ErrorCode.ALREADY_EXISTS, f"session {e.session} already exists")
        session = self.sessions[e.session] = ServerSession(e.session, e.transacted)
        if session.tx is not None:  # the connection's server session owns it (rolled back with it)
            session.tx = self.server_session.begin(session.tx.name)
        self.reply(Result(e.corr))

    def on_close_session(self, e: CloseSession) -> None:
        session = self.sessions.pop(e.session, None)
        if session is not None:
            self._close_session(session)
        self.reply(Result(e.corr), sync=True)

    def _close_session(self, session: ServerSession) -> None:
        for consumer in list(session.consumers.values()):
            self._remove_consumer(consumer)
        if session.tx is not None:
            if self.server_session.transactions.get(session.tx.name) is session.tx:
                self.server_session.rollback(session.tx.name)
            else:
                self.office.rollback(session.tx)
        large.abort(session)

    def hold(self) -> None:
        """Handle nothing more (and read nothing) until `resume_held`."""
        self.server_session.hold()

    def resume_held(self, fn: Callable[[], None]) -> None:
        """Run `fn` first, then the frames that waited behind it."""
        if self.conn.closed or self._closing:
            self.server_session.release_hold()
            return
        self._last_read = time.monotonic()
        self.server_session.resume_held(fn)

    # -- lifecycle ----------------------------------------------------------------------------

    def pause(self) -> None:
        self.server_session.pause()

    def resume(self) -> None:
        self.server_session.resume()

    def connection_lost(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        for session in list(self.sessions.values()):
            self._close_session(session)
        self.sessions.clear()
        self.by_consumer.clear()
        self.server_session.release()
        for name in list(self.temporary_queues):
            queue = self.office.queues.get(name)
            if queue is not None and queue.temporary:
                try:
                    self.office.delete_queue(name)
                except RoutingError:
                    pass
        self.temporary_queues.clear()
        if self.cluster_peer is not None and self.broker.cluster is not None:
            self.broker.cluster.peer_left(self)
        self.replica_connection_lost()


def _ignore(event: object) -> None:
    return None
