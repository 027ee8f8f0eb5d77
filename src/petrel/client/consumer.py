"""Consumers and browsers of the asyncio client.

The broker pushes messages within the consumer window (bytes). Each message the
application takes (`receive` returns it, or a listener is called with it) gives its
credit back, in batches of half a window, written at once so the broker never waits on a
busy application loop. Acknowledgements are batched too: ``auto`` sends one cumulative
ack per batch, ``client`` sends the acks the application made, ``pre`` sends none.

A delivery is named by its number on the connection it came on, so everything that settles
deliveries (acks, nacks, messages given back, their credit) goes on that connection only
(`AsyncConnection._live`), checked when it is sent, after any wait. A settlement of a message
delivered on a connection since lost is dropped: the broker redelivers that message (at least
once); sent on the next connection, the same number would settle a delivery the application
never saw.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from petrel.client.errors import ClientError, ConnectionClosed
from petrel.client.message import Message, parse_destination
from petrel.codec.core import (
    Ack,
    CloseConsumer,
    CreateConsumer,
    Credit,
    Deliver,
    DeliverChunk,
    Event,
    Nack,
    credit_of,
)

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection
    from petrel.client.session import AsyncSession

__all__ = ["AsyncConsumer", "AsyncBrowser", "Acknowledger"]

log = logging.getLogger("petrel.client.consumer")

ACK_BATCH = 512


class Acknowledger(Protocol):
    def _ack(self, message: Message, cumulative: bool) -> None: ...
    def _nack(self, message: Message) -> None: ...


class AsyncConsumer:
    """Receives from one queue or subscription: `receive(timeout)` or a listener."""

    def __init__(
        self,
        session: AsyncSession,
        cid: int,
        destination: str,
        *,
        filter: str | None,
        subscription: str | None,
        window: int,
        ack: str,
    ) -> None:
        self.session = session
        self.id = cid
        self.destination = destination
        self.filter = filter
        self.subscription = subscription
        self.window = window
        self.ack_mode = ack
        self.queue = ""
        self._conn: AsyncConnection = session._conn
        self._created = False
        self._closed = False
        self._failure: ClientError | None = None
        self._buffer: deque[Message] = deque()
        self._waiter: asyncio.Future | None = None
        self._listener: Callable[[Message], Any] | None = None
        self._listener_task: asyncio.Task | None = None
        self._sink: Callable[[Message], None] | None = None  # the sync API takes messages here
        self._to_return = 0  # credit of taken messages not yet given back
        self._return_at = max(window // 2, 1) if window > 0 else 1
        self._credit = window  # our view of the broker's credit for us (window 0 mode)
        self._large: tuple[Deliver, list[bytes]] | None = None
        self._cumulative: Message | None = None  # auto: last taken message, to ack
        self._acks: list[int] = []  # client: individual acks to send
        self._acks_epoch = 0  # the connection generation of those acks
        self._ack_count = 0
        self._ack_scheduled = False

    # -- creation, failover ----------------------------------------------------------------------

    def _create_event(self, corr: int) -> Event:
        address, rt = parse_destination(self.destination)
        queue = ""
        if rt < 0:
            queue, address = address, ""
        return CreateConsumer(corr, self.session.id, self.id, address, rt, queue, self.filter, self.subscription,
                              self.window, self.ack_mode == "pre")

    def _recreated(self, error: BaseException | None, value: Any) -> None:
        if error is not None:
            log.warning("consumer of %s could not be re-created after failover: %s", self.destination, error)
            self._terminate(error)
        elif self._waiter is not None:
            self._want_one()  # window 0: a receive waiting through the failover asks the new broker

    def _interrupted(self) -> None:
        """Deliveries of the lost connection will be redelivered: forget them."""
        self._buffer.clear()
        self._large = None
        self._to_return = 0
        self._credit = self.window
        self._cumulative = None
        self._acks.clear()
        self._ack_count = 0

    def _terminate(self, exc: BaseException) -> None:
        self._failure = exc if isinstance(exc, ClientError) else ClientError(str(exc))
        self._wake_waiter(None)

    def _wake_waiter(self, message: Message | None) -> bool:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(message)
            return True
        return False

    # -- deliveries ---------------------------------------------------------------------------------

    def _on_deliver(self, e: Deliver) -> None:
        if self._closed:
            return
        if e.more:
            self._large = (e, [e.body])
            return
        self._arrived(Message._delivered(e, e.body, self, self._conn._epoch))

    def _on_chunk(self, e: DeliverChunk) -> None:
        if self._large is None:
            return
        first, parts = self._large
        parts.append(e.body)
        if not e.more:
            self._large = None
            self._arrived(Message._delivered(first, b"".join(parts), self, self._conn._epoch))

    def _arrived(self, message: Message) -> None:
        self._credit -= credit_of(message._size)
        if self._sink is not None:
            self._sink(message)
        elif self._listener is not None:
            if self._listener_task is None:
                self._call_listener(message)
            else:
                self._buffer.append(message)
                self._wake_waiter(None)
        elif self._waiter is None or not self._wake_waiter(message):
            self._buffer.append(message)

    def _taken(self, message: Message) -> None:
        """The application has the message: give its credit back, auto-acknowledge it."""
        if self._conn._live(message._epoch) is None:
            self._taken_lost()
            return
        if self.session.transacted:
            self.session._tx_work = True
        if self.window > 0:
            self._to_return += credit_of(message._size)
            if self._to_return >= self._return_at:
                self._give_credit(self._to_return)
                self._to_return = 0
        if self.ack_mode == "auto":
            self._cumulative = message
            self._ack_count += 1
            if self._ack_count >= ACK_BATCH:
                self._flush_acks()
            elif not self._ack_scheduled:
                self._ack_scheduled = True
                self._conn._loop.call_soon(self._flush_acks)

    def _taken_lost(self) -> None:
        """The application took a message of a lost connection (a listener or a thread had it
        while the connection went): nothing is settled, the broker redelivers it; the
        transaction that took it cannot commit."""
        if self.session.transacted:
            self.session._rollback_only = "it consumed a message delivered before a failover"

    def _give_credit(self, amount: int) -> None:
        """Credit for the live connection (its consumer starts with a full window after a
        failover: credit meant for a lost one is not given, nor counted)."""
        t = self._conn._transport
        if t is None or t.closed:
            return
        self._credit += amount
        t.send_now(Credit(self.session.id, self.id, amount))

    def _want_one(self) -> None:
        """Window 0: ask for exactly one more message when the broker owes us none."""
        if self.window == 0 and self._credit <= 0 and not self._buffer:
            self._give_credit(1 - self._credit)

    def _taken_many(self, count: int, size_credit: int, last: Message | None) -> None:
        """The sync API reports what its thread took (credit bytes, last message), one
        connection generation at a time."""
        if last is not None and self._conn._live(last._epoch) is None:
            self._taken_lost()
            return
        if self.session.transacted and count:
            self.session._tx_work = True
        if self.window > 0 and size_credit:
            self._to_return += size_credit
            if self._to_return >= self._return_at:
                self._give_credit(self._to_return)
                self._to_return = 0
        if self.ack_mode == "auto" and last is not None:
            self._cumulative = last
            self._ack_count += count
            self._flush_acks()

    # -- acknowledgements ---------------------------------------------------------------------------

    def _flush_acks(self) -> None:
        """Send the batched acks, each on the connection its deliveries came on (or drop it)."""
        self._ack_scheduled = False
        conn = self._conn
        sid, cid = self.session.id, self.id
        if self._cumulative is not None:
            message = self._cumulative
            self._cumulative = None
            self._ack_count = 0
            t = conn._live(message._epoch)
            if t is not None:
                t.send(Ack(sid, cid, [message.seq], True, 0))
        if self._acks:
            acks, self._acks = self._acks, []
            t = conn._live(self._acks_epoch)
            if t is not None:
                t.send(Ack(sid, cid, acks, False, 0))

    def _of_live(self, messages) -> list[Message]:
        """Those of ``messages`` delivered on the live connection."""
        t = self._conn._transport
        if t is None or t.closed:
            return []
        return [m for m in messages if m._epoch == t.epoch]

    def _return_buffered(self, taken_back: list[Message] | tuple = ()) -> None:
        """Give prefetched messages back (rollback, close) so the broker redelivers them first,
        in order, without counting a delivery; their credit comes back to us."""
        messages = self._of_live((*taken_back, *self._buffer))
        self._buffer.clear()
        if not messages:
            return
        self._conn._transport.send(Nack(self.session.id, self.id, [m.seq for m in reversed(messages)], 0, True))
        if self.window > 0:
            self._to_return += sum(credit_of(m._size) for m in messages)
            if self._to_return >= self._return_at and not self._closed:
                self._give_credit(self._to_return)
                self._to_return = 0

    def _drop_pending_acks(self) -> None:
        self._cumulative = None
        self._acks.clear()
        self._ack_count = 0

    def _ack(self, message: Message, cumulative: bool) -> None:
        if self._closed or self.ack_mode == "pre":
            return
        if self._conn._live(message._epoch) is None:
            return  # its connection is lost (a failover is done or under way): the broker redelivers it
        if cumulative:
            self._cumulative = message
            self._flush_acks()
            return
        if self._acks_epoch != message._epoch:
            self._acks.clear()  # of a lost connection
            self._acks_epoch = message._epoch
        self._acks.append(message.seq)
        if len(self._acks) >= ACK_BATCH:
            self._flush_acks()
        elif not self._ack_scheduled:
            self._ack_scheduled = True
            self._conn._loop.call_soon(self._flush_acks)

    def _nack(self, message: Message) -> None:
        if self._closed or self.ack_mode == "pre":
            return
        t = self._conn._live(message._epoch)
        if t is None:
            return  # its connection is lost: the broker redelivers it anyway
        self._flush_acks()
        t.send(Nack(self.session.id, self.id, [message.seq], 0))

    async def ack(self, message: Message, *, cumulative: bool = False) -> int:
        """Acknowledge and wait until the broker has it on disk; returns how many it settled.

        A message delivered on a connection that is lost (a failover is done or under way)
        is not acknowledged: nothing is sent and 0 is returned, and the broker redelivers
        it (the at-least-once contract; with a failover URL, to this consumer). The check
        is made on the connection the ack would go on, once there is one.
        """
        if self._conn._live(message._epoch) is None:
            return 0
        self._flush_acks()
        settled = await self._conn._request(
            lambda corr: Ack(self.session.id, self.id, [message.seq], cumulative, corr), epoch=message._epoch)
        return 0 if settled is None else settled

    # -- the application side ---------------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None: wait forever; 0: don't wait)."""
        buffer = self._buffer
        if buffer:
            message = buffer.popleft()
            self._taken(message)
            return message
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ConnectionClosed("the consumer is closed")
        if self._listener is not None:
            raise ClientError("this consumer has a listener; receive() is not available")
        self._want_one()
        if timeout is not None and timeout <= 0:
            return None
        loop = self._conn._loop
        waiter = self._waiter = loop.create_future()
        handle = loop.call_later(timeout, self._wake_waiter, None) if timeout is not None else None
        try:
            message = await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None
            if handle is not None:
                handle.cancel()
        if message is None:
            if self._failure is not None:
                raise self._failure
            return None
        self._taken(message)
        return message

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        message = await self.receive()
        if message is None:
            raise StopAsyncIteration
        return message

    def set_listener(self, listener: Callable[[Message], Any] | None) -> None:
        """Call ``listener(message)`` for each message (a coroutine function is awaited in turn).
        With ``ack="auto"`` the message is acknowledged when it returns, nacked if it raises."""
        self._listener = listener
        if listener is None:
            if self._listener_task is not None:
                self._listener_task.cancel()
                self._listener_task = None
            return
        if inspect.iscoroutinefunction(listener):
            self._listener_task = self._conn._spawn(self._listen())
        else:
            while self._buffer:
                self._call_listener(self._buffer.popleft())

    def _call_listener(self, message: Message) -> None:
        try:
            self._listener(message)
        except Exception:
            log.exception("message listener failed")
            if self.ack_mode == "auto":
                self._nack(message)
            return
        self._taken(message)

    async def _listen(self) -> None:
        listener = self._listener
        while not self._closed and self._failure is None:
            if not self._buffer:
                self._want_one()
                self._waiter = self._conn._loop.create_future()
                await self._waiter
                continue
            message = self._buffer.popleft()
            try:
                await listener(message)
            except Exception:
                log.exception("message listener failed")
                if self.ack_mode == "auto":
                    self._nack(message)
                continue
            self._taken(message)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    async def close(self) -> None:
        """Stop consuming; messages taken but not acknowledged are redelivered."""
        if self._closed:
            return
        await self._close(())

    async def _close(self, taken_back: list[Message] | tuple) -> None:
        self._flush_acks()
        self._closed = True
        unseen = (*taken_back, *self._buffer)
        self._buffer.clear()
        self._wake_waiter(None)
        if self._listener_task is not None:
            self._listener_task.cancel()
        try:
            if self._failure is None and not self.session._closed:
                # the messages given back are numbered on the connection the CLOSE goes on
                await self._conn._request(lambda corr: CloseConsumer(
                    corr, self.session.id, self.id, [m.seq for m in self._of_live(unseen)]))
        except ClientError:
            pass
        finally:
            self.session._consumers.pop(self.id, None)


class AsyncBrowser:
    """Messages waiting in a queue, page by page, without consuming them."""

    def __init__(self, conn: AsyncConnection, queue: str, filter: str | None, batch: int) -> None:
        self._conn = conn
        self.queue = queue
        self.filter = filter
        self.batch = max(batch, 1)
        self._offset = 0
        self._page: deque[Message] = deque()
        self._more = True

    def __aiter__(self) -> AsyncBrowser:
        return self

    async def __anext__(self) -> Message:
        if not self._page and self._more:
            messages, self._more = await self._conn.browse(
                self.queue, filter=self.filter, offset=self._offset, limit=self.batch)
            self._offset += len(messages)
            self._page.extend(messages)
            if not messages:
                self._more = False
        if not self._page:
            raise StopAsyncIteration
        return self._page.popleft()

    async def all(self, limit: int | None = None) -> list[Message]:
        out = []
        async for message in self:
            out.append(message)
            if limit is not None and len(out) >= limit:
                break
        return out
