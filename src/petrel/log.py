"""Logging for the ``petrel`` command line.

The library only creates loggers (one per module, ``logging.getLogger(__name__)``)
and logs with %-style arguments; it never installs handlers.  The CLI calls
:func:`configure_logging` once, choosing a level and a text or JSON format.

``TRACE`` (5) sits below DEBUG for frame dumps::

    from petrel.log import TRACE
    if logger.isEnabledFor(TRACE):
        logger.log(TRACE, "frame in %r", frame)

Operator-facing lines may carry a stable ``event`` name, e.g.
``logger.warning("backup lost", extra={"event": "ha.failover"})``; both formats
show it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Literal

__all__ = ["TRACE", "LEVELS", "JsonFormatter", "TextFormatter", "configure_logging", "parse_level"]

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Attributes every LogRecord has; anything else came in through ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

_handler: logging.Handler | None = None


def parse_level(level: str | int) -> int:
    """A level number from a name (any case) or a number; ``ValueError`` if unknown."""
    if isinstance(level, int):
        return level
    text = level.strip().upper()
    if text.isdigit():
        return int(text)
    if text == "WARN":
        text = "WARNING"
    if text not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (use one of {', '.join(LEVELS)})")
    return TRACE if text == "TRACE" else logging.getLevelName(text)


class TextFormatter(logging.Formatter):
    """``2025-01-01 12:00:00.123 INFO  petrel.server: message [event=x]``"""

    default_msec_format = "%s.%03d"

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-5s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        event = getattr(record, "event", None)
        if event is not None:
            head, sep, tail = text.partition("\n")  # keep tracebacks below the line
            text = f"{head} [event={event}]{sep}{tail}"
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(
    level: str | int = "INFO",
    fmt: Literal["text", "json"] = "text",
    stream: IO[str] | None = None,
) -> None:
    """Send log records at ``level`` and above to ``stream`` (stderr) in ``fmt``.

    Calling it again replaces the handler it installed before; handlers that
    others installed (pytest's, for one) are left alone.
    """
    global _handler
    number = parse_level(level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(number)
    _handler = handler
    logging.captureWarnings(True)
