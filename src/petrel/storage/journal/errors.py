"""Errors raised by the journal."""

from __future__ import annotations

__all__ = ["DamagedJournal", "JournalError", "UnsupportedFormat"]


class JournalError(Exception):
    """A journal operation failed, or the caller misused the journal."""


class UnsupportedFormat(JournalError):
    """A file written in a format version this broker does not know (a newer broker's):
    refused whatever ``skip_damaged`` says, as skipping it would lose what it holds."""


class DamagedJournal(JournalError):
    """Damage that is not a torn tail of the newest segment; load refuses to guess."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(
            f"journal damaged in {path} at offset {offset}: {reason}; "
            "start with --skip-damaged to skip it"
        )
        self.path = path
        self.offset = offset
        self.reason = reason
