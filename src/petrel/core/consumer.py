"""What a queue hands out and to whom: a reference to a message (its place in one queue, its
state and delivery count) and a consumer (credit, selector, what it holds unacknowledged)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.core.message import Message

if TYPE_CHECKING:
    from petrel.core.queue import Queue
    from petrel.core.selector import Selector

__all__ = ["AVAILABLE", "DELIVERING", "SCHEDULED", "DONE", "MessageReference", "Consumer", "Sink"]

# Reference states.
AVAILABLE, DELIVERING, SCHEDULED, DONE = 0, 1, 2, 3


class MessageReference:
    __slots__ = ("message", "queue", "seq", "delivery_count", "state", "in_deque", "consumer")

    def __init__(self, message: Message, queue: Queue, seq: int, delivery_count: int = 0) -> None:
        self.message = message
        self.queue = queue
        self.seq = seq
        self.delivery_count = delivery_count
        self.state = AVAILABLE
        self.in_deque = False
        self.consumer: Consumer | None = None

    def __repr__(self) -> str:
        return f"<ref {self.queue.name}#{self.seq} msg={self.message.id} dc={self.delivery_count}>"


Sink = Callable[["Consumer", MessageReference], None]


class Consumer:
    """A subscription's view of a queue: credit, the selector, and what it holds unacknowledged."""

    _ids = itertools.count(1)

    def __init__(
        self,
        queue: Queue,
        sink: Sink,
        *,
        selector: Selector | None = None,
        window: int = -1,
        window_bytes: int = -1,
        auto_ack: bool = False,
        browse_only: bool = False,
    ) -> None:
        self.id = next(Consumer._ids)
        self.queue = queue
        self.sink = sink
        self.selector = selector
        self.window = window  # max unacknowledged messages, -1 unlimited
        self.window_bytes = window_bytes
        self.auto_ack = auto_ack
        self.delivering: dict[int, MessageReference] = {}  # seq -> ref, in delivery order
        self.bytes_in_flight = 0
        self.paused = False  # set by the connection when its socket is full
        self.closed = False
        self.nd_position = 0  # non-destructive queues: where this consumer reads in the log
        self.nd_seen = 0  # ... and the last sequence it saw

    def has_credit(self) -> bool:
        if self.paused or self.closed:
            return False
        if self.window >= 0 and len(self.delivering) >= self.window:
            return False
        if self.window_bytes >= 0 and self.bytes_in_flight >= self.window_bytes:
            return False
        return True

    def resume(self) -> None:
        self.paused = False
        self.queue.deliver()
