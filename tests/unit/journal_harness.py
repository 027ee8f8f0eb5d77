"""Running a FileJournal in tests: started, reloaded, callbacks run on the writer thread.

Shared by the test_journal*.py modules (import by name: the test directory is on
``sys.path``).
"""

from __future__ import annotations

from petrel.storage.journal import FileJournal
from petrel.storage.journal.recovery import LoadedJournal
from petrel.testing import process

__all__ = ["SIZE", "reload", "run_all", "started", "wait_for"]

SIZE = 16 * 1024  # small segments, so that a few hundred records roll over


def run_all(callbacks) -> None:
    """The journal's dispatch: run the completion callbacks where they arrive."""
    for cb in callbacks:
        cb()


def started(path, *, file_size: int = SIZE, **options) -> tuple[FileJournal, LoadedJournal]:
    """A journal on ``path``, loaded and started (FileJournal keyword arguments in ``options``)."""
    journal = FileJournal(path, file_size=file_size, **options)
    loaded = journal.load()
    journal.start(run_all)
    return journal, loaded


def reload(path, *, skip_damaged: bool = False, file_size: int = SIZE, **options) -> LoadedJournal:
    """What a fresh journal on ``path`` loads (it is stopped again, never started)."""
    journal = FileJournal(path, file_size=file_size, **options)
    loaded = journal.load(skip_damaged=skip_damaged)
    journal.stop()
    return loaded


def wait_for(condition, timeout: float = 10.0) -> object:
    """Poll ``condition`` often: journal callbacks come from the writer thread within ms."""
    return process.wait_for(condition, timeout, interval=0.002)
