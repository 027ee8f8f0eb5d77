"""Sequence ranges and named cursors of queues over CORE (a mixin of `CoreAdapter`); the frames
are in `petrel.codec.core.cursors`, the logic in `petrel.core.cursors`.

Answers about what a queue holds (QUEUE_SEQS, BROWSE_RANGE, BODY_READ) are worked out once
everything appended to the store before the request is on disk and in the page files, so every
sequence number below a tail the broker has reported is durable and readable, and a range
below it reads the same each time (unless something is acknowledged or expires). The range
asked for is cut at the tail of the moment of the request. Cursor moves are answered once they
are durable.

The cluster's internal queues (``$.petrel.*``: store-and-forward) are refused to every frame
here, as sends to them are (`petrel.cluster.internal_names`): a cursor on one would hold the
messages in transit back, an ``ack_upto`` would remove them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from petrel.cluster.internal_names import internal_name_problem
from petrel.codec.core import ErrorCode, Result
from petrel.codec.core.cursors import (
    BodyRead,
    BrowseRange,
    CursorAck,
    CursorCreate,
    CursorDelete,
    CursorQuery,
    QueueSeqs,
    RangeMessage,
    RangeResult,
)
from petrel.core.cursors import CursorExists, CursorInvalid, CursorNotFound, HeldMessage
from petrel.core.message import Message
from petrel.server.adapters.core.consuming import scalars
from petrel.server.adapters.core.session import RequestFailed

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["CursorFrames"]

log = logging.getLogger("petrel.server.core")

MAX_RANGE = 10_000  # messages in one RANGE_RESULT at most


class CursorFrames:
    def cursor_handlers(self: CoreAdapter) -> dict[type, Callable[[Any], None]]:
        handlers = {
            QueueSeqs: self.on_queue_seqs,
            BrowseRange: self.on_browse_range,
            CursorAck: self.on_cursor_ack,
            CursorCreate: self.on_cursor_create,
            CursorQuery: self.on_cursor_query,
            CursorDelete: self.on_cursor_delete,
            BodyRead: self.on_body_read,
        }
        return {kind: self._not_internal(handle) for kind, handle in handlers.items()}

    def _not_internal(self: CoreAdapter, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        """`handle`, refusing a frame that names one of the cluster's internal queues."""

        def checked(e: Any) -> None:
            refused = internal_name_problem(self, e.queue.rpartition("::")[2])
            if refused is not None:
                raise RequestFailed(ErrorCode.UNAUTHORIZED, f"no sequence ranges or named cursors here: {refused}")
            handle(e)

        return checked

    # -- what a queue holds (answered after the disk) ----------------------------------------

    def on_queue_seqs(self: CoreAdapter, e: QueueSeqs) -> None:
        tail = _checked(lambda: self.office.tail_seq(e.queue))

        def answer() -> Result:
            earliest = min(self.office.earliest_seq(e.queue), tail)
            return Result(e.corr, 0, "", {"node_id": self.broker.node_id, "queue": e.queue,
                                          "earliest_seq": earliest, "tail_seq": tail})

        self._answer_after_disk(e.corr, answer)

    def on_browse_range(self: CoreAdapter, e: BrowseRange) -> None:
        office = self.office
        tail = _checked(lambda: office.tail_seq(e.queue))
        if e.from_seq < 0 or e.to_seq < 0:
            raise RequestFailed(ErrorCode.INVALID, f"sequence numbers are never negative "
                                                   f"(from {e.from_seq}, to {e.to_seq})")
        if e.from_seq > e.to_seq:
            raise RequestFailed(ErrorCode.INVALID, f"from {e.from_seq} is after to {e.to_seq}")
        if e.max <= 0:
            raise RequestFailed(ErrorCode.INVALID, f"max must be positive, not {e.max}")
        budget = self.broker.config.max_frame_size // 2

        def answer() -> RangeResult:
            to = max(min(e.to_seq, tail), e.from_seq)
            found = office.browse_range(e.queue, e.from_seq, to, min(e.max, MAX_RANGE), max_bytes=budget)
            messages = [self._range_message(h, budget) for h in found.messages]
            return RangeResult(e.corr, self.broker.node_id, e.queue, messages, found.next_seq,
                               min(found.earliest_seq, tail), tail)

        self._answer_after_disk(e.corr, answer)

    def on_body_read(self: CoreAdapter, e: BodyRead) -> None:
        if e.offset < 0 or e.length < 0 or e.seq < 0:
            raise RequestFailed(ErrorCode.INVALID, "offset, length and seq are never negative")
        _checked(lambda: self.office.tail_seq(e.queue))
        length = min(e.length, self.broker.config.max_frame_size // 2)

        def answer() -> Result:
            found = self.office.browse_range(e.queue, e.seq, e.seq + 1, 1).messages
            if not found:
                return Result(e.corr, ErrorCode.NOT_FOUND, f"queue {e.queue!r} holds no message {e.seq}")
            return Result(e.corr, 0, "", self._body(found[0].message, e.offset, length))

        self._answer_after_disk(e.corr, answer)

    def _range_message(self: CoreAdapter, held: HeldMessage, budget: int) -> RangeMessage:
        m = held.message
        size = m.body_size
        body = m.body if m.large is None and size <= budget else self._body(m, 0, budget)
        return RangeMessage(held.seq, m.id, m.duplicate_id, m.address, m.durable, m.priority, m.expiration,
                            m.timestamp, m.scheduled, held.delivery_count, scalars(m.properties), body, size)

    def _body(self: CoreAdapter, m: Message, offset: int, length: int) -> bytes:
        if m.large is None:
            return m.body[offset:offset + length]
        try:
            with open(self.broker.large.path(m.large), "rb") as f:
                f.seek(offset)
                return f.read(max(min(length, m.large.size - offset), 0))
        except FileNotFoundError:
            return b""  # acknowledged meanwhile

    def _answer_after_disk(self: CoreAdapter, corr: int, make: Callable[[], Any]) -> None:
        """Reply with `make()`, called once everything appended to the store so far is durable
        (in order with this connection's other replies)."""

        def write() -> None:
            try:
                event = make()
            except CursorNotFound as exc:
                event = Result(corr, ErrorCode.NOT_FOUND, str(exc))
            except CursorInvalid as exc:
                event = Result(corr, ErrorCode.INVALID, str(exc))
            except Exception as exc:  # never let one request take the connection's replies down
                log.exception("internal error answering a range request from %s", self.conn.peer)
                event = Result(corr, ErrorCode.INTERNAL, f"internal error: {exc}")
            if self.conn.closed:
                return
            try:
                self.conn.write(self.codec.send(event))
            except Exception:
                log.exception("cannot send a range answer to %s", self.conn.peer)

        self._out.append(write)
        self._sync = True

    # -- cursors (answered once durable) -------------------------------------------------------

    def on_cursor_ack(self: CoreAdapter, e: CursorAck) -> None:
        cursor = _checked(lambda: self.office.ack_upto(e.queue, e.name, e.seq, create=e.create))
        self.reply(Result(e.corr, 0, "", self._cursor_value(e.queue, cursor.info())), sync=True)

    def on_cursor_create(self: CoreAdapter, e: CursorCreate) -> None:
        acked = None if e.acked < 0 else e.acked
        cursor = _checked(lambda: self.office.create_seq_cursor(e.queue, e.name, acked, exists_ok=e.exists_ok))
        self.reply(Result(e.corr, 0, "", self._cursor_value(e.queue, cursor.info())), sync=True)

    def on_cursor_query(self: CoreAdapter, e: CursorQuery) -> None:
        office = self.office
        if e.name is None:
            cursors = _checked(lambda: office.seq_cursors(e.queue))
        else:
            cursors = [_checked(lambda: office.seq_cursor(e.queue, e.name))]
        value = {"node_id": self.broker.node_id, "queue": e.queue, "cursors": [c.info() for c in cursors]}
        self.reply(Result(e.corr, 0, "", value))

    def on_cursor_delete(self: CoreAdapter, e: CursorDelete) -> None:
        _checked(lambda: self.office.delete_seq_cursor(e.queue, e.name))
        self.reply(Result(e.corr), sync=True)

    def _cursor_value(self: CoreAdapter, queue: str, info: dict) -> dict:
        return {"node_id": self.broker.node_id, "queue": queue, **info}


def _checked(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except CursorNotFound as exc:
        raise RequestFailed(ErrorCode.NOT_FOUND, str(exc)) from None
    except CursorExists as exc:
        raise RequestFailed(ErrorCode.ALREADY_EXISTS, str(exc)) from None
    except CursorInvalid as exc:
        raise RequestFailed(ErrorCode.INVALID, str(exc)) from None
