"""A connection's replies released after the disk, in read order (the contract is
`petrel.server.session`'s): one store sync per read that appended something durable, and a
read's confirmations never ahead of an earlier read's."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from petrel.core.message import Message

__all__ = ["Confirmations"]


class _Consumed:
    """Releases a read's confirmations once every message it sent is consumed (a message's
    `confirm_hook`), if that comes before the read's sync."""

    __slots__ = ("confirmations", "batch", "left")

    def __init__(self, confirmations: Confirmations, batch: list) -> None:
        self.confirmations = confirmations
        self.batch = batch
        self.left = 0

    def __call__(self, message: Message) -> None:
        self.left -= 1
        if self.left == 0 and not self.batch[1]:
            self.batch[1] = True
            self.confirmations._release()


class Confirmations:
    """Replies released after the disk, in read order (see the module's contract).

    A read whose only durable confirmations are of its sends (``sent``), and whose sent
    messages are all acknowledged by their consumers before the read's sync, is released then,
    as ActiveMQ's concurrent store and dispatch and RabbitMQ's publisher confirms do: a message
    consumed cannot be lost any more.  Anything else in the read that needs the disk (a
    commit, a subscription, a retained message...) waits for the sync."""

    __slots__ = ("conn", "store", "on_failed", "out", "sync", "sync_tx", "_batches", "failed", "sent",
                 "strict")

    def __init__(self, conn: Any, store: Any, on_failed: Callable[[BaseException], None]) -> None:
        self.conn = conn
        self.store = store
        self.on_failed = on_failed
        self.out: list = []  # what the read being handled appended
        self.sync = False
        self.sync_tx = False
        self._batches: deque[list] = deque()  # [items, ready], released in order
        self.failed = False  # a sync failed: nothing more is confirmed
        self.sent: list[Message] = []  # durable messages this read sent outside a transaction
        self.strict = False  # this read has a durable confirmation only its sync may release

    def add(self, item: bytes | Callable[[], None], durable: bool = False, transactional: bool = False,
            sent: Message | list[Message] | None = None) -> None:
        self.out.append(item)
        if durable:
            self.need_sync(transactional, sent)

    def need_sync(self, transactional: bool = False, sent: Message | list[Message] | None = None) -> None:
        """This read's confirmations wait for the disk even if none of them asked; ``sent``: for
        the durable sends of these messages only (their consumption may release it first)."""
        self.sync = True
        if transactional:
            self.sync_tx = True
            self.strict = True
        elif sent is None:
            self.strict = True
        elif type(sent) is list:
            self.sent += sent
        else:
            self.sent.append(sent)

    @property
    def pending(self) -> bool:
        """Something appended or waiting for a sync."""
        return bool(self.out or self._batches)

    def after_pending(self, items: list) -> None:
        """Write `items` (bytes or callables) right after what earlier reads still wait to
        confirm, without waiting for a sync of their own (pushes: a topology, a DISCONNECT)."""
        if self.failed:
            return
        self._batches.append([items, True])
        self._release()

    def flush(self) -> None:
        out = self.out
        sent = self.sent
        if sent:
            self.sent = []
        strict = self.strict
        self.strict = False
        if not out:
            self.sync = self.sync_tx = False
            return
        self.out = []
        sync, transactional = self.sync, self.sync_tx
        self.sync = self.sync_tx = False
        if self.failed:
            return
        if not sync and not self._batches:
            self._emit(out)
            return
        batch = [out, not sync]
        self._batches.append(batch)
        if not sync:
            self._release()
            return

        hook = None if strict or not sent else self._hook(batch, sent)

        def durable() -> None:
            if hook is not None:
                for message in sent:
                    if message.confirm_hook is hook:
                        message.confirm_hook = None
            if not batch[1]:
                batch[1] = True
                self._release()

        self.store.sync(durable, transactional=transactional, failed=self._sync_failed)

    def _hook(self, batch: list, sent: list[Message]) -> _Consumed | None:
        """Hook the read's sent messages for an early release, or None if one cannot have it (a
        message no durable queue holds, or one hooked already)."""
        for message in sent:
            if not message.durable or message.ref_count <= 0 or message.confirm_hook is not None:
                return None
        hook = _Consumed(self, batch)
        hook.left = len(sent)
        for message in sent:
            message.confirm_hook = hook
        return hook

    def _release(self) -> None:
        if self.failed:
            return
        batches = self._batches
        while batches and batches[0][1]:
            self._emit(batches.popleft()[0])

    def _emit(self, items: list) -> None:
        write = self.conn.write
        for item in items:
            if type(item) is bytes:
                write(item)
            elif callable(item):
                item()
            else:
                write(item)

    def _sync_failed(self, error: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        self._batches.clear()
        self.out = []
        self.on_failed(error)
