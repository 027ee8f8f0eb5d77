"""Errors shared across Petrel.

Each maps to a process exit code at the CLI edge (DESIGN.md §2): ``ConfigError``
and ``UsageError`` exit 2, any other ``PetrelError`` exits 1.  Their ``str()`` is
one line meant for an operator.
"""

from __future__ import annotations

__all__ = ["PetrelError", "ConfigError", "UsageError"]


class PetrelError(Exception):
    """Base class of Petrel's own errors (exit code 1 at the CLI)."""

    exit_code = 1


class ConfigError(PetrelError):
    """Invalid or unreadable configuration; the message names the bad key.

    e.g. ``broker.toml: journal_file_size: Input should be a valid integer (got 'abc')``
    """

    exit_code = 2


class UsageError(PetrelError):
    """The command was used wrongly (bad arguments, a non-empty directory ...)."""

    exit_code = 2
