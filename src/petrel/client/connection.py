"""The asyncio CORE client connection, with failover.

`AsyncConnection` owns at most one live `Transport` at a time. When it is lost (the
socket closes, the broker falls silent past the failure-check period, or the broker sends
DISCONNECT), a failover URL reconnects following its `ReconnectPlan`: a redirect first,
then the URL's brokers, then brokers learnt from topology updates. On the new connection
it re-creates every session and consumer, re-sends requests that are safe to repeat and
every message not yet confirmed (durable ones carry a duplicate id, so the broker drops a
repeat), and lets waiting calls continue. A commit in flight fails with
`TransactionRolledBack`; other requests in flight fail with `FailoverInterrupted`.

This module holds the connection's state, its lifecycle, pings, the dispatch of incoming
frames and requests; `reconnect` the connecting, losing and failing over (a mixin), and
`failover` the plan it follows.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from petrel.client.errors import ClientError, ConnectionClosed, ConnectionFailed, error_for
from petrel.client.admin import AdminRequests
from petrel.client.cursors import CursorRequests
from petrel.client.failover import ReconnectPlan
from petrel.client.reconnect import Reconnecting
from petrel.client.session import AsyncSession
from petrel.client.tls import client_context
from petrel.client.transport import Transport
from petrel.client.url import ClientURL, Endpoint, option, parse_url
from petrel.codec.errors import ProtocolError
from petrel.codec.core import (
    DEFAULT_LARGE_MESSAGE_SIZE,
    BrowseResult,
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
from petrel.codec.core.cursors import RangeResult

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



class AsyncConnection(Reconnecting, AdminRequests, CursorRequests):
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
        # TLS (ssl:// endpoints): a file it cannot use is a ValueError here, not at the first connect
        self._tls = client_context(self.url.options) if any(e.tls for e in self.url.endpoints) else None
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
            RangeResult: self._on_result,
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

    def _on_result(self, e: Result | BrowseResult | RangeResult) -> None:
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
            p.future.set_result(e.value if isinstance(e, Result) else e)

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
        self.plan.learn_backups([(m.live, m.backup) for m in e.members if m.live and m.backup and not m.leaving])

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

    def _live(self, epoch: int) -> Transport | None:
        """The live transport if it is the connection of generation ``epoch``, else None.

        Settlements (acks, nacks, credit, messages given back) name deliveries by their
        number on one connection, so they may go on that connection only: once it is lost,
        the same numbers name other deliveries on the next one."""
        t = self._transport
        return t if t is not None and not t.closed and t.epoch == epoch else None

    async def _request(
        self, make: Callable[[int], Event], *, retry: bool = False, kind: str = "",
        then: Callable[[], None] | None = None, epoch: int | None = None,
    ) -> Any:
        """Send a request and wait for its RESULT; ``then`` runs right after it is queued.

        With ``epoch`` (it settles deliveries of that connection generation) the request is
        sent only on that connection: if another one is live once there is one, nothing is
        sent and the result is None."""
        t = await self._wait_ready()
        if epoch is not None and t.epoch != epoch:
            return None
        corr = next(self._corrs)
        event = make(corr)
        future = self._loop.create_future()
        self._pending[corr] = _Pending(future, event, retry, kind)
        t.send(event)
        if then is not None:
            then()
        return await future

    def _internal(self, callback: Callable[[BaseException | None, Any], None]) -> int:
        corr = next(self._corrs)
        self._pending[corr] = _Pending(None, Event(), False, "internal", callback)
        return corr

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

