"""What a `FileStore.sync` leaves behind to run once the disk has answered: a waiter over
several journals (`_Waiter`), the duplicate IDs appended once their pages are durable
(`_DupIdsAfterPages`), and the mark of page records known durable (`_PagesSynced`). Each is
called when its sync succeeded, or given the error (`fail`) when it did not."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.storage.file_store import FileStore

log = logging.getLogger("petrel.storage")


class _Waiter:
    """One `FileStore.sync` over several journals: `done` once each has called it, or
    `failed(error)` once, at the first failure (a journal calls `fail` for that)."""

    __slots__ = ("store", "done", "failed", "left")

    def __init__(self, store: FileStore, done: Callable[[], None],
                 failed: Callable[[BaseException], None] | None, left: int) -> None:
        self.store = store
        self.done = done
        self.failed = failed
        self.left = left

    def __call__(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.store._confirm(self.done, self.failed)  # through the replication gate, if any

    def fail(self, error: BaseException) -> None:
        if self.left <= 0:
            return
        self.left = -1
        if self.failed is not None:
            self.failed(error)
        else:
            log.error("a sync failed and nobody asked to hear it: %s", error)


class _DupIdsAfterPages:
    """A sync that waited for the page writer: append the duplicate IDs whose pages are now
    durable, then sync the journals (`done` or `failed` at the end)."""

    __slots__ = ("store", "record_ids", "done", "failed")

    def __init__(self, store: FileStore, record_ids: list[int], done: Callable[[], None],
                 failed: Callable[[BaseException], None] | None) -> None:
        self.store = store
        self.record_ids = record_ids
        self.done = done
        self.failed = failed

    def __call__(self) -> None:
        self.store._dup_waits -= 1
        self.store._append_dup_ids(self.record_ids)
        self.store._sync_now(self.done, self.failed)

    def fail(self, error: BaseException) -> None:
        self.store._dup_waits -= 1
        if self.failed is not None:
            self.failed(error)
        else:
            log.error("a sync failed and nobody asked to hear it: %s", error)


class _PagesSynced:
    """A page sync: records that the page records appended before it are durable."""

    __slots__ = ("store", "mark", "waiter")

    def __init__(self, store: FileStore, mark: int, waiter: _Waiter) -> None:
        self.store = store
        self.mark = mark
        self.waiter = waiter

    def __call__(self) -> None:
        if self.mark > self.store._pages_durable:
            self.store._pages_durable = self.mark
        self.waiter()

    def fail(self, error: BaseException) -> None:
        self.waiter.fail(error)
