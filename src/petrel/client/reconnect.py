"""Connecting and failing over: the connection side of `ReconnectPlan`.

A mixin of `AsyncConnection` (it uses the connection's URL, plan, sessions and pending
requests). `_open` connects to one broker and waits for its CONNECTED; `_reconnect` tries
the plan's candidates, round after round, until one answers or the attempts run out, then
`_install` makes it the live transport and `_restore` re-creates sessions and consumers,
repeats safe requests and re-sends unconfirmed messages. With ``priorityBackup``,
`_priority_backup` keeps trying the preferred broker and switches back to it. When the live
transport is lost, `_on_lost` fails what cannot be repeated (`_interrupted`) and reconnects,
or, without failover, fails everything (`_terminate`). Requests wait for a live transport in
`_wait_ready`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from petrel import __version__
from petrel.client.errors import (
    ClientError,
    ConnectionFailed,
    FailoverInterrupted,
    TransactionRolledBack,
)
from petrel.client.tls import client_context, handshake_error, handshake_lost
from petrel.client.transport import Transport
from petrel.client.url import Endpoint
from petrel.codec.core import (
    CAPABILITIES,
    DEFAULT_LARGE_MESSAGE_SIZE,
    PROTOCOL_VERSIONS,
    Connect,
    Connected,
    Disconnect,
    DisconnectCode,
    ErrorCode,
)

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection

__all__ = ["Reconnecting"]

log = logging.getLogger("petrel.client")


class Reconnecting:
    """Open a broker, reconnect and restore after a loss, fail back to the priority broker."""

    # -- connecting -------------------------------------------------------------------------------

    async def _open(self: AsyncConnection, endpoint: Endpoint) -> tuple[Transport, Connected]:
        loop = self._loop
        proto = Transport(self._on_event, self._on_lost, endpoint)
        handshake = loop.create_future()
        self._handshakes[proto] = handshake
        try:
            tls = self._tls_context() if endpoint.tls else None
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda: proto, endpoint.host, endpoint.port, ssl=tls,
                                           ssl_handshake_timeout=self.connect_timeout if tls else None),
                    self.connect_timeout)
            except ssl.SSLError as exc:
                raise handshake_error(exc, endpoint) from None
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

    def _tls_context(self: AsyncConnection) -> ssl.SSLContext:
        """The URL's TLS context (`petrel.client.tls`), built once."""
        if self._tls is None:
            self._tls = client_context(self.url.options)
        return self._tls

    async def _reconnect(self: AsyncConnection, *, startup: bool = False) -> None:
        plan = self.plan
        allowed = plan.max_attempts(startup)
        if not startup and not plan.reconnects and plan.redirect is not None:
            allowed = 1  # a plain URL still follows one redirect
        delays = plan.delays()
        rounds = 0
        last: BaseException | None = None
        tried: set[Endpoint] = set()
        backup = None if startup else plan.backup_of(self.endpoint)
        if backup is not None and await self._try_backup(backup, tried):
            return
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
                    if getattr(exc, "code", None) == ErrorCode.UNAUTHORIZED:  # trying again changes nothing
                        if not self._closing:
                            self._terminate(ConnectionFailed(
                                f"{endpoint} {exc}: give the right user and password (user= and password= "
                                "options, or the URL's user and password)", ErrorCode.UNAUTHORIZED))
                        return
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

    async def _try_backup(self: AsyncConnection, backup: Endpoint, tried: set[Endpoint]) -> bool:
        """The lost broker's backup first, for up to ``backupWait`` ms (it may be taking over)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.plan.options.backup_wait / 1000
        delay = 0.01
        tried.add(backup)
        while not self._closing and loop.time() < deadline:
            try:
                proto, connected = await self._open(backup)
            except (OSError, asyncio.TimeoutError, ClientError) as exc:
                log.debug("backup %s not serving yet: %s", backup, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            if self._closing:
                proto.close()
                return True
            self._install(proto, connected, startup=False)
            return True
        return False

    def _install(self: AsyncConnection, proto: Transport, connected: Connected, *, startup: bool) -> None:
        self._transport = proto
        self.endpoint = proto.endpoint
        self.node_id = connected.node_id
        self.server = connected.server
        self._server_ttl = connected.ttl
        self.large_message_size = connected.large_message_size or DEFAULT_LARGE_MESSAGE_SIZE
        self._epoch += 1
        proto.epoch = self._epoch
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

    def _restore(self: AsyncConnection) -> None:
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

    async def _priority_backup(self: AsyncConnection) -> None:
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

    def _on_lost(self: AsyncConnection, proto: Transport, exc: BaseException | None) -> None:
        handshake = self._handshakes.get(proto)
        if handshake is not None:
            if not handshake.done():
                handshake.set_exception(handshake_lost(exc, proto.endpoint))
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

    def _interrupted(self: AsyncConnection) -> None:
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

    def _terminate(self: AsyncConnection, exc: ClientError) -> None:
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

    async def _wait_ready(self: AsyncConnection) -> Transport:
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

