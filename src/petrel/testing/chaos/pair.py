"""The ``pair`` topology of a chaos run: a primary and a backup on one shared data directory.

`SharedStorePair` stands where a single `BrokerProcess` stands in the runner and the injector:
its ports are the live's, ``kill9()`` and ``stop()`` hit whichever process serves (so the other
takes over), ``proc.poll()`` says whether one of the two is down, and ``start()`` starts what is
down and waits until one serves and the other waits as its backup again (a returning primary
takes over again: ``allow_failback``). The clients of the workload know both addresses and go
to whichever accepts (a waiting backup listens on nothing).
"""

from __future__ import annotations

import time
from pathlib import Path

from petrel.testing.process import BrokerProcess, wait_for

__all__ = ["LivePair", "SharedStorePair", "POLICY"]

#: A SIGTERM of the live hands over to the backup; the primary takes over again when it returns.
POLICY = "[ha_policy]\nshared_store = \"{role}\"\nfailover_on_shutdown = true\n"
WAITING = ("backup", "failing-back")
SERVING = ("ok", "cannot persist")  # live; the second on a full disk


class _PairProc:
    """``poll()``: None while both processes run, else the exit code of one that does not."""

    def __init__(self, pair: SharedStorePair) -> None:
        self.pair = pair

    def poll(self) -> int | None:
        for node in self.pair.nodes:
            if node.proc is None:
                return -1
            code = node.proc.poll()
            if code is not None:
                return code
        return None

    @property
    def returncode(self) -> int | None:
        return self.poll()


class LivePair:
    """What both kinds of pair share: which process serves, where clients go, and failing the live
    (the other takes over). A subclass sets ``p``, ``b`` and ``nodes`` and says how it starts."""

    p: BrokerProcess
    b: BrokerProcess
    nodes: tuple[BrokerProcess, BrokerProcess]
    failovers: list[float]  # seconds from a kill/stop of the live to the other serving
    last_live: BrokerProcess

    def live(self, timeout: float = 60.0) -> BrokerProcess:
        """The process that serves (waiting up to `timeout` for one to)."""
        return wait_for(self._serving, timeout, 0.02, message=f"no live in the pair: {self.states()}")

    def _serving(self) -> BrokerProcess | None:
        for node in self.nodes:
            if self._running(node) and node.health().get("status") in SERVING:
                self.last_live = node
                return node
        return None

    def other(self, node: BrokerProcess) -> BrokerProcess:
        return self.b if node is self.p else self.p

    def states(self) -> dict[str, str]:
        return {n.config_path.parent.name: (n.health().get("status", "down") if self._running(n) else "down")
                for n in self.nodes}

    @property
    def port(self) -> int:
        return self.live().port

    @property
    def stomp_port(self) -> int:
        return self.live().stomp_port

    @property
    def http_port(self) -> int:
        return self.live().http_port

    @staticmethod
    def _running(node: BrokerProcess) -> bool:
        return node.proc is not None and node.proc.poll() is None

    # -- faults ---------------------------------------------------------------------------------

    def kill9(self) -> None:
        """Kill the live; return once the other serves (if it runs)."""
        self._fail(lambda node: node.kill9())

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM the live (it hands over: failover_on_shutdown); its exit code."""
        codes = []
        self._fail(lambda node: codes.append(node.stop(timeout)))
        return codes[0] if codes else 0

    def _fail(self, how) -> None:
        live = self._serving()
        if live is None:
            return
        other = self.other(live)
        t0 = time.monotonic()
        how(live)
        if self._running(other):
            other.wait_state(*SERVING, timeout=60)
            self.last_live = other
            self.failovers.append(time.monotonic() - t0)


class SharedStorePair(LivePair):
    def __init__(self, workdir: Path, settings: str, name: str = "node0") -> None:
        self.data_dir = Path(workdir) / f"{name}-shared"
        self.p = BrokerProcess(Path(workdir) / f"{name}p", name=f"{name}p", http=True, data_dir=self.data_dir,
                               settings=settings + POLICY.format(role="primary"))
        self.b = BrokerProcess(Path(workdir) / f"{name}b", name=f"{name}b", http=True, data_dir=self.data_dir,
                               settings=settings + POLICY.format(role="backup"))
        self.nodes = (self.p, self.b)
        self.proc = _PairProc(self)
        self.failovers: list[float] = []
        self.last_live = self.p

    def start(self, *extra_args: str, wait: bool = True) -> SharedStorePair:
        """Start whichever process is down; wait until one serves and the other waits."""
        if not any(self._running(n) for n in self.nodes):
            self.p.start(*extra_args, wait=False)  # the primary first: it serves, the backup waits
            self.p.wait_state(*SERVING)
        for node in self.nodes:
            if not self._running(node):
                node.start(*extra_args, wait=False)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        def settled() -> bool:
            states = [n.health().get("status") for n in self.nodes]
            serving = [s for s in states if s in SERVING]
            return len(serving) == 1 and all(s in SERVING or s in WAITING for s in states)

        wait_for(settled, timeout, 0.02, message=f"the pair did not settle: {self.states()}")

    def stop_all(self) -> None:
        """Stop both: the waiting one first, so that the live does not hand over to it."""
        live = self._serving()
        for node in sorted(self.nodes, key=lambda n: n is live):
            node.stop()

    def log(self) -> str:
        return "\n".join(f"--- {n.config_path.parent.name}\n{n.log()[-2500:]}" for n in self.nodes)
