"""How full the data directory's file system is, checked on the write path.

A timer every few seconds is too slow for a fast producer: it can fill the disk between two
looks.  The store calls :meth:`DiskWatch.appended` with the size of what it appends (a counter,
nothing else); every ``every_bytes`` it asks ``statvfs``, at most once per ``min_interval``
unless 16 times that much came meanwhile (``statvfs`` takes a few microseconds on an idle disk,
hundreds under a migration's writes), so the disk is seen full within that many bytes of
crossing ``max_percent``.  The broker's timer calls
:meth:`check` too, which is what notices space coming back while producers are blocked.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["DiskWatch"]

log = logging.getLogger("petrel.storage")


class DiskWatch:
    def __init__(self, path: Path, max_percent: float, on_change: Callable[[bool, float], None], *,
                 every_bytes: int = 256 * 1024, min_interval: float = 0.01) -> None:
        self.path = Path(path)
        self.max_percent = max_percent
        self.on_change = on_change
        self.every_bytes = every_bytes
        self.min_interval = min_interval
        self._last = 0.0
        self.full = False
        self.percent = 0.0
        self._bytes = 0

    def appended(self, nbytes: int) -> None:
        n = self._bytes = self._bytes + nbytes
        if n >= self.every_bytes and (n >= 16 * self.every_bytes
                                      or time.monotonic() - self._last >= self.min_interval):
            self.check()

    def check(self) -> bool:
        """Look now; returns whether the disk is over ``max_percent`` (``on_change`` on a change)."""
        self._bytes = 0
        self._last = time.monotonic()
        try:
            st = os.statvfs(self.path)
        except OSError:
            return self.full
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        self.percent = 100.0 * (total - free) / total if total else 0.0
        full = self.percent > self.max_percent
        if full != self.full:
            self.full = full
            self.on_change(full, self.percent)
        return full
