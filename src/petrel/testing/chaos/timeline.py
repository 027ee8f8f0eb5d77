"""The minimized log of a chaos run: faults, reconnects and refusals, with their time."""

from __future__ import annotations

import threading
import time

__all__ = ["Timeline"]


class Timeline:
    def __init__(self, limit: int = 400) -> None:
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._events: list[tuple[float, str]] = []
        self._limit = limit
        self.dropped = 0

    def note(self, text: str) -> None:
        with self._lock:
            if len(self._events) < self._limit:
                self._events.append((time.monotonic() - self.t0, text))
            else:
                self.dropped += 1

    def lines(self) -> list[str]:
        with self._lock:
            out = [f"  t+{t:6.2f}s {text}" for t, text in self._events]
            if self.dropped:
                out.append(f"  ... {self.dropped} more events")
            return out
