"""Server-side state of a CORE connection: sessions, credit-fed consumers, request errors, and the
CORE codes of the server session's refusals (`petrel.server.refusals`)."""

from __future__ import annotations

from petrel.codec.core import ErrorCode, Send
from petrel.core.queue import Consumer, Queue
from petrel.core.transaction import Transaction
from petrel.storage.large import LargeWriter

__all__ = ["RESULT_CODES", "SEND_CODES", "RequestFailed", "Fatal", "CoreConsumer", "ServerSession"]

# refusals (petrel.server.refusals) as the code of a RESULT, and of a SEND_FAILED
RESULT_CODES = {"not-authorized": ErrorCode.UNAUTHORIZED, "address-full": ErrorCode.ADDRESS_FULL,
                "routing": ErrorCode.INVALID, "selector": ErrorCode.INVALID,
                "rolled-back": ErrorCode.TRANSACTION_ROLLED_BACK, "no-transaction": ErrorCode.INVALID,
                "not-found": ErrorCode.NOT_FOUND, "invalid": ErrorCode.INVALID}
SEND_CODES = {**RESULT_CODES, "routing": ErrorCode.ROUTING, "selector": ErrorCode.ROUTING}


class RequestFailed(Exception):
    """A request we refuse without closing the connection: becomes a RESULT with a code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Fatal(Exception):
    """A misuse that ends the connection: an ERROR frame, then close."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CoreConsumer(Consumer):
    """A queue consumer fed by client-granted credit (bytes), not by unacknowledged counts."""

    def __init__(self, queue: Queue, sink, *, session: ServerSession, cid: int, window: int, **kwargs) -> None:
        super().__init__(queue, sink, window=-1, window_bytes=-1, **kwargs)
        self.session = session
        self.cid = cid
        self.unlimited = window < 0
        self.credit = max(window, 0)

    def has_credit(self) -> bool:
        return not (self.paused or self.closed) and (self.unlimited or self.credit > 0)


class ServerSession:
    __slots__ = ("id", "tx", "consumers", "sent", "confirmed", "large", "large_writer", "blocked")

    def __init__(self, id: int, transacted: bool) -> None:
        self.id = id
        self.tx = Transaction(f"core-{id}") if transacted else None
        self.consumers: dict[int, CoreConsumer] = {}
        self.sent = 0  # messages received on this session (confirmations count these)
        self.confirmed = 0
        self.large: Send | None = None  # first frame of a large message being received
        self.large_writer: LargeWriter | None = None  # ... and the file its body goes to
        self.blocked = False  # BLOCK policy: confirmations are held until the address has room
