"""One owner of a connection's reading: paused while any reason holds it.

Several things stop a connection from reading: a producer blocked by a full address or disk
(``"block"``), frames held behind a large body being made durable or a grouping decision
(``"hold"``), limits and TLS. Each says why when it pauses and lifts only its own reason when
it resumes; the transport reads again only when no reason is left, so one reason lifting
never resumes reads another still needs paused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReadFlow"]


class ReadFlow:
    """Counts the reasons a connection's reading is paused (`Connection.reads`)."""

    __slots__ = ("conn", "_reasons")

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # anything with .transport (None until connected) and .closed
        self._reasons: dict[str, int] = {}

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def paused_for(self, reason: str) -> bool:
        return reason in self._reasons

    def reasons(self) -> list[str]:
        return sorted(self._reasons)

    def pause(self, reason: str) -> None:
        """Stop reading for `reason` (counted: as many `resume(reason)` lift it)."""
        reasons = self._reasons
        first = not reasons
        reasons[reason] = reasons.get(reason, 0) + 1
        if first:
            transport = self.conn.transport
            if transport is not None:
                transport.pause_reading()

    def resume(self, reason: str) -> None:
        """Lift one `pause(reason)`; read again once no reason is left."""
        reasons = self._reasons
        count = reasons.get(reason, 0)
        if count == 0:
            return
        if count > 1:
            reasons[reason] = count - 1
            return
        del reasons[reason]
        if not reasons and not self.conn.closed:
            transport = self.conn.transport
            if transport is not None:
                transport.resume_reading()

    def clear(self) -> None:
        """The connection is gone: forget every reason (nothing is resumed)."""
        self._reasons.clear()
