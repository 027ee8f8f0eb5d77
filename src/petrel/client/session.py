"""Sessions and producers of the asyncio client.

Sends are windowed: `send` returns as soon as the message is written, unless the bytes
not yet confirmed by the broker reach the confirmation window (then it waits) or
``wait=True`` asks to wait for this message's confirmation. The broker confirms durable
messages once they are on disk. Until then each message is kept, so after a failover it
is sent again; durable ones carry a duplicate id (automatic on failover URLs) so the
broker drops a repeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from petrel.client.consumer import AsyncBrowser, AsyncConsumer
from petrel.client.errors import ClientError, ConnectionClosed, SendFailed, TransactionRolledBack
from petrel.client.message import DUPLICATE_ID, Message, parse_destination
from petrel.codec.core import CloseSession, Commit, CreateSession, Event, Rollback, Send, SendChunk, encode_frame
from petrel.codec.errors import ProtocolError

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection

__all__ = ["AsyncSession", "AsyncProducer"]

log = logging.getLogger("petrel.client.session")

#: A producer that never has to wait still yields to the loop this often (sends).
YIELD_EVERY = 64

# Unconfirmed entry: [number on the server session, frames, size, future or None, resend, message]
_NUMBER, _FRAMES, _SIZE, _FUTURE, _RESEND, _MESSAGE = range(6)


class AsyncSession:
    """Produces and consumes; a transacted one groups its work until `commit` / `rollback`."""

    def __init__(self, conn: AsyncConnection, sid: int, transacted: bool) -> None:
        self._conn = conn
        self.id = sid
        self.transacted = transacted
        self._consumers: dict[int, AsyncConsumer] = {}
        self._consumer_ids = 0
        self._created = False
        self._closed = False
        self._failure: ClientError | None = None
        self._unconfirmed: deque[list] = deque()
        self._unconfirmed_bytes = 0
        self._numbered = 0  # messages sent on the current server session
        self._window = max(conn.confirmation_window, 1)
        self._room: asyncio.Future | None = None
        self._drained: asyncio.Future | None = None
        self._failures: list[tuple[Message | None, str]] = []
        self._tx_work = False
        self._rollback_only: str | None = None
        #: Called in the loop thread with the bytes just confirmed (the sync API's window).
        self._on_room: list = []
        self._destinations: dict[str, tuple[str, int]] = {}
        #: Messages sent again after failovers (they were not confirmed when the connection went).
        self.resent = 0

    # -- creation and restore -----------------------------------------------------------------

    def _create_event(self, corr: int) -> Event:
        return CreateSession(corr, self.id, self.transacted)

    def _recreated(self, error: BaseException | None, value: Any) -> None:
        if error is not None:
            log.warning("session %d could not be re-created after failover: %s", self.id, error)
            self._terminate(error)

    def _interrupted(self) -> None:
        if self.transacted and self._tx_work:
            self._rollback_only = "the connection failed over during the transaction"
        for consumer in list(self._consumers.values()):
            consumer._interrupted()

    def _resend(self) -> None:
        """After a failover: number and send again every message still unconfirmed."""
        t = self._conn._transport
        kept: deque[list] = deque()
        self._numbered = 0
        for entry in self._unconfirmed:
            self.resent += entry[_RESEND]
            if not entry[_RESEND]:
                # a transactional send: gone with the transaction, which must not commit now
                # (a send made while no connection was up found the transaction without work
                # when the connection went, so `_interrupted` did not mark it)
                self._unconfirmed_bytes -= entry[_SIZE]
                _resolve(entry, TransactionRolledBack("the transaction was lost in a failover"))
                if self._rollback_only is None:
                    self._rollback_only = "sends of the transaction were lost in a failover"
                continue
            self._numbered += 1
            entry[_NUMBER] = self._numbered
            kept.append(entry)
            for frame in entry[_FRAMES]:
                t.send(frame)
        self._unconfirmed = kept
        self._wake()

    def _terminate(self, exc: BaseException) -> None:
        self._failure = exc if isinstance(exc, ClientError) else ClientError(str(exc))
        for entry in self._unconfirmed:
            _resolve(entry, self._failure)
        self._wake()
        # none of them will be confirmed now: wake a flush() waiting for them, which raises
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)
        for consumer in list(self._consumers.values()):
            consumer._terminate(self._failure)

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ConnectionClosed(f"session {self.id} is closed")

    # -- sending --------------------------------------------------------------------------------

    def producer(self, destination: str | None = None) -> AsyncProducer:
        """A producer for ``queue://X``, ``topic://X`` or an address (None: name it per send)."""
        self._check()
        return AsyncProducer(self, destination)

    def _frames(self, destination: str, message: Message) -> tuple[tuple[Event, ...], int]:
        parsed = self._destinations.get(destination)
        if parsed is None:
            parsed = self._destinations[destination] = parse_destination(destination)
        address, rt = parsed
        props = message.properties
        conn = self._conn
        if message.durable and conn.auto_duplicate_id and not self.transacted and DUPLICATE_ID not in props:
            props = {**props, DUPLICATE_ID: conn._next_dup_id()}
        body = message.body
        size = len(body)
        limit = conn.large_message_size
        timestamp = message.timestamp or int(time.time() * 1000)
        if size <= limit:
            return (Send(self.id, address, rt, message.durable, message.priority, message.expiration,
                         timestamp, message.scheduled, props, body, False),), size
        view = memoryview(body)
        frames: list[Event] = [Send(self.id, address, rt, message.durable, message.priority, message.expiration,
                                    timestamp, message.scheduled, props, view[:limit], True)]
        for start in range(limit, size, limit):
            end = start + limit
            frames.append(SendChunk(self.id, view[start:end], end < size))
        return tuple(frames), size

    def _send_nowait(self, destination: str, message: Message, future: asyncio.Future | None = None) -> None:
        """Write one message now (whatever the window); it is kept until confirmed."""
        frames, size = self._frames(destination, message)
        t = self._conn._transport
        try:
            if t is not None and not t.closed:
                data = [t.codec.send(frame) for frame in frames]
            else:
                t = None
                for frame in frames:  # not connected: check it can be sent at all
                    encode_frame(frame)
        except ProtocolError as exc:
            raise ValueError(f"cannot send this message: {exc.message}") from None
        self._numbered += 1
        self._unconfirmed.append([self._numbered, frames, size, future, not self.transacted, message])
        self._unconfirmed_bytes += size
        if self.transacted:
            self._tx_work = True
        if t is not None:
            for chunk in data:
                t.write(chunk)

    async def _send(self, destination: str, message: Message, wait: bool) -> None:
        self._check()
        if self._unconfirmed_bytes >= self._window:
            await self._wait_room()
        if not wait:
            self._send_nowait(destination, message)
            return
        future = self._conn._loop.create_future()
        self._send_nowait(destination, message, future)
        await future

    async def _wait_room(self) -> None:
        while self._unconfirmed_bytes >= self._window:
            self._check()
            if self._room is None or self._room.done():
                self._room = self._conn._loop.create_future()
            await self._room

    def _wake(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)
        if not self._unconfirmed:
            drained, self._drained = self._drained, None
            if drained is not None and not drained.done():
                drained.set_result(None)

    def _on_confirm(self, count: int) -> None:
        q = self._unconfirmed
        released = 0
        while q and q[0][_NUMBER] <= count:
            entry = q.popleft()
            released += entry[_SIZE]
            if entry[_FUTURE] is not None:
                _resolve(entry, None)
        self._unconfirmed_bytes -= released
        if self._room is not None or (not q and self._drained is not None):
            self._wake()
        for hook in self._on_room:
            hook(released)

    def _on_send_failed(self, number: int, code: int, text: str) -> None:
        for entry in self._unconfirmed:
            if entry[_NUMBER] == number:
                error = SendFailed(f"the broker refused a message: {text}", [(entry[_MESSAGE], text)], code)
                if entry[_FUTURE] is not None:
                    _resolve(entry, error)
                else:
                    self._failures.append((entry[_MESSAGE], text))
                if self.transacted:
                    self._rollback_only = f"a send in the transaction failed: {text}"
                return

    async def flush(self) -> None:
        """Wait until every message sent so far is confirmed; raise `SendFailed` for refusals."""
        await self._flush_quiet()
        if self._failures:
            failures, self._failures = self._failures, []
            raise SendFailed(f"the broker refused {len(failures)} message(s): {failures[0][1]}", failures)

    async def _flush_quiet(self) -> None:
        while self._unconfirmed:
            self._check()
            if self._drained is None or self._drained.done():
                self._drained = self._conn._loop.create_future()
            await self._drained

    @property
    def unconfirmed(self) -> int:
        """Messages sent and not yet confirmed by the broker."""
        return len(self._unconfirmed)

    # -- consuming -----------------------------------------------------------------------------

    async def consumer(
        self,
        destination: str,
        *,
        filter: str | None = None,
        subscription: str | None = None,
        window: int | None = None,
        ack: str = "auto",
        _sink=None,
    ) -> AsyncConsumer:
        """Consume ``queue://X`` (an anycast queue), ``topic://X`` (a subscription, durable when
        named), or an existing queue by name (``X`` or ``address::X``).

        ``window``: consumer window in bytes (-1 unlimited, 0 one message at a time).
        ``ack``: ``auto`` (acknowledged once handed to the application), ``client``
        (call ``message.ack()``) or ``pre`` (settled by the broker as it sends: at most once).
        """
        self._check()
        if ack not in ("auto", "client", "pre"):
            raise ValueError(f"ack must be auto, client or pre, not {ack!r}")
        self._consumer_ids += 1
        consumer = AsyncConsumer(
            self, self._consumer_ids, destination, filter=filter, subscription=subscription,
            window=self._conn.consumer_window if window is None else window, ack=ack,
        )
        consumer._sink = _sink
        self._consumers[consumer.id] = consumer
        try:
            info = await self._conn._request(consumer._create_event, retry=True)
        except BaseException:
            self._consumers.pop(consumer.id, None)
            raise
        consumer._created = True
        consumer.queue = info.get("queue", "") if info else ""
        return consumer

    def browser(self, queue: str, *, filter: str | None = None, batch: int = 100) -> AsyncBrowser:
        """Iterate over the messages waiting in a queue without consuming them."""
        self._check()
        return AsyncBrowser(self._conn, queue, filter, batch)

    def _flush_acks(self) -> None:
        for consumer in self._consumers.values():
            consumer._flush_acks()

    # -- transactions --------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit the session's sends and acks; `TransactionRolledBack` if the broker (or a
        failover) rolled them back instead."""
        self._check()
        if not self.transacted:
            raise ClientError("commit needs a transacted session")
        self._flush_acks()
        if self._rollback_only is not None:
            reason = self._rollback_only
            await self._end_transaction(Rollback, "rollback", self._returner(None))
            raise TransactionRolledBack(f"transaction rolled back: {reason}")
        lost: list[str] = []

        def commit_or_rollback(corr: int, sid: int) -> Event:
            # Decided as the request goes out: waiting for a connection, a failover may have
            # taken the transaction's sends (`_resend`), and a COMMIT would then commit an
            # empty transaction on the new connection, the sends lost unnoticed.
            if self._rollback_only is not None:
                lost.append(self._rollback_only)
                return Rollback(corr, sid)
            return Commit(corr, sid)

        def then() -> None:
            if lost:
                self._returner(None)()

        await self._end_transaction(commit_or_rollback, "commit", then)
        if lost:
            raise TransactionRolledBack(f"transaction rolled back: {lost[0]}")

    async def rollback(self, _taken_back: dict[int, list[Message]] | None = None) -> None:
        """Undo the session's sends and acks: its messages (and any prefetched ones) come again."""
        self._check()
        if not self.transacted:
            raise ClientError("rollback needs a transacted session")
        self._flush_acks()  # acks of this transaction reach it, so rolling back returns those messages
        await self._end_transaction(Rollback, "rollback", self._returner(_taken_back))

    def _returner(self, taken_back: dict[int, list[Message]] | None):
        """After ROLLBACK is queued: give prefetched messages back, behind the rolled-back ones."""

        def give_back() -> None:
            for consumer in self._consumers.values():
                consumer._return_buffered((taken_back or {}).get(consumer.id, ()))

        return give_back

    async def _end_transaction(self, kind, name: str, then=None) -> None:
        try:
            await self._conn._request(lambda corr: kind(corr, self.id), kind=name, then=then)
        finally:
            self._tx_work = False
            self._rollback_only = None
            # transactional sends are settled either way: drop them from the resend list
            kept = deque(e for e in self._unconfirmed if e[_RESEND])
            if len(kept) != len(self._unconfirmed):
                dropped = sum(e[_SIZE] for e in self._unconfirmed if not e[_RESEND])
                for e in self._unconfirmed:
                    if not e[_RESEND] and e[_FUTURE] is not None:
                        _resolve(e, None)
                self._unconfirmed_bytes -= dropped
                self._unconfirmed = kept
                self._wake()

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        if self._failure is None and self._conn.connected:
            try:
                await self._flush_quiet()
            except ClientError:
                pass
            self._flush_acks()
        if self._failure is None and self._conn.connected:
            # close consumers first, so their prefetched messages go back undelivered
            await asyncio.gather(*(c.close() for c in list(self._consumers.values())), return_exceptions=True)
        self._closed = True
        for consumer in list(self._consumers.values()):
            consumer._closed = True
            consumer._wake_waiter(None)
        try:
            if self._failure is None:
                await self._conn._request(lambda corr: CloseSession(corr, self.id))
        except ClientError:
            pass
        finally:
            self._conn._sessions.pop(self.id, None)
            self._consumers.clear()

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class AsyncProducer:
    """Sends to one destination (or to any, when created without one)."""

    def __init__(self, session: AsyncSession, destination: str | None) -> None:
        self.session = session
        self.destination = destination
        self._sends = 0

    async def send(
        self,
        message: Message | bytes | str,
        *,
        destination: str | None = None,
        wait: bool = False,
        **fields: Any,
    ) -> None:
        """Send a message (bytes and str become a `Message`; ``fields`` are Message arguments).

        Returns once written, or with ``wait=True`` once the broker confirmed it; raises
        `SendFailed` then if the broker refused it.
        """
        dest = destination or self.destination
        if dest is None:
            raise ValueError("this producer has no destination: pass destination=...")
        if not isinstance(message, Message):
            message = Message(message, **fields)
        elif fields:
            raise TypeError("pass message fields either in the Message or as arguments, not both")
        session = self.session
        if not wait and session._unconfirmed_bytes < session._window and session._failure is None \
                and not session._closed:
            session._send_nowait(dest, message)
            self._sends += 1
            if self._sends >= YIELD_EVERY:
                # let the loop read (confirmations, deliveries) between bursts
                self._sends = 0
                await asyncio.sleep(0)
            return
        await session._send(dest, message, wait)

    async def flush(self) -> None:
        """Wait for every message of the session to be confirmed (see `AsyncSession.flush`)."""
        await self.session.flush()


def _resolve(entry: list, error: BaseException | None) -> None:
    future = entry[_FUTURE]
    if future is None or future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
