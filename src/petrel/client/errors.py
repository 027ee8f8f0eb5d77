"""Exceptions the client raises; each says what happened and, where it helps, what to do."""

from __future__ import annotations

from petrel.codec.core import ErrorCode

__all__ = [
    "ClientError",
    "ConnectionFailed",
    "ConnectionClosed",
    "FailoverInterrupted",
    "RequestFailed",
    "NotFound",
    "AlreadyExists",
    "SendFailed",
    "TransactionRolledBack",
    "error_for",
]


class ClientError(Exception):
    """Base class of client errors; ``code`` is the broker's ErrorCode when it sent one."""

    code: int = ErrorCode.INTERNAL

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConnectionFailed(ClientError):
    """No broker could be reached (or reconnecting gave up)."""


class ConnectionClosed(ClientError):
    """The connection (or session, consumer) was closed."""


class FailoverInterrupted(ClientError):
    """A request was in flight when the connection failed over; its outcome is unknown.

    Retry it (the Artemis "UNBLOCKED" case)."""


class RequestFailed(ClientError):
    """The broker refused a request."""


class NotFound(RequestFailed):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(RequestFailed):
    code = ErrorCode.ALREADY_EXISTS


class SendFailed(ClientError):
    """The broker refused one or more sent messages (``failures``: (message, reason) pairs)."""

    def __init__(self, message: str, failures: list | None = None, code: int | None = None) -> None:
        super().__init__(message, code)
        self.failures = failures or []


class TransactionRolledBack(ClientError):
    """The transaction did not commit: its sends are gone and its messages will be redelivered."""

    code = ErrorCode.TRANSACTION_ROLLED_BACK


_BY_CODE = {
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.ALREADY_EXISTS: AlreadyExists,
    ErrorCode.TRANSACTION_ROLLED_BACK: TransactionRolledBack,
}


def error_for(code: int, message: str) -> ClientError:
    """The exception for a RESULT with a non-zero code."""
    cls = _BY_CODE.get(code, RequestFailed)
    return cls(message or f"request failed with code {code}", code)
