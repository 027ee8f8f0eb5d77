"""Markdown tables, the README block between markers, and the JSON result file."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from .metrics import METRICS, Cell, Measurement, medians, ratio

BEGIN = "<!-- stompbench:results:begin -->"
END = "<!-- stompbench:results:end -->"


def source_state(repo: Path = Path(__file__).resolve().parents[2]) -> str:
    """The commit a benchmark measures: HEAD, and the tracked files under src/ and bench/ that
    differ from it (work in progress), or "?" without git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    try:
        dirty = git("diff", "--name-only", "HEAD", "--", "src", "bench").split()
        head = git("rev-parse", "--short", "HEAD")
    except OSError:
        return "?"
    return (head or "?") + (f" + uncommitted {', '.join(dirty)}" if dirty else "")


def figure(v: float | None, digits: int = 1) -> str:
    """A figure for a table cell: "–" when missing, thousands without decimals from 100 up,
    ``digits`` decimals from 10 up, two below."""
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}" if abs(v) >= 10 else f"{v:.2f}"


def fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    if metric == "rate":
        return f"{value:,.0f}"
    if metric.endswith("_ms") or metric == "cpu_us_per_msg":
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    return f"{value:,.0f}"


def _cell(cells: dict[str, Cell] | None, metric: str, status: str | None) -> str:
    if status:
        return status
    if cells is None:
        return "–"
    c = cells[metric]
    if c.runs_ok == 0:
        return "failed"
    text = fmt(metric, c.value)
    if c.runs_ok < c.runs:
        text += f" ({c.runs_ok}/{c.runs} runs)"
    return text


def comparison_table(
    measurements: list[Measurement],
    rows: list[str],
    subject: str,
    peers: list[str],
    labels: dict[str, str],
    skipped: dict[str, str],
    procs: int,
) -> str:
    """One line per (row, metric): the subject, each peer, and subject / best peer."""
    med = medians([m for m in measurements if m.procs == procs])
    brokers = [subject, *peers]
    head = ["row", "metric", *(labels.get(b, b) for b in brokers), f"{labels.get(subject, subject)} / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        for metric, (heading, higher) in METRICS.items():
            cells = {b: med.get((b, row, procs)) for b in brokers}
            if all(c is None or c[metric].value is None for c in cells.values()):
                continue
            values = [_cell(cells[b], metric, "skipped" if b in skipped else None) for b in brokers]
            r = ratio(
                cells[subject][metric].value if cells[subject] else None,
                [cells[p][metric].value if cells[p] else None for p in peers],
                higher,
            )
            rtext = "–" if r is None else f"{r:.2f}×"
            lines.append("| " + " | ".join([row, heading, *values, rtext]) + " |")
    return "\n".join(lines)


def best_by_row(
    measurements: list[Measurement], procs: int
) -> dict[str, tuple[float, str, float | None]]:
    """row -> (best median msgs/s over the brokers, that broker, its generator CPU %)."""
    best: dict[str, tuple[float, str, float | None]] = {}
    for (broker, row, p), cells in medians(measurements).items():
        v = cells["rate"].value
        if p == procs and v is not None and (row not in best or v > best[row][0]):
            best[row] = (v, broker, cells["generator_cpu_pct"].value)
    return best


def _best(entry: tuple[float, str, float | None] | None) -> str:
    if entry is None:
        return "–"
    load = f", busiest generator process {entry[2]:.0f}% CPU" if entry[2] is not None else ""
    return f"{entry[0]:,.0f} ({entry[1]}{load})"


def procs_table(measurements: list[Measurement], rows: list[str], low: int, high: int) -> str:
    """Best figure per row with ``low`` and ``high`` generator processes."""
    a, b = best_by_row(measurements, low), best_by_row(measurements, high)
    lines = [
        f"| row | best msgs/s, {low} generator process(es) | best msgs/s, {high} | {high} / {low} |",
        "|---|---|---|---|",
    ]
    for row in rows:
        if row not in a and row not in b:
            continue
        va, vb = a.get(row), b.get(row)
        change = f"{vb[0] / va[0]:.2f}" if va and vb and va[0] else "–"
        lines.append(f"| {row} | {_best(va)} | {_best(vb)} | {change} |")
    return "\n".join(lines)


def selftest_table(measurements: list[Measurement], rows: list[str], procs_list: list[int]) -> str:
    med = medians(measurements)
    head = ["row", *(f"sink msgs/s, {p} process(es)" for p in procs_list)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [med.get(("sink", row, p)) for p in procs_list]
        if all(c is None for c in cells):
            continue
        lines.append(
            "| " + " | ".join([row, *(_cell(c, "rate", None) for c in cells)]) + " |"
        )
    return "\n".join(lines)


def update_readme(path: Path, block: str) -> None:
    """Replace the text between the markers in ``path`` (appending them if absent)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    new_block = f"{BEGIN}\n{block.strip()}\n{END}"
    if BEGIN in text and END in text:
        pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
        text = pattern.sub(lambda _: new_block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + new_block + "\n"
    path.write_text(text)


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
