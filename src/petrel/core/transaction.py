"""Local transactions: sends wait until commit; acknowledgements are held until then."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.core.message import Message, RoutingType
    from petrel.core.queue import MessageReference


class TransactionRolledBack(Exception):
    """Commit was refused and the transaction rolled back; the message says why."""


class Transaction:
    __slots__ = ("name", "sends", "acks", "dup_ids", "rollback_only", "closed")

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.sends: list[tuple[Message, RoutingType | None]] = []
        self.acks: list[MessageReference] = []
        self.dup_ids: set[tuple[str, str]] = set()
        self.rollback_only: str | None = None
        self.closed = False

    def hold_ack(self, ref: MessageReference) -> None:
        """An acknowledgement inside the transaction: release the consumer's credit, settle at commit."""
        consumer = ref.consumer
        if consumer is not None and consumer.delivering.pop(ref.seq, None) is not None:
            consumer.bytes_in_flight -= ref.message.body_size
        self.acks.append(ref)

    def close(self) -> None:
        self.closed = True
        self.sends.clear()
        self.acks.clear()
        self.dup_ids.clear()
