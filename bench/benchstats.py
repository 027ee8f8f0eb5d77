"""Medians, ratios and run bookkeeping shared by the one-file harnesses (mqtt.py, amqp.py,
seam_regress.py, jms.py).

A figure is None when its run did not complete; a median ignores those, and is None when no run
completed. A ratio is None when either side is missing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import statistics
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path


def median(values: Iterable[float | None]) -> float | None:
    done = [v for v in values if v is not None]
    return statistics.median(done) if done else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def paired_ratio(subject: list[float | None], peer: list[float | None]) -> float | None:
    """The median of the per-run ratios (run k of the subject / run k of the peer): the machine's
    drift between runs moves both sides of one pair alike."""
    return median(ratio(a, b) for a, b in zip(subject, peer))


def best_peer(medians: Mapping[str, float | None], subject: str) -> tuple[str | None, float | None]:
    """The peer with the highest median (msgs/s: higher is better)."""
    peers = [(m, name) for name, m in medians.items() if name != subject and m is not None]
    if not peers:
        return None, None
    m, name = max(peers)
    return name, m


def loadavg() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP connection to the port is accepted now."""
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def head_commit() -> str:
    """The checkout's short commit (read at a run's start: others commit meanwhile)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                          capture_output=True, text=True).stdout.strip()


def save_results(prefix: str, started: dt.datetime, record: dict) -> Path:
    """bench/results/<prefix>-<start time>.json (git-ignored)."""
    out = Path(__file__).parent / "results" / f"{prefix}-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return out
