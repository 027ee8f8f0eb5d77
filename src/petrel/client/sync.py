"""The synchronous client: the asyncio client driven by an event loop in a background thread.

Every call but the hot ones runs a coroutine on that loop and waits for it. The hot
ones avoid a round trip per message: `Producer.send` hands messages to the loop in
batches (one wake-up per batch) and waits only when the confirmation window is full;
`Consumer.receive` takes messages from a thread-side queue the loop fills, and reports
what it took (credit, auto-acks) in batches.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from petrel.client.connection import AsyncConnection, connect
from petrel.client.consumer import AsyncConsumer
from petrel.client.errors import ClientError, ConnectionClosed
from petrel.client.message import Message
from petrel.client.session import AsyncSession
from petrel.client.cursors import SyncCursorRequests
from petrel.codec.core import credit_of

__all__ = ["Connection", "Session", "Producer", "Consumer"]

log = logging.getLogger("petrel.client.sync")


class _LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="petrel-client-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro, timeout: float | None = None):
        if threading.current_thread() is self.thread:
            coro.close()
            raise ClientError("synchronous client calls cannot be made from the client's own loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def call(self, fn: Callable, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(10)
            self.loop.close()


class Connection(SyncCursorRequests):
    """A synchronous CORE connection; the arguments are those of `AsyncConnection`."""

    def __init__(self, url: str, **options: Any) -> None:
        self._runner = _LoopThread()
        try:
            self._async: AsyncConnection = self._runner.run(connect(url, **options))
        except BaseException:
            self._runner.stop()
            raise

    @property
    def async_connection(self) -> AsyncConnection:
        return self._async

    @property
    def node_id(self) -> str:
        return self._async.node_id

    @property
    def endpoint(self):
        return self._async.endpoint

    @property
    def failovers(self) -> int:
        return self._async.failovers

    @property
    def connected(self) -> bool:
        return self._async.connected

    @property
    def topology(self):
        return self._async.topology

    def _run(self, coro, timeout: float | None = None):
        return self._runner.run(coro, timeout)

    def session(self, *, transacted: bool = False) -> Session:
        return Session(self, self._run(self._async.session(transacted=transacted)))

    def create_address(self, name: str, routing_types: tuple[str, ...] = ("MULTICAST",)) -> None:
        self._run(self._async.create_address(name, routing_types))

    def delete_address(self, name: str) -> None:
        self._run(self._async.delete_address(name))

    def create_queue(self, name: str, address: str | None = None, routing_type: str = "ANYCAST",
                     **options: Any) -> dict[str, Any]:
        return self._run(self._async.create_queue(name, address, routing_type, **options))

    def delete_queue(self, name: str) -> None:
        self._run(self._async.delete_queue(name))

    def queue_info(self, name: str) -> dict[str, Any] | None:
        return self._run(self._async.queue_info(name))

    def address_info(self, name: str) -> dict[str, Any] | None:
        return self._run(self._async.address_info(name))

    def queue_names(self, pattern: str = "#") -> list[str]:
        return self._run(self._async.queue_names(pattern))

    def browse(self, queue: str, *, filter: str | None = None, offset: int = 0, limit: int = 100):
        return self._run(self._async.browse(queue, filter=filter, offset=offset, limit=limit))

    def close(self, timeout: float = 10.0) -> None:
        try:
            if not self._runner.loop.is_closed():
                self._run(self._async.close(timeout), timeout + 5)
        finally:
            self._runner.stop()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Session:
    def __init__(self, conn: Connection, session: AsyncSession) -> None:
        self.connection = conn
        self._async = session
        self._loop = conn._runner.loop
        self._lock = threading.Lock()
        self._batch: list[tuple[str, Message]] = []
        self._queued = 0
        self._scheduled = False
        self._room = threading.Event()
        self._consumers: list[Consumer] = []
        session._on_room.append(self._confirmed)

    @property
    def transacted(self) -> bool:
        return self._async.transacted

    @property
    def resent(self) -> int:
        """Messages sent again after failovers."""
        return self._async.resent

    def _run(self, coro, timeout: float | None = None):
        return self.connection._run(coro, timeout)

    # -- sending -----------------------------------------------------------------------------

    def _confirmed(self, released: int) -> None:  # loop thread
        self._room.set()

    def _post(self, destination: str, message: Message) -> None:
        session = self._async
        window = session._window
        size = len(message.body)
        while True:
            self._room.clear()
            if session._failure is not None:
                raise session._failure
            if session._closed:
                raise ConnectionClosed("the session is closed")
            with self._lock:
                if session._unconfirmed_bytes + self._queued < window:
                    self._batch.append((destination, message))
                    self._queued += size
                    schedule = not self._scheduled
                    self._scheduled = True
                    break
            self._room.wait(0.2)
        if schedule:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:  # loop thread
        with self._lock:
            batch, self._batch = self._batch, []
            self._queued = 0
            self._scheduled = False
        send = self._async._send_nowait
        for destination, message in batch:
            send(destination, message)

    def producer(self, destination: str | None = None) -> Producer:
        return Producer(self, destination)

    def flush(self) -> None:
        """Wait until every message sent so far is confirmed (`SendFailed` for refusals)."""
        self._run(self._async.flush())

    # -- consuming ----------------------------------------------------------------------------

    def consumer(self, destination: str, **options: Any) -> Consumer:
        consumer = Consumer(self)

        async def create() -> AsyncConsumer:
            return await self._async.consumer(destination, _sink=consumer._arrive, **options)

        consumer._bind(self._run(create()))
        self._consumers.append(consumer)
        return consumer

    def browser(self, queue: str, *, filter: str | None = None, batch: int = 100) -> Iterator[Message]:
        offset, more = 0, True
        while more:
            messages, more = self.connection.browse(queue, filter=filter, offset=offset, limit=batch)
            if not messages:
                return
            offset += len(messages)
            yield from messages

    # -- transactions, closing ------------------------------------------------------------------

    def commit(self) -> None:
        # Acks of messages this thread took are reported to the loop in batches: report the
        # pending batch first, so the commit covers every message taken so far.
        for consumer in self._consumers:
            if consumer._async is not None:
                with consumer._cond:
                    consumer._report()
        self._run(self._async.commit())

    def rollback(self) -> None:
        taken_back = {c._async.id: c._take_back() for c in self._consumers if c._async is not None}
        self._run(self._async.rollback(taken_back))

    def close(self) -> None:
        self._run(self._async.close())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Producer:
    def __init__(self, session: Session, destination: str | None) -> None:
        self.session = session
        self.destination = destination

    def send(self, message: Message | bytes | str, *, destination: str | None = None, wait: bool = False,
             **fields: Any) -> None:
        """Send (windowed; ``wait=True`` waits for this message's confirmation)."""
        dest = destination or self.destination
        if dest is None:
            raise ValueError("this producer has no destination: pass destination=...")
        if not isinstance(message, Message):
            message = Message(message, **fields)
        elif fields:
            raise TypeError("pass message fields either in the Message or as arguments, not both")
        if wait:
            self.session._run(self.session._async._send(dest, message, True))
        else:
            self.session._post(dest, message)

    def flush(self) -> None:
        self.session.flush()


class Consumer:
    """``receive(timeout)`` in the caller's thread; or ``set_listener(fn)`` (called in a thread
    of its own)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._loop = session._loop
        self._cond = threading.Condition(threading.Lock())
        self._items: deque[Message] = deque()
        self._async: AsyncConsumer | None = None
        self._taken_count = 0
        self._taken_credit = 0
        self._last: Message | None = None
        self._report_at = 1
        self._listener_thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _bind(self, consumer: AsyncConsumer) -> None:
        self._async = consumer
        self._report_at = max(consumer.window // 4, 1) if consumer.window > 0 else 1

    @property
    def queue(self) -> str:
        return self._async.queue if self._async else ""

    def _arrive(self, message: Message) -> None:  # loop thread
        message._owner = self
        with self._cond:
            self._items.append(message)
            self._cond.notify()

    def _report(self) -> None:
        """Tell the loop what this thread took (credit back, auto-acks)."""
        if not self._taken_count:
            return
        count, credit, last = self._taken_count, self._taken_credit, self._last
        self._taken_count = self._taken_credit = 0
        self._last = None
        self._loop.call_soon_threadsafe(self._async._taken_many, count, credit, last)

    def _take(self, timeout: float | None, *, report: bool = True) -> Message | None:
        consumer = self._async
        conn = consumer._conn
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                items = self._items
                while items:
                    message = items.popleft()
                    if conn._live(message._epoch) is None:
                        continue  # its connection is lost: it comes again
                    if report:
                        if self._last is not None and self._last._epoch != message._epoch:
                            self._report()  # a report settles one connection's deliveries
                        self._taken_count += 1
                        self._taken_credit += credit_of(message._size)
                        self._last = message
                        if self._taken_credit >= self._report_at or not items:
                            self._report()
                    return message
                if consumer._failure is not None:
                    raise consumer._failure
                if consumer._closed:
                    return None
                self._report()
                if consumer.window == 0:
                    self._loop.call_soon_threadsafe(consumer._want_one)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining if remaining is not None else 0.5)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None: wait forever)."""
        if self._listener_thread is not None:
            raise ClientError("this consumer has a listener; receive() is not available")
        return self._take(timeout)

    def receive_no_wait(self) -> Message | None:
        return self._take(0)

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self.receive()
            if message is None:
                return
            yield message

    def _ack(self, message: Message, cumulative: bool) -> None:
        # the loop checks the message's connection is the live one when it gets there
        self._loop.call_soon_threadsafe(self._async._ack, message, cumulative)

    def _nack(self, message: Message) -> None:
        self._loop.call_soon_threadsafe(self._async._nack, message)

    def set_listener(self, listener: Callable[[Message], Any] | None) -> None:
        """Call ``listener(message)`` for each message in a dedicated thread; with ``ack="auto"``
        a message is acknowledged when the listener returns and given back if it raises."""
        if listener is None:
            self._stop.set()
            if self._listener_thread is not None and self._listener_thread is not threading.current_thread():
                self._listener_thread.join(10)
            self._listener_thread = None
            self._stop = threading.Event()
            return
        if self._listener_thread is not None:
            raise ClientError("this consumer already has a listener")
        stop = self._stop

        def run() -> None:
            while not stop.is_set():
                try:
                    message = self._take(0.2, report=False)
                except ClientError:
                    return
                if message is None:
                    if self._async._closed:
                        return
                    continue
                try:
                    listener(message)
                except Exception:
                    log.exception("message listener failed")
                    if self._async.ack_mode == "auto":
                        self._nack(message)
                    continue
                with self._cond:
                    self._taken_count += 1
                    self._taken_credit += credit_of(message._size)
                    self._last = message
                    self._report()

        self._listener_thread = threading.Thread(target=run, name="petrel-listener", daemon=True)
        self._listener_thread.start()

    def _take_back(self) -> list[Message]:
        """Prefetched messages this thread has not taken (to give back on rollback or close)."""
        with self._cond:
            self._report()
            items = list(self._items)
            self._items.clear()
        return items

    def close(self) -> None:
        if self._listener_thread is not None:
            self.set_listener(None)
        taken_back = self._take_back()
        if not self._async._closed:
            self.session._run(self._async._close(taken_back))
        if self in self.session._consumers:
            self.session._consumers.remove(self)
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
