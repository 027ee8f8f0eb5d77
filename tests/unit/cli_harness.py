"""Fixtures for tests that run the ``petrel`` CLI in-process.

Import them into a test module to use them (the test directory is on ``sys.path``):
``restore_logging`` is autouse there; ``clean_env`` is asked for by name.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

import petrel.log

__all__ = ["clean_env", "restore_logging"]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Undo what the CLI's logging set-up did to the root logger."""
    root = logging.getLogger()
    level = root.level
    yield
    if petrel.log._handler is not None:
        root.removeHandler(petrel.log._handler)
        petrel.log._handler = None
    root.setLevel(level)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PETREL_* variable from the environment reaches the configuration."""
    for var in list(os.environ):
        if var.startswith("PETREL_"):
            monkeypatch.delenv(var)
