"""CLI logging set-up (petrel.log)."""

from __future__ import annotations

import io
import json
import logging

import pytest

import petrel.log
from petrel.log import TRACE, configure_logging, parse_level

from cli_harness import restore_logging  # noqa: F401  (an autouse fixture)


def test_trace_level_is_registered() -> None:
    assert TRACE == 5
    assert logging.getLevelName(TRACE) == "TRACE"


@pytest.mark.parametrize(("text", "level"), [("trace", 5), ("DEBUG", 10), ("info", 20), ("warn", 30),
                                             ("Warning", 30), ("error", 40), ("CRITICAL", 50), ("15", 15), (7, 7)])
def test_parse_level(text, level: int) -> None:
    assert parse_level(text) == level


def test_parse_level_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        parse_level("LOUD")


def test_text_format_shows_the_event() -> None:
    out = io.StringIO()
    configure_logging("DEBUG", "text", stream=out)
    logging.getLogger("petrel.test").info("failover to %s", "b2", extra={"event": "ha.failover"})
    line = out.getvalue().strip()
    assert " INFO  petrel.test: failover to b2 [event=ha.failover]" in line
    assert "\n" not in line


def test_json_format_is_one_object_per_line() -> None:
    out = io.StringIO()
    configure_logging("TRACE", "json", stream=out)
    log = logging.getLogger("petrel.test")
    log.log(TRACE, "frame %r", b"SEND")
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("oops", extra={"event": "x.y", "queue": "q1"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "TRACE" and first["message"] == "frame b'SEND'" and first["logger"] == "petrel.test"
    assert first["ts"].endswith("Z")
    assert second["event"] == "x.y" and second["queue"] == "q1"
    assert "ValueError: bad" in second["exc"]


def test_level_filters_and_reconfiguring_replaces_the_handler() -> None:
    out1, out2 = io.StringIO(), io.StringIO()
    configure_logging("WARNING", stream=out1)
    log = logging.getLogger("petrel.test")
    log.info("hidden")
    log.warning("shown")
    configure_logging("INFO", stream=out2)
    log.info("second")
    assert "hidden" not in out1.getvalue() and "shown" in out1.getvalue()
    assert "second" not in out1.getvalue() and "second" in out2.getvalue()
    ours = [h for h in logging.getLogger().handlers if h is petrel.log._handler]
    assert len(ours) == 1
