"""The table of a series of chaos runs: runs, faults injected by kind, and the accounts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from petrel.testing.chaos.plan import FAULT_KINDS, HA_FAULT_KINDS, SPARK_FAULT_KINDS
from petrel.testing.chaos.runner import RunResult

__all__ = ["Totals", "print_table"]

NAMES = ("confirmed", "lost", "duplicated", "redelivered", "reordered", "in_doubt", "unknown",
         "dropped_non_durable", "in_flight")


class Totals:
    def __init__(self, results: Sequence[RunResult]) -> None:
        self.results = list(results)
        self.faults: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        for r in self.results:
            self.faults.update(r.injected)
            for kind in r.skipped:
                self.skipped[kind] += 1
            v = r.verdict
            for name in NAMES:
                self.counts[name] += getattr(v, name)
        self.failed = [r for r in self.results if not r.ok]

    def rows(self) -> list[tuple[str, str]]:
        rows = [("runs", str(len(self.results))), ("runs failed", str(len(self.failed)))]
        for kind in FAULT_KINDS + HA_FAULT_KINDS + SPARK_FAULT_KINDS:
            label = f"faults: {kind}"
            value = str(self.faults[kind])
            if self.skipped[kind]:
                value += f" ({self.skipped[kind]} skipped)"
            rows.append((label, value))
        for name in NAMES:
            rows.append((f"messages {name.replace('_', ' ')}", f"{self.counts[name]:,}"))
        return rows


def print_table(results: Sequence[RunResult], *, caption: str | None = None) -> None:
    totals = Totals(results)
    try:
        from petrel.cli.tables import print_table as table
    except ImportError:  # rich missing: a plain table
        width = max(len(k) for k, _ in totals.rows())
        for k, v in totals.rows():
            print(f"{k:<{width}}  {v:>12}")
        if caption:
            print(caption)
    else:
        table(("WHAT", "COUNT"), totals.rows(), right=("COUNT",), caption=caption)
    if totals.failed:
        print("failed seeds:", " ".join(str(r.plan.seed) for r in totals.failed))
        for r in totals.failed:
            print(f"  {r.summary()}\n    replay: {_replay(r)}")


def _replay(r: RunResult) -> str:
    from petrel.testing.chaos.runner import replay_command

    return replay_command(r.plan.seed, r.scale, r.plan.topology, r.plan.protocol)
