"""A post office without an event loop, for tests: a hand-advanced clock, recording consumers.

Shared by the post office, operations, file store and large-message tests (import by
name: the test directory is on ``sys.path``).
"""

from __future__ import annotations

import heapq

from petrel.core.message import Message
from petrel.core.postoffice import PostOffice
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.storage.store import NullStore

__all__ = ["ManualClock", "Sink", "consume", "make_office", "msg"]


class ManualClock:
    """A clock and scheduler the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self._timers: list = []
        self._n = 0

    def __call__(self) -> int:
        return self.now

    def call_at_ms(self, when, fn):
        self._n += 1
        entry = [when, self._n, fn, False]
        heapq.heappush(self._timers, entry)

        class H:
            def cancel(_):
                entry[3] = True

        return H()

    def advance(self, ms: int) -> None:
        self.now += ms
        while self._timers and self._timers[0][0] <= self.now:
            _, _, fn, cancelled = heapq.heappop(self._timers)
            if not cancelled:
                fn()


class Sink:
    """A consumer's delivery callback that keeps every reference it is given."""

    def __init__(self) -> None:
        self.got = []

    def __call__(self, consumer, ref) -> None:
        self.got.append(ref)

    @property
    def bodies(self):
        return [r.message.body for r in self.got]


def make_office(settings: dict | None = None) -> tuple[PostOffice, ManualClock]:
    """A post office on a NullStore, its defaults ensured, timed by a ManualClock."""
    clock = ManualClock()
    office = PostOffice(NullStore(), AddressSettingsRepository(settings or {}), clock, clock=clock)
    office.ensure_defaults()
    return office, clock


def msg(office, address, body=b"x", **kw) -> Message:
    return Message(id=office.store.next_id(), address=address, body=body, timestamp=office.now(), **kw)


def consume(office, queue_name, **kw) -> tuple[Consumer, Sink]:
    """A consumer on ``queue_name`` (Consumer keyword arguments in ``kw``) and its Sink."""
    sink = Sink()
    queue = office.queues[queue_name]
    consumer = Consumer(queue, sink, **kw)
    queue.add_consumer(consumer)
    return consumer, sink


def open_file_office(path, settings: dict | None = None):
    """A post office on a real FileStore in ``path``, recovered from what is there."""
    from petrel.storage.file_store import FileStore

    store = FileStore(path, file_size=256 * 1024)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository(settings or {}), clock, clock=clock)
    office.recover(store.recover())
    return office, store


def flush(store) -> None:
    """Wait until everything the store was given is durable."""
    import threading

    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)
