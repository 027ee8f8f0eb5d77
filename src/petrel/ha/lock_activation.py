"""The lock manager's part in replication (a mixin of the replication activations).

With ``[ha_policy] lock_manager`` a node takes its node ID's distributed lock and claims the
next activation sequence before it serves (:mod:`petrel.ha.activation_sequence`); it keeps
serving only while the lock holds, and serves again once it has it back with current data.
"""

from __future__ import annotations

import asyncio
import logging
import time

from petrel.ha.activation import LIVE

__all__ = ["LockManagerSide"]

log = logging.getLogger("petrel.ha")

RETRY_WAIT = 1.0  # s between attempts to take the lock back


class LockManagerSide:
    async def _start_lock_manager(self) -> None:
        model = self.policy.lock_manager
        if model is None or self.lock_manager is not None:
            return
        from petrel.ha.zookeeper import ZooKeeperLockManager

        manager = ZooKeeperLockManager(model.connect_string, session_ms=model.session_ms,
                                       connection_ms=model.connection_ms, retries=model.retries,
                                       retries_ms=model.retries_ms, namespace=model.namespace)
        await asyncio.get_running_loop().run_in_executor(None, manager.start, model.connection_ms / 1000)
        loop = asyncio.get_running_loop()
        manager.add_unavailable_listener(lambda *_: loop.call_soon_threadsafe(self._lock_manager_lost))
        self.lock_manager = manager

    def _lock_manager_lost(self) -> None:
        if self.state == LIVE and self.zk_activation is not None:
            log.error("the lock manager is unreachable (ZooKeeper session suspended or lost): node %s keeps "
                      "serving only while its lock holds; check ZooKeeper", self.broker.node_id,
                      extra={"event": "ha.lock_manager_lost"})
            self._spawn(self._check_lock_held())

    async def _check_lock_held(self) -> None:
        """While the session is down, look whether the lock is still ours; once it is not, stop serving
        (another node may take over), and start again as what this node is."""
        activation = self.zk_activation
        # ZooKeeper expires the session session_ms after the last heart-beat; leaving well before that
        # keeps a taking-over backup from ever overlapping with this live
        grace = self.policy.lock_manager.session_ms / 3000
        unheld_since = None
        while self.state == LIVE and activation is self.zk_activation:
            held = await asyncio.get_running_loop().run_in_executor(None, activation.lock.held)
            now = time.monotonic()
            if held:
                unheld_since = None
                if self.lock_manager.connected:
                    return
            elif unheld_since is None:
                unheld_since = now
            if unheld_since is not None and now - unheld_since >= grace:
                log.error("node %s lost its lock: it stops serving so that no two nodes serve it",
                          self.broker.node_id, extra={"event": "ha.lock_lost"})
                await self._leave_live(reason="this node lost its lock manager lease")
                self._spawn(self._after_lost_lock())
                return
            await asyncio.sleep(0.05)

    async def _after_lost_lock(self) -> None:
        """Serve again once the lock is ours again with this node's data current; if another node
        took over meanwhile (the data here is stale), become its backup."""
        from petrel.ha.activation_sequence import StaleActivationSequence
        from petrel.ha.lock_manager import LockManagerUnavailable

        node = self.broker.node_id
        while True:
            try:
                if await self._zk_activate(node):
                    await self._serve()
                    log.warning("node %s serves again (its lock is back)", node, extra={"event": "ha.live"})
                    return
                log.warning("node %s's lock is held by another broker (its backup took over): becoming its "
                            "backup", node, extra={"event": "ha.stale"})
                break
            except StaleActivationSequence as exc:
                log.warning("%s: becoming its backup", exc, extra={"event": "ha.stale"})
                break
            except LockManagerUnavailable:
                pass
            await asyncio.sleep(RETRY_WAIT)
        await self._run_backup_loop()

    async def _zk_activate(self, node_id: str) -> bool:
        """Take node_id's lock and claim the next activation sequence; False when another node holds it."""
        from petrel.ha.activation_sequence import activate

        loop = asyncio.get_running_loop()
        timeout = max(self.policy.lock_manager.session_ms / 1000 * 1.5, 2.0)
        result = await loop.run_in_executor(None, activate, self.lock_manager, node_id,
                                            self.broker.config.data_dir, timeout)
        if result is None:
            return False
        self.zk_activation = result
        return True

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("HA task failed: %s; this node neither serves nor follows a live now: restart it",
                      task.exception(), exc_info=task.exception(), extra={"event": "ha.task_failed"})
