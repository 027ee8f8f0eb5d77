"""The ``spark-scale`` topology's node leaving: a 2-node cluster whose queue a Spark streaming
query reads (through node 0, following the topology to node 1); the ``scale_down`` fault asks
node 1 to leave (``POST /api/v1/broker/scale-down`` with node 0 as the target, what
``petrel cluster scale`` does for a node): it moves every message to node 0 (each keeping
``_PETREL_ORIGIN``, the node, queue and sequence number it had) and exits 0. The producers that
sent to node 1 move over to node 0 as soon as it is gone; the query is killed and restarted
around it at random.

When it leaves is the plan's `scale_when`, counted from the fault's moment: ``now``; ``read``
once a batch the query planned after that moment is committed (what it read of node 1 is behind
its cursor, which the broker moves one batch late: those messages move and must be skipped
where they arrive); ``mid-batch`` as soon as the query plans a batch after that moment (its tasks
read node 1 while it leaves, or read the rest where the messages went). The faults planned after
it wait as long as it did (`begin` returns the wait); a query killed meanwhile is started again.

The node is not started again (`retired`); `wait` tells whether it left cleanly.
"""

from __future__ import annotations

import json
import time
import urllib.request

from petrel.testing.chaos.timeline import Timeline
from petrel.testing.process import BrokerProcess

__all__ = ["ScaleDown"]

LEAVE_TIMEOUT = 120.0  # seconds for the leaving node to move its messages and exit
WHEN_TIMEOUT = 150.0  # seconds to wait for the query's batch (`scale_when`) before leaving anyway


class ScaleDown:
    """Node `leaving` scales down into `target`; `begin` asks, `wait` waits for the exit."""

    def __init__(self, nodes: list[BrokerProcess], timeline: Timeline, leaving: int = 1, target: int = 0) -> None:
        self.nodes, self.timeline = nodes, timeline
        self.leaving, self.target = leaving, target
        self.retired: set[int] = set()
        self.asked_at: float | None = None
        self.problem: str | None = None

    def begin(self, when: str = "now", query=None) -> float:
        """Wait for the moment `when` (the query's checkpoint shows it), then ask node 1 to
        leave; the seconds waited."""
        started = time.monotonic()
        if when != "now" and query is not None:
            self._wait_for(when, query)
        self._ask()
        return time.monotonic() - started

    def _wait_for(self, when: str, query) -> None:
        planned0, _ = query.batches()
        deadline = time.monotonic() + WHEN_TIMEOUT
        while time.monotonic() < deadline:
            if not query.running():
                query.start()  # killed before (its heal comes after this fault)
            planned, committed = query.batches()
            if when == "read" and committed > planned0:
                self.timeline.note(f"the query committed batch {committed - 1}, planned after the scale-down's moment")
                return
            if when == "mid-batch" and planned > planned0:
                self.timeline.note(f"the query planned batch {planned - 1} ({committed} committed)")
                return
            time.sleep(0.02)
        self.timeline.note(f"the query did not reach {when!r} in {WHEN_TIMEOUT:.0f}s: node 1 leaves anyway")

    def _ask(self) -> None:
        node, target = self.nodes[self.leaving], self.nodes[self.target]
        held = _message_count(node)
        body = json.dumps({"target": f"tcp://127.0.0.1:{target.port}"}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api/v1/broker/scale-down", data=body,
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                status = r.status
        except Exception as exc:  # noqa: BLE001 - reported with the seed
            self.problem = f"the scale-down request to node {self.leaving} failed: {exc!r}"
            self.timeline.note(self.problem)
            return
        self.retired.add(self.leaving)
        self.asked_at = time.monotonic()
        self.timeline.note(f"node {self.leaving} asked to scale down into node {self.target} (HTTP {status}); "
                           f"it held {held} messages")

    def wait(self) -> list[str]:
        """Wait for the leaving node to exit; the problems (it did not, or not with 0)."""
        if self.problem is not None:
            return [self.problem]
        if self.asked_at is None:
            return []
        node = self.nodes[self.leaving]
        try:
            code = node.proc.wait(max(LEAVE_TIMEOUT - (time.monotonic() - self.asked_at), 1))
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            return [f"node {self.leaving} did not leave in {LEAVE_TIMEOUT:.0f}s of its scale-down"]
        self.timeline.note(f"node {self.leaving} left (exit {code}) "
                           f"{time.monotonic() - self.asked_at:.1f}s after it was asked")
        if code != 0:
            return [f"node {self.leaving} exited {code} on its scale-down:\n" + node.log()[-1500:]]
        return []


def _message_count(node: BrokerProcess) -> int | str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/api/v1/queues", timeout=10) as r:
            queues = json.loads(r.read())["queues"]
    except Exception as exc:  # noqa: BLE001 - only for the timeline
        return f"? ({exc!r})"
    return sum(q["message_count"] for q in queues if q["name"].startswith("chaos"))
