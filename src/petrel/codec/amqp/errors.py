"""AMQP error conditions (part 2.8.15 and following of the specification) and the codec's
protocol error, which carries the condition to send back on the close, end or detach."""

from __future__ import annotations

from ..errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "AmqpError", "AmqpLocalError", "INTERNAL_ERROR", "NOT_FOUND", "UNAUTHORIZED_ACCESS",
    "DECODE_ERROR", "RESOURCE_LIMIT_EXCEEDED", "NOT_ALLOWED", "INVALID_FIELD", "NOT_IMPLEMENTED",
    "RESOURCE_LOCKED", "PRECONDITION_FAILED", "RESOURCE_DELETED", "ILLEGAL_STATE",
    "FRAME_SIZE_TOO_SMALL", "CONNECTION_FORCED", "FRAMING_ERROR", "REDIRECT", "WINDOW_VIOLATION",
    "ERRANT_LINK", "HANDLE_IN_USE", "UNATTACHED_HANDLE", "DETACH_FORCED", "TRANSFER_LIMIT_EXCEEDED",
    "MESSAGE_SIZE_EXCEEDED", "STOLEN", "TX_UNKNOWN_ID", "TX_ROLLBACK", "TX_TIMEOUT",
]

INTERNAL_ERROR = "amqp:internal-error"
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"
DECODE_ERROR = "amqp:decode-error"
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
NOT_ALLOWED = "amqp:not-allowed"
INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
RESOURCE_LOCKED = "amqp:resource-locked"
PRECONDITION_FAILED = "amqp:precondition-failed"
RESOURCE_DELETED = "amqp:resource-deleted"
ILLEGAL_STATE = "amqp:illegal-state"
FRAME_SIZE_TOO_SMALL = "amqp:frame-size-too-small"
# connection
CONNECTION_FORCED = "amqp:connection:forced"
FRAMING_ERROR = "amqp:connection:framing-error"
REDIRECT = "amqp:connection:redirect"
# session
WINDOW_VIOLATION = "amqp:session:window-violation"
ERRANT_LINK = "amqp:session:errant-link"
HANDLE_IN_USE = "amqp:session:handle-in-use"
UNATTACHED_HANDLE = "amqp:session:unattached-handle"
# link
DETACH_FORCED = "amqp:link:detach-forced"
TRANSFER_LIMIT_EXCEEDED = "amqp:link:transfer-limit-exceeded"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
STOLEN = "amqp:link:stolen"
# transactions
TX_UNKNOWN_ID = "amqp:transaction:unknown-id"
TX_ROLLBACK = "amqp:transaction:rollback"
TX_TIMEOUT = "amqp:transaction:timeout"


class AmqpError(RemoteProtocolError):
    """The peer broke the protocol: ``condition`` is the AMQP error condition to answer with
    (on the close of the connection)."""

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(message.replace("\r", " ").replace("\n", " "), {"condition": condition})
        self.condition = condition


class AmqpLocalError(LocalProtocolError):
    """We tried to send something the protocol does not allow now, or cannot encode."""
