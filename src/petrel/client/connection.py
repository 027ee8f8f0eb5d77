"""The asyncio CORE client connection, with failover.

`AsyncConnection` owns at most one live `Transport` at a time. When it is lost (the
socket closes, the broker falls silent past the failure-check period, or the broker sends
DISCONNECT), a failover URL reconnects following its `ReconnectPlan`: a redirect first,
then the URL's brokers, then brokers learnt from topology updates. On the new connection
it re-creates every session and consumer, re-sends requests that are safe to repeat and
every message not yet confirmed (durable ones carry a duplicate id, so the broker drops a
repeat), and lets waiting calls continue. A commit in flight fails with
`TransactionRolledBack`; other requests in flight fail with `FailoverInterrupted`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from petrel import __version__
from petrel.client.errors import (
    ClientError,
    ConnectionClosed,
    ConnectionFailed,
    FailoverInterrupted,
    TransactionRolledBack,
    error_for,
)
from petrel.client.admin import AdminRequests
from petrel.client.failover import ReconnectPlan
from petrel.client.session import AsyncSession
from petrel.client.transport import Transport
from petrel.client.url import ClientURL, Endpoint, option, parse_url
from petrel.codec.errors import ProtocolError
from petrel.codec.core import (
    CAPABILITIES,
    DEFAULT_LARGE_MESSAGE_SIZE,
    PROTOCOL_VERSIONS,
    BrowseResult,
    Connect,
    Connected,
    Deliver,
    DeliverChunk,
    Disconnect,
    DisconnectCode,
    Error,
    Event,
    Member,
    Ping,
    Pong,
    Result,
    SendConfirm,
    SendFailed,
    Topology,
)

__all__ = ["AsyncConnection", "connect"]

log = logging.getLogger("petrel.client")


class _Pending:
    __slots__ = ("future", "event", "retry", "kind", "callback")

    def __init__(self, future, event: Event, retry: bool, kind: str = "", callback=None) -> None:
        self.future = future
        self.event = event
        self.retry = retry
        self.kind = kind
        self.callback = callback



class AsyncConnection(AdminRequests):
    """A CORE connection to a broker (or, with a failover URL, to whichever broker is up).

    Use :func:`connect` (or ``async with AsyncConnection(url) as conn``). Options given as
    arguments win over the same options in the URL.
    """

    def __init__(
        self,
        url: str | ClientURL,
        *,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        connection_ttl: int | None = None,
        failure_check_period: int | None = None,
        confirmation_window: int | None = None,
        consumer_window: int | None = None,
        auto_duplicate_id: bool | None = None,
        connect_timeout: float = 10.0,
        seed: int | None = None,
    ) -> None:
        self.url = parse_url(url) if isinstance(url, str) else url
        o = self.url.options
        self.user = user if user is not None else option(o, "user", "username")
        self.password = password if password is not None else option(o, "password")
        self.client_id = client_id if client_id is not None else option(o, "clientID", "clientId")
        self.connection_ttl = connection_ttl if connection_ttl is not None else int(
            option(o, "connectionTTL") or 60000)
        check = failure_check_period if failure_check_period is not None else option(o, "clientFailureCheckPeriod")
        self.failure_check_period = int(check) if check is not None else None
        self.confirmation_window = confirmation_window if confirmation_window is not None else int(
            option(o, "confirmationWindowSize") or 1024 * 1024)
        self.consumer_window = consumer_window if consumer_window is not None else int(
            option(o, "consumerWindowSize") or 1024 * 1024)
        auto = auto_duplicate_id if auto_duplicate_id is not None else option(o, "autoDuplicateId")
        if isinstance(auto, str):
            auto = auto.lower() in ("true", "1", "yes")
        #: Durable messages get an automatic duplicate id (default: on for failover URLs).
        self.auto_duplicate_id = self.url.is_failover if auto is None else bool(auto)
        self.connect_timeout = connect_timeout
        self.connection_id = uuid.uuid4().hex
        self.plan = ReconnectPlan(self.url, None if seed is None else __import__("random").Random(seed))
        # state
        self.node_id = ""
        self.server = ""
        self.endpoint: Endpoint | None = None
        self.topology: list[Member] = []
        self.large_message_size = DEFAULT_LARGE_MESSAGE_SIZE
        self.failovers = 0
        self._broker_error: str | None = None  # the last ERROR frame's message: why we were cut off
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: Transport | None = None
        self._handshakes: dict[Transport, asyncio.Future] = {}
        self._ready: asyncio.Event | None = None
        self._sessions: dict[int, AsyncSession] = {}
        self._session_ids = itertools.count(1)
        self._corrs = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._epoch = 0
        self._server_ttl = 0
        self._topology_event = -1
        self._failure: ClientError | None = None
        self._closing = False
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        self._ping_timer: asyncio.TimerHandle | None = None
        self._priority_task: asyncio.Task | None = None
        self._dup_prefix = uuid.uuid4().hex + ":"
        self._dup_ids = itertools.count(1)
        #: Called (no arguments) when the connection is lost / when it is back after a failover.
        self.on_interrupted: list[Callable[[], None]] = []
        self.on_resumed: list[Callable[[], None]] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            Deliver: self._on_deliver,
            DeliverChunk: self._on_chunk,
            SendConfirm: self._on_confirm,
            Result: self._on_result,
            BrowseResult: self._on_result,
            SendFailed: self._on_send_failed,
            Ping: self._on_ping,
            Pong: _ignore,
            Topology: self._on_topology,
            Disconnect: self._on_disconnect,
            Error: self._on_error,
        }

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> AsyncConnection:
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        await self._reconnect(startup=True)
        if self._failure is not None:
            raise self._failure
        return self

    async def __aenter__(self) -> AsyncConnection:
        if self._loop is None:
            await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.closed

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout``) for sends to be confirmed, then disconnect."""
        if self._closed:
            return
        if self.connected:
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(s._flush_quiet() for s in list(self._sessions.values()))), timeout)
            except (asyncio.TimeoutError, ClientError):
                pass
            for s in list(self._sessions.values()):
                s._flush_acks()
        self._closing = True
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._stop_pinger()
        t = self._transport
        self._transport = None
        if t is not None and not t.closed:
            try:
                t.send(Disconnect(int(DisconnectCode.NORMAL), "client closed"))
            except ProtocolError:
                pass
            t.close()
        for t in list(self._handshakes):
            t.abort()
        self._terminate(ConnectionClosed("the connection is closed"))

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- connecting -------------------------------------------------------------------------------

    async def _open(self, endpoint: Endpoint) -> tuple[Transport, Connected]:
        loop = self._loop
        proto = Transport(self._on_event, self._on_lost, endpoint)
        handshake = loop.create_future()
        self._handshakes[proto] = handshake
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: proto, endpoint.host, endpoint.port), self.connect_timeout)
            proto.send(Connect(
                list(PROTOCOL_VERSIONS), list(CAPABILITIES), self.user, self.password, self.client_id,
                self.connection_ttl, self.connection_id, f"petrel-python/{__version__}",
            ))
            connected = await asyncio.wait_for(handshake, self.connect_timeout)
        except BaseException:
            proto.abort()
            raise
        finally:
            self._handshakes.pop(proto, None)
        return proto, connected

    async def _reconnect(self, *, startup: bool = False) -> None:
        plan = self.plan
        allowed = plan.max_attempts(startup)
        if not startup and not plan.reconnects and plan.redirect is not None:
            allowed = 1  # a plain URL still follows one redirect
        delays = plan.delays()
        rounds = 0
        last: BaseException | None = None
        tried: set[Endpoint] = set()
        while not self._closing:
            if allowed >= 0 and rounds >= allowed:
                break
            if rounds:
                await asyncio.sleep(next(delays))
                if self._closing:
                    return
            rounds += 1
            candidates = plan.candidates()
            if not plan.reconnects and plan.redirect is not None and not startup:
                candidates = [plan.redirect]
            for endpoint in candidates:
                tried.add(endpoint)
                try:
                    proto, connected = await self._open(endpoint)
                except (OSError, asyncio.TimeoutError, ClientError) as exc:
                    last = exc
                    log.debug("cannot connect to %s: %s", endpoint, exc)
                    continue
                if self._closing:
                    proto.close()
                    return
                self._install(proto, connected, startup=startup)
                return
        if not self._closing:
            names = ", ".join(sorted(str(e) for e in tried)) or "no broker"
            reason = f": {last}" if last else ""
            self._terminate(ConnectionFailed(f"could not connect to {names} after {rounds} attempt(s){reason}"))

    def _install(self, proto: Transport, connected: Connected, *, startup: bool) -> None:
        self._transport = proto
        self.endpoint = proto.endpoint
        self.node_id = connected.node_id
        self.server = connected.server
        self._server_ttl = connected.ttl
        self.large_message_size = connected.large_message_size or DEFAULT_LARGE_MESSAGE_SIZE
        self._epoch += 1
        self.plan.redirect = None
        if not startup:
            self.failovers += 1
            log.info("reconnected to %s (node %s)", proto.endpoint, connected.node_id,
                     extra={"event": "client.failover"})
        self._restore()
        self._start_pinger()
        self._ready.set()
        if self._priority_task is not None:
            self._priority_task.cancel()
            self._priority_task = None
        if (self.plan.options.priority_backup and self.plan.reconnects
                and not self.plan.is_priority(proto.endpoint)):
            self._priority_task = self._spawn(self._priority_backup())
        if not startup:
            for callback in list(self.on_resumed):
                callback()

    def _restore(self) -> None:
        """Re-create sessions and consumers, repeat safe requests, re-send unconfirmed messages."""
        t = self._transport
        sessions = list(self._sessions.values())
        for s in sessions:
            if s._created:
                t.send(s._create_event(self._internal(s._recreated)))
        for s in sessions:
            for c in list(s._consumers.values()):
                if c._created:
                    t.send(c._create_event(self._internal(c._recreated)))
        for corr in sorted(self._pending):
            p = self._pending[corr]
            if p.retry and p.future is not None:
                t.send(p.event)
        for s in sessions:
            s._resend()

    def _internal(self, callback: Callable[[BaseException | None, Any], None]) -> int:
        corr = next(self._corrs)
        self._pending[corr] = _Pending(None, Event(), False, "internal", callback)
        return corr

    async def _priority_backup(self) -> None:
        """priorityBackup: keep trying the preferred broker; switch to it when it answers."""
        delays = self.plan.delays()
        while not self._closing and self._transport is not None:
            await asyncio.sleep(max(next(delays), 0.05))
            current = self._transport
            if current is None or self.plan.is_priority(current.endpoint):
                return
            for endpoint in self.plan.priority():
                try:
                    proto, connected = await self._open(endpoint)
                except (OSError, asyncio.TimeoutError, ClientError):
                    continue
                if self._closing or self._transport is not current:
                    proto.close()
                    return
                log.info("switching back to priority broker %s", endpoint, extra={"event": "client.failback"})
                self._transport = None
                self._interrupted()
                current.send(Disconnect(int(DisconnectCode.NORMAL), "switching to the priority broker"))
                current.close()
                self._install(proto, connected, startup=False)
                return

    # -- losing the connection ---------------------------------------------------------------------

    def _on_lost(self, proto: Transport, exc: BaseException | None) -> None:
        handshake = self._handshakes.get(proto)
        if handshake is not None:
            if not handshake.done():
                handshake.set_exception(
                    ConnectionFailed(f"connection to {proto.endpoint} lost during the handshake"))
            return
        if proto is not self._transport:
            return
        self._transport = None
        if self._closing:
            return
        log.info("connection to %s lost%s", proto.endpoint, f": {exc}" if exc else "",
                 extra={"event": "client.connection_lost"})
        self._interrupted()
        if self.plan.reconnects or self.plan.redirect is not None:
            self._spawn(self._reconnect())
        else:
            why, self._broker_error = self._broker_error, None
            self._terminate(ConnectionFailed(f"connection to {proto.endpoint} lost"
                                             + (f": the broker reported: {why}" if why else "")))

    def _interrupted(self) -> None:
        self._ready.clear()
        self._stop_pinger()
        for s in list(self._sessions.values()):
            s._interrupted()
        for corr, p in list(self._pending.items()):
            if p.retry:
                continue
            del self._pending[corr]
            if p.callback is not None:
                continue
            if p.future.done():
                continue
            if p.kind == "commit":
                p.future.set_exception(TransactionRolledBack(
                    "the connection failed during commit: the transaction is rolled back unless the broker "
                    "finished it first; send again (duplicate ids make repeats safe)"))
            elif p.kind == "rollback":
                p.future.set_result(None)  # a lost connection rolls back anyway
            else:
                p.future.set_exception(FailoverInterrupted(
                    f"{type(p.event).__name__} was interrupted by a connection failure; its outcome is unknown"))
        for callback in list(self.on_interrupted):
            callback()

    def _terminate(self, exc: ClientError) -> None:
        """No more connection: fail everything waiting."""
        if self._failure is None:
            self._failure = exc
        self._stop_pinger()
        for p in list(self._pending.values()):
            if p.future is not None and not p.future.done():
                p.future.set_exception(self._failure)
        self._pending.clear()
        for s in list(self._sessions.values()):
            s._terminate(self._failure)
        if self._ready is not None:
            self._ready.set()  # wake waiters; they see the failure

    async def _wait_ready(self) -> Transport:
        while True:
            if self._failure is not None:
                raise self._failure
            t = self._transport
            if t is not None and not t.closed:
                return t
            if self._ready.is_set():
                # the socket is closing but its loss is not handled yet: let the loop get to it
                await asyncio.sleep(0.005)
                continue
            timeout = self.plan.options.timeout
            try:
                if timeout >= 0:
                    await asyncio.wait_for(self._ready.wait(), timeout / 1000)
                else:
                    await self._ready.wait()
            except asyncio.TimeoutError:
                raise ConnectionFailed(f"no connection within the failover timeout of {timeout} ms") from None

    # -- pings and TTL ---------------------------------------------------------------------------

    def _start_pinger(self) -> None:
        self._stop_pinger()
        ttl = self._server_ttl
        if ttl > 0:
            self._ping_timer = self._loop.call_later(ttl / 3000, self._ping)

    def _stop_pinger(self) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None

    def _ping(self) -> None:
        t = self._transport
        if t is None or t.closed:
            return
        check = self.failure_check_period if self.failure_check_period is not None else self._server_ttl
        silent = time.monotonic() - t.last_read
        if check > 0 and silent * 1000 > check:
            log.warning("no data from %s for %.1fs: connection considered lost", t.endpoint, silent,
                        extra={"event": "client.ttl_expired"})
            t.abort()
            return
        t.send(Ping(0))
        self._ping_timer = self._loop.call_later(self._server_ttl / 3000, self._ping)

    # -- events ---------------------------------------------------------------------------------

    def _on_event(self, proto: Transport, event: Event) -> None:
        if proto is self._transport:
            self._handlers[type(event)](event)
            return
        handshake = self._handshakes.get(proto)
        if handshake is None:
            return
        if isinstance(event, Connected):
            if not handshake.done():
                handshake.set_result(event)
        elif isinstance(event, Topology):
            self._on_topology(event)
        elif isinstance(event, Disconnect):
            self.plan.set_redirect(event.redirect)
            if not handshake.done():
                handshake.set_exception(ConnectionFailed(f"{proto.endpoint} refused us: {event.reason}"))
        elif isinstance(event, Error):
            if not handshake.done():
                handshake.set_exception(error_for(event.code, f"{proto.endpoint} refused us: {event.message}"))
        elif isinstance(event, Ping):
            proto.send(Pong(event.nonce))

    def _on_deliver(self, e: Deliver) -> None:
        s = self._sessions.get(e.session)
        c = s._consumers.get(e.consumer) if s is not None else None
        if c is not None:
            c._on_deliver(e)

    def _on_chunk(self, e: DeliverChunk) -> None:
        s = self._sessions.get(e.session)
        c = s._consumers.get(e.consumer) if s is not None else None
        if c is not None:
            c._on_chunk(e)

    def _on_confirm(self, e: SendConfirm) -> None:
        s = self._sessions.get(e.session)
        if s is not None:
            s._on_confirm(e.count)

    def _on_send_failed(self, e: SendFailed) -> None:
        s = self._sessions.get(e.session)
        if s is not None:
            s._on_send_failed(e.number, e.code, e.message)

    def _on_result(self, e: Result | BrowseResult) -> None:
        p = self._pending.pop(e.corr, None)
        if p is None:
            return
        code = getattr(e, "code", 0)
        if p.callback is not None:
            p.callback(error_for(code, e.message) if code else None, getattr(e, "value", e))
            return
        if p.future.done():
            return
        if code:
            p.future.set_exception(error_for(code, e.message))
        else:
            p.future.set_result(e if isinstance(e, BrowseResult) else e.value)

    def _on_ping(self, e: Ping) -> None:
        self._transport.send(Pong(e.nonce))

    def _on_topology(self, e: Topology) -> None:
        if e.event_id < self._topology_event:
            return
        self._topology_event = e.event_id
        self.topology = list(e.members)
        connectors = []
        for m in e.members:
            if not m.leaving:
                connectors.extend(c for c in (m.live, m.backup) if c)
        self.plan.learn(connectors)

    def _on_disconnect(self, e: Disconnect) -> None:
        log.info("broker %s disconnected us (%s)%s", self.endpoint, e.reason,
                 f", redirecting to {e.redirect}" if e.redirect else "", extra={"event": "client.disconnected"})
        self.plan.set_redirect(e.redirect)
        self._transport.close()

    def _on_error(self, e: Error) -> None:
        log.warning("broker %s reported a fatal error: %s", self.endpoint, e.message)
        self._broker_error = e.message
        self._transport.abort()

    # -- requests -------------------------------------------------------------------------------

    async def _request(
        self, make: Callable[[int], Event], *, retry: bool = False, kind: str = "",
        then: Callable[[], None] | None = None,
    ) -> Any:
        """Send a request and wait for its RESULT; ``then`` runs right after it is queued."""
        t = await self._wait_ready()
        corr = next(self._corrs)
        event = make(corr)
        future = self._loop.create_future()
        self._pending[corr] = _Pending(future, event, retry, kind)
        t.send(event)
        if then is not None:
            then()
        return await future

    def _next_dup_id(self) -> str:
        return f"{self._dup_prefix}{next(self._dup_ids)}"

    # -- sessions --------------------------------------------------------------------------------

    async def session(self, *, transacted: bool = False) -> AsyncSession:
        """A new session; ``transacted`` sessions group sends and acks until commit/rollback."""
        if self._closed:
            raise ConnectionClosed("the connection is closed")
        sid = next(self._session_ids)
        session = AsyncSession(self, sid, transacted)
        self._sessions[sid] = session
        try:
            await self._request(session._create_event, retry=True)
        except BaseException:
            self._sessions.pop(sid, None)
            raise
        session._created = True
        return session

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "reconnecting")
        return f"<AsyncConnection {state} to {self.endpoint} node={self.node_id}>"


def _ignore(event: object) -> None:
    return None


async def connect(url: str, **options: Any) -> AsyncConnection:
    """Connect to ``url`` (``tcp://host:port`` or ``failover:(...)?...``); see AsyncConnection."""
    from petrel.client.balance import balanced  # useTopologyForLoadBalancing
    return await balanced(await AsyncConnection(url, **options).start(), url, options)

