"""How a broker becomes the live one, stays it, and hands over (Artemis ``*Activation``).

An activation owns the locks that make a node live and calls ``Broker.activate()`` /
``Broker.deactivate()`` at the right moments:

- :class:`LiveOnly`: lock the data directory, serve (no backup).
- :class:`SharedStorePrimary`: ask an active backup to give way (state ``F``), take the live
  lock, serve; a graceful stop pauses the pair (``P``) unless ``failover_on_shutdown``.
- :class:`SharedStoreBackup`: wait in the background for the live to die, recover the
  shared journal and serve; give way when the primary comes back (``allow_failback``) and
  wait again (``restart_backup``).

Replication's activations live in :mod:`petrel.ha.replication_activation`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from petrel.errors import PetrelError
from petrel.ha.node_manager import LIVE_LOCK, PAUSED, FAILING_BACK, FileNodeManager
from petrel.storage.server_lock import DataDirLocked, ServerLock

if TYPE_CHECKING:
    from petrel.server.node import NodeContext

__all__ = ["Activation", "activation_for", "LiveOnly", "SharedStorePrimary", "SharedStoreBackup"]

log = logging.getLogger("petrel.ha")

# what /api/v1/ha and `petrel ha status` show
STARTING, LIVE, BACKUP, FAILING_BACK_STATE, STOPPED = "starting", "live", "backup", "failing-back", "stopped"


class Activation(Protocol):
    kind: str   # live_only | shared_store | replication
    role: str   # live | primary | backup (as configured)
    state: str  # starting | live | backup | failing-back | stopped

    async def start(self) -> None: ...
    async def stop(self, timeout: float) -> None: ...
    def describe(self) -> dict: ...


def activation_for(broker: NodeContext) -> Activation:
    policy = broker.config.ha_policy
    if policy.shared_store == "primary":
        return SharedStorePrimary(broker)
    if policy.shared_store == "backup":
        return SharedStoreBackup(broker)
    if policy.replication:
        from petrel.ha.replication_activation import replication_activation

        return replication_activation(broker)
    return LiveOnly(broker)


class _Base:
    kind = "live_only"
    role = "live"

    def __init__(self, broker: NodeContext) -> None:
        self.broker = broker
        self.state = STARTING
        self.since = time.time()
        self.failovers = 0

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.since = time.time()

    def describe(self) -> dict:
        policy = self.broker.config.ha_policy
        return {
            "policy": self.kind,
            "role": self.role,
            "state": self.state,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)),
            "node_id": self.broker.node_id,
            "failovers": self.failovers,
            "failover_on_shutdown": policy.failover_on_shutdown,
            "allow_failback": policy.allow_failback,
        }


class LiveOnly(_Base):
    """One broker, one data directory, no backup."""

    def __init__(self, broker: NodeContext) -> None:
        super().__init__(broker)
        self._lock = ServerLock(broker.config.data_dir)

    async def start(self) -> None:
        try:
            self.broker.node_id = self._lock.acquire()
        except DataDirLocked as exc:
            raise PetrelError(str(exc)) from None
        try:
            await self.broker.activate()
        except BaseException:
            self._lock.release()
            raise
        self._set(LIVE)

    async def stop(self, timeout: float) -> None:
        broker = self.broker
        model = broker.config.ha_policy.scale_down
        if broker.office is not None and (getattr(broker, "scale_down_target", None)
                                          or (model is not None and model.enabled)):
            await self._scale_down(timeout)
        else:
            await broker.deactivate(timeout)
        self._lock.release()
        self._set(STOPPED)

    async def _scale_down(self, timeout: float) -> None:
        """Clients are sent to the target, then every message moves there before the store closes."""
        from petrel.codec.core import DisconnectCode
        from petrel.ha.scale_down import PreparedBranchesLeft, refuse_prepared, scale_down, scale_down_targets

        broker = self.broker
        try:  # prepared XA branches do not move: clients are not sent away, nothing moves
            refuse_prepared(broker.office)
        except PreparedBranchesLeft as exc:
            log.error("scale-down refused: %s; everything stays in %s", exc, broker.config.data_dir,
                      extra={"event": "scale_down.prepared_left"})
            await broker.deactivate(timeout)
            broker.exit_code = 1
            return
        targets = scale_down_targets(broker)
        moved = []

        async def migrate() -> None:
            moved.append(await scale_down(broker, targets))

        log.info("scaling down to %s", ", ".join(targets) or "nowhere (no target configured)",
                 extra={"event": "scale_down.begin"})
        await broker.deactivate(timeout, reason="the broker scales down", code=int(DisconnectCode.SCALE_DOWN),
                                redirect=targets[0] if targets else None, before_close=migrate)
        if not (moved and moved[0]):
            broker.exit_code = 1


class _SharedStore(_Base):
    kind = "shared_store"

    def __init__(self, broker: NodeContext) -> None:
        super().__init__(broker)
        self.nodes = FileNodeManager(broker.config.data_dir)
        broker.node_id = self.nodes.node_id
        self._dir_lock = ServerLock(broker.config.data_dir)
        self._task: asyncio.Task | None = None

    async def _serve(self) -> None:
        """Holding the live lock: lock the directory against any other broker, recover, serve."""
        try:
            self._dir_lock.acquire()
        except DataDirLocked as exc:
            self.nodes.release(state=None)
            raise PetrelError(str(exc)) from None
        try:
            await self.broker.activate()
        except BaseException:
            self._dir_lock.release()
            self.nodes.release(state=None)
            raise
        self.nodes.set_state("L")
        self._set(LIVE)

    async def _leave(self, timeout: float, *, state: str | None, reason: str, code: int | None = None) -> None:
        await self.broker.deactivate(timeout, reason=reason, code=code)
        self._dir_lock.release()
        self.nodes.release(state=state)

    async def stop(self, timeout: float) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self.state == LIVE:
            handover = self.broker.config.ha_policy.failover_on_shutdown
            # failover_on_shutdown leaves the state L: the backup takes the lock and serves
            await self._leave(timeout, state=None if handover else PAUSED,
                              reason="the broker is shutting down" + ("; fail over to the backup" if handover else ""),
                              code=_failover_code() if handover else None)
            if handover:
                log.info("handing over to the backup (failover_on_shutdown)", extra={"event": "ha.handover"})
        else:
            self.nodes.release(state=None)
        self._set(STOPPED)


class SharedStorePrimary(_SharedStore):
    role = "primary"

    async def start(self) -> None:
        if not self.nodes.live_lock_free():
            self._set(FAILING_BACK_STATE)
            log.info("another node serves %s's shared store: asking it to give way (failback)",
                     self.broker.node_id, extra={"event": "ha.failback"})
        await self.nodes.start_primary()
        await self._serve()

    async def stop(self, timeout: float) -> None:
        if self.state != LIVE and not self.nodes.holds(LIVE_LOCK) and self.nodes.state() == FAILING_BACK:
            # stopped while waiting to fail back: the node that serves stays the live one (a
            # stale F would keep a restarted backup from ever taking over from it)
            self.nodes.set_state("L")
        await super().stop(timeout)


class SharedStoreBackup(_SharedStore):
    role = "backup"

    async def start(self) -> None:
        self._set(BACKUP)
        log.info("backup of node %s on the shared store %s: waiting for the live to fail",
                 self.broker.node_id, self.broker.config.data_dir, extra={"event": "ha.backup"})
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        policy = self.broker.config.ha_policy
        while True:
            await self.nodes.await_failover()
            t0 = time.monotonic()
            log.warning("the live of node %s is gone: taking over", self.broker.node_id,
                        extra={"event": "ha.failover"})
            try:
                await self._serve()
            except Exception as exc:
                log.error("could not take over: %s; waiting again", exc, extra={"event": "ha.failover_failed"})
                self._set(BACKUP)
                continue
            self.failovers += 1
            log.warning("live for node %s after %.2fs", self.broker.node_id, time.monotonic() - t0,
                        extra={"event": "ha.live"})
            if not policy.allow_failback:
                return
            while self.nodes.state() != FAILING_BACK:
                await asyncio.sleep(self.nodes.poll)
            log.warning("the primary of node %s is back: giving way (failback)", self.broker.node_id,
                        extra={"event": "ha.failback"})
            self._set(FAILING_BACK_STATE)
            await self._leave(10.0, state=None, reason="the primary is back (failback)", code=_failover_code())
            if not policy.restart_backup:
                self._set(STOPPED)
                log.info("restart_backup is false: this backup stays stopped", extra={"event": "ha.stopped"})
                return
            self._set(BACKUP)


def _failover_code() -> int:
    from petrel.codec.core import DisconnectCode

    return int(DisconnectCode.FAILOVER)


__all__ += ["LIVE_LOCK"]
