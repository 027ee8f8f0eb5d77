"""The ``replication`` topology of a chaos run: a primary and a backup, each with its own data
directory, the backup keeping a copy over CORE (``[ha_policy] replication``).

`ReplicationPair` stands where a single `BrokerProcess` stands in the runner and the injector,
like `SharedStorePair`: its ports are the live's, ``kill9()`` and ``stop()`` hit whichever
process serves (the backup takes over: ``lone_pair_failover``, or the live's ZooKeeper lock once
its session expires; a SIGTERM hands over at once: ``failover_on_shutdown``), ``kill_backup()``
kills the one that waits (the live goes on alone), ``start()`` starts what is down, which comes
back as a backup and syncs (a restarted primary waits as the backup of the node serving its ID,
or with ``failback`` takes over again once in sync: ``check_for_live_server``).

Each process reaches the other through a `TcpProxy` (``route_through``), so a link fault cuts or
freezes the replication stream. Without a lock manager a cut link can make two lives (the risk
``lone_pair_failover`` accepts), so the plan draws link faults only for the ZooKeeper variant,
where a cut must never make two lives: a monitor thread polls both processes and reports any
moment at which both serve (``two_lives``).

A live is killed only while its backup is in sync (``cannot_fail``): without a current copy no
replication can keep what only the dead live had, and a primary started while the newest data
sits on a stopped backup would serve its stale journal (as in Artemis); both are double faults,
not what the harness checks.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from petrel.testing.chaos.faults import DiskMount
from petrel.testing.chaos.pair import SERVING, LivePair, _PairProc
from petrel.testing.ha import ha_view, make_pair, route_through
from petrel.testing.process import BrokerProcess, free_port, wait_for
from petrel.testing.proxy import TcpProxy

__all__ = ["LiveDisk", "ReplicationPair"]

POLICY = "failover_on_shutdown = true\nlone_pair_failover = true\n"
SESSION_MS = 2000  # the ZooKeeper variant: a dead live's lock expires after this


class ReplicationPair(LivePair):
    def __init__(self, workdir: Path, settings: str, *, failback: bool, zookeeper: str | None = None,
                 name: str = "node0") -> None:
        lock = ""
        if zookeeper is not None:
            lock = (f'lock_manager = {{ type = "zookeeper", connect_string = "{zookeeper}", '
                    f'session_ms = {SESSION_MS}, connection_ms = 3000, namespace = "chaos{uuid.uuid4().hex[:10]}" }}\n')
        primary = POLICY + lock + ("check_for_live_server = true\n" if failback else "")
        self.p, self.b = make_pair(workdir, "replication", primary=primary, backup=POLICY + lock,
                                   top=settings, name=name)
        self.nodes = (self.p, self.b)
        for node in self.nodes:  # one level down: the full-disk fault mounts a tmpfs on the "disk"
            data_dir = node.workdir / "disk" / "data"
            node.config_path.write_text(node.config_path.read_text().replace(
                f'data_dir = "{node.data_dir}"', f'data_dir = "{data_dir}"'))
            node.data_dir = data_dir
        self.failback = failback
        # each process reaches the other through a proxy: proxies[0] b -> p, proxies[1] p -> b
        self.proxies = []
        for node, target in ((self.b, self.p), (self.p, self.b)):
            proxy = TcpProxy("127.0.0.1", target.port, listen_port=free_port())
            route_through(node, target, proxy.listen_port)
            self.proxies.append(proxy.start())
        self.proc = _PairProc(self)
        self.failovers: list[float] = []
        self.last_live: BrokerProcess = self.p
        self.two_lives: list[str] = []
        self.link_fault: str | None = None  # "cut" / "frozen" while the proxies hold the link
        self._watching = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- where the clients go -------------------------------------------------------------------

    def states(self) -> dict[str, str]:
        out = {}
        for n in self.nodes:
            if not self._running(n):
                out[n.workdir.name] = "down"
                continue
            view = ha_view(n)
            sync = ((view.get("replication") or {}).get("live") or {}).get("state")
            out[n.workdir.name] = f"{n.health().get('status', '?')}/{view.get('state', '?')}" + (f"/{sync}" if sync else "")
        return out

    @property
    def data_dir(self) -> Path:
        return self.live().data_dir

    @staticmethod
    def in_sync(node: BrokerProcess) -> bool:
        live = ((ha_view(node).get("replication") or {}).get("live")) or {}
        return live.get("state") == "in-sync"

    # -- faults ---------------------------------------------------------------------------------

    def cannot_fail(self, timeout: float = 20.0) -> str | None:
        """Why killing the live now would be a double fault (None: its backup is in sync)."""
        live = self._serving()
        if live is None:
            return "nobody serves"
        if self.link_fault is not None:
            return f"the link to its backup is {self.link_fault}: the backup is stale"
        other = self.other(live)
        if not self._running(other):
            return "its backup is down"
        try:
            wait_for(lambda: self.in_sync(other), timeout, 0.1)
        except TimeoutError:
            return f"its backup is not in sync after {timeout:.0f}s: {self.states()}"
        return None

    def kill_backup(self) -> BrokerProcess | None:
        """Kill the process that waits as the backup (the live goes on alone); which one."""
        live = self._serving()
        if live is None:
            return None
        other = self.other(live)
        if self._running(other):
            other.kill9()
            return other
        return None

    def cut(self) -> None:
        self.link_fault = "cut"
        for proxy in self.proxies:
            proxy.cut()

    def freeze(self) -> None:
        self.link_fault = "frozen"
        for proxy in self.proxies:
            proxy.freeze()

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.heal()
        self.link_fault = None

    # -- starting and stopping --------------------------------------------------------------------

    def start(self, *extra_args: str, wait: bool = True) -> ReplicationPair:
        """Start whichever process is down (the last live first when both are); with `wait`, until
        one serves and the other is its backup in sync."""
        if not any(self._running(n) for n in self.nodes):
            first = self.last_live
            first.start(*extra_args, wait=False)
            first.wait_state(*SERVING, timeout=60)
        for node in self.nodes:
            if not self._running(node):
                node.start(*extra_args, wait=False)
        self._watch()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        def settled() -> bool:
            live = self._serving()
            return live is not None and self._running(self.other(live)) and self.in_sync(self.other(live))

        wait_for(settled, timeout, 0.1, message=f"the pair did not settle (a live and a backup in sync): "
                                                f"{self.states()}")

    def restart_all(self) -> None:
        """Stop both and start both from their directories: the primary with the newest data first
        (if the backup serves, it hands over to the primary first: a primary started while the
        newest data is on a stopped backup would serve its stale journal)."""
        self.wait_ready()
        if self._serving() is self.b:
            self.b.stop()
            self.p.wait_state(*SERVING, timeout=60)
            self.b.start(wait=False)
            self.wait_ready()
        self.b.stop()
        self.p.stop()
        self.last_live = self.p
        self.start()

    def stop_all(self) -> None:
        """Stop both: the waiting one first, so that the live does not hand over to it."""
        self._watching.clear()
        live = self._serving()
        for node in sorted(self.nodes, key=lambda n: n is live):
            node.stop()

    def close(self) -> None:
        self._watching.clear()
        for node in self.nodes:
            node.kill9()
        for proxy in self.proxies:
            proxy.stop()

    # -- split brain ------------------------------------------------------------------------------

    def _watch(self) -> None:
        if self._watcher is not None and self._watcher.is_alive():
            return
        self._watching.set()
        self._watcher = threading.Thread(target=self._watch_loop, name="two-lives watch", daemon=True)
        self._watcher.start()

    def _watch_loop(self) -> None:
        both = 0
        while self._watching.is_set():
            serving = [n for n in self.nodes if self._running(n) and n.health().get("status") in SERVING]
            both = both + 1 if len(serving) == 2 else 0
            if both == 5 and len(self.two_lives) < 5:  # for half a second or more, not one stale answer
                self.two_lives.append(f"both processes serve: {self.states()}")
            time.sleep(0.1)

    def log(self) -> str:
        return "\n".join(f"--- {n.workdir.name}\n{n.log()[-2500:]}" for n in self.nodes)


class LiveDisk:
    """The full-disk fault of a replication pair: each data directory is on a small tmpfs;
    ``fill()`` fills the live's, ``free()`` frees both.

    The mount is the data directory's parent, not the directory itself: a backup sets its old
    copy aside in ``oldreplica.N`` beside its data directory by rename, which fails across file
    systems (EXDEV), so a backup whose data directory is a mount point never syncs again after a
    restart (a Petrel bug found by this harness, seed 1001; reported, not fixed here)."""

    def __init__(self, pair: ReplicationPair) -> None:
        self.pair = pair
        self.mounts = {n.workdir.name: DiskMount(n.data_dir.parent) for n in pair.nodes}
        self.mounted = False

    def mount(self) -> str | None:
        for disk in self.mounts.values():
            why = disk.mount()
            if why is not None:
                self.unmount()
                return why
        self.mounted = True
        return None

    def fill(self) -> int:
        return self.mounts[self.pair.live().workdir.name].fill()

    def free(self) -> None:
        for disk in self.mounts.values():
            disk.free()

    def unmount(self) -> None:
        for disk in self.mounts.values():
            disk.unmount()
        self.mounted = False
