"""Replication's activations: a primary and a backup that keeps a copy over the network.

- :class:`ReplicationPrimary` serves (after the lock manager's claim, when one is set) and
  feeds one backup. With ``check_for_live_server`` it first looks for a node serving its
  node ID (its backup, which took over): it syncs from it as a backup would, asks it to give
  way, and serves from the fresh copy (failback), never from its stale journal.
- :class:`ReplicationBackup` registers with a live of its group, keeps the copy, and when it
  loses the live decides whether to take over: at once when the live handed over; through
  the lock manager's lock and activation sequence when one is set; else on a quorum of the
  other lives; a lone pair without a lock manager stays a backup (``lone_pair_failover``
  overrides, at the risk of split brain). Once live it feeds a backup in turn, and gives way
  to a returning primary (``allow_failback``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from petrel.errors import PetrelError
from petrel.ha.activation import BACKUP, LIVE, STARTING, STOPPED, _Base
from petrel.ha.lock_activation import LockManagerSide
from petrel.ha.replication_backup import SYNCING, BackupSide
from petrel.ha.replication import Replicator
from petrel.storage.server_lock import DataDirLocked, ServerLock

if TYPE_CHECKING:
    from petrel.server.node import NodeContext

__all__ = ["replication_activation", "ReplicationPrimary", "ReplicationBackup"]

log = logging.getLogger("petrel.ha")

#: Seconds between the two votes of a live that lost its backup (see `_vote_to_stay`).
VOTE_SETTLE = 1.0



def replication_activation(broker: NodeContext):
    if broker.config.ha_policy.replication == "primary":
        return ReplicationPrimary(broker)
    return ReplicationBackup(broker)


class _Replicated(LockManagerSide, BackupSide, _Base):
    """What both roles share: the lock on the data directory, the lock manager, and, while
    live, feeding a backup."""

    kind = "replication"

    def __init__(self, broker: NodeContext) -> None:
        super().__init__(broker)
        self.policy = broker.config.ha_policy
        self._dir_lock: ServerLock | None = None
        self.replicator: Replicator | None = None
        self.last_replica: dict | None = None
        self.client = None  # the ReplicaClient while this node is a backup
        self._task: asyncio.Task | None = None
        self.lock_manager = None
        self.zk_activation = None  # the lock manager's Activation while live
        self.live_connector: str | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- the data directory -----------------------------------------------------------------------------

    def _lock_dir(self) -> str:
        self._dir_lock = ServerLock(self.broker.config.data_dir)
        try:
            return self._dir_lock.acquire()
        except DataDirLocked as exc:
            raise PetrelError(str(exc)) from None

    def _unlock_dir(self) -> None:
        if self._dir_lock is not None:
            self._dir_lock.release()
            self._dir_lock = None

    # -- serving and feeding a backup ----------------------------------------------------------------

    async def _serve(self) -> None:
        self.broker.node_id = self._lock_dir() if self._dir_lock is None else self.broker.node_id
        try:
            await self.broker.activate()
        except BaseException:
            self._unlock_dir()
            raise
        self._set(LIVE)

    @property
    def backup_connector(self) -> str | None:
        r = self.replicator
        return r.connector if r is not None and r.state in ("syncing", "in-sync") else None

    def accept_backup(self, adapter, e) -> tuple[str | None, dict]:
        if self.state != LIVE or self.broker.store is None:
            return f"this node is not live (it is {self.state})", {}
        if e.twin and e.node_id != self.broker.node_id:
            return f"this live serves node {self.broker.node_id}, not {e.node_id}", {}
        if self.policy.group_name and e.group_name and e.group_name != self.policy.group_name:
            return f"this live is in group {self.policy.group_name!r}, the backup in {e.group_name!r}", {}
        current = self.replicator
        if current is not None and current.state in ("syncing", "in-sync") and not current.adapter.conn.closed:
            return f"this live already has a backup ({current.connector})", {}
        if self.broker.store.stream is None:
            return "this live keeps nothing on disk (persistence_enabled = false)", {}
        replicator = Replicator(self.broker.store, adapter, backup_node=e.node_id, connector=e.connector,
                                on_lost=self._replica_lost)
        adapter.replicator = replicator
        self.replicator = replicator
        cluster = self.broker.cluster
        others = []
        if cluster is not None:
            others = [m.connector for m in cluster._members() if m.node_id != self.broker.node_id]
        data = {"node_id": self.broker.node_id, "members": others,
                "cluster_size": cluster.largest_size if cluster is not None else 1,
                "connector": cluster.connector if cluster is not None else ""}
        if cluster is not None:
            cluster._members_changed()  # clients learn the backup
        return None, data

    def _replica_lost(self, replicator: Replicator, reason: str) -> None:
        self.last_replica = replicator.describe()
        if self.replicator is replicator:
            self.replicator = None
        if self.broker.cluster is not None:
            self.broker.cluster._members_changed()
        if (self.zk_activation is None or replicator.state != "lost" or replicator.synced_at is None
                or replicator.handing_over):
            if (self.policy.vote_on_replication_failure and self.zk_activation is None
                    and replicator.state == "lost" and not replicator.handing_over):
                self._spawn(self._vote_to_stay(replicator))
                return
            replicator.release_waiters()
            return
        self._spawn(self._claim_then_release(replicator))

    async def _vote_to_stay(self, replicator: Replicator) -> None:
        """vote_on_replication_failure: a live that lost its backup asks the other lives whether
        they still see it. If a quorum of them does not, this live is the one cut off (its backup
        may be taking over): it stops serving, holding what it had not confirmed, and waits as a
        backup. Otherwise it goes on alone."""
        from petrel.ha import quorum

        config = self.broker.config
        cluster = self.broker.cluster
        voters = [m.connector for m in cluster._members() if m.node_id != self.broker.node_id] if cluster else []
        size = self.policy.quorum_size if self.policy.quorum_size > 0 else (cluster.largest_size if cluster else 1)
        if not voters or size <= 1:
            log.warning("vote_on_replication_failure: no other lives to ask; going on alone",
                        extra={"event": "ha.vote"})
            replicator.release_waiters()
            return
        async def count_seen() -> int:
            # about this process: its backup, if it took over, runs under the same node ID
            ballots = await quorum.ask(voters, self.broker.node_id, config.cluster_user, config.cluster_password,
                                       self.policy.quorum_vote_wait / 1000, unique_id=cluster.unique_id,
                                       tls=self.broker.tls.link_context)
            return sum(1 for b in ballots if b.gone is False)

        seen = await count_seen()
        if seen >= quorum.votes_needed(size):
            # Links cut at once close one after another: a vote taken as the backup's closed can
            # find the other lives still holding theirs to a node that is cut off from them all
            # (a clean-clone CI run saw it: "2 other lives still see this node", then both links
            # closed within 2 ms). Ask once more when they have settled; both votes must agree.
            await asyncio.sleep(min(VOTE_SETTLE, self.policy.vote_retry_wait / 1000))
            seen = min(seen, await count_seen())
        if seen >= quorum.votes_needed(size):
            log.warning("lost the backup; %d other lives still see this node: it goes on alone", seen,
                        extra={"event": "ha.vote"})
            replicator.release_waiters()
            return
        log.error("lost the backup and only %d other lives see this node (%d needed): this node may be the one "
                  "cut off, so it stops serving and waits as a backup", seen, quorum.votes_needed(size),
                  extra={"event": "ha.isolated"})
        await self._leave_live(reason="this node lost its backup and the quorum")
        replicator.release_waiters()  # their connections are closed: nothing is confirmed
        self._spawn(self._run_backup_loop())

    async def _claim_then_release(self, replicator: Replicator) -> None:
        """Move the activation sequence on before confirming anything the lost backup lacks: it
        can never activate on that stale copy."""
        from petrel.ha.activation_sequence import replica_lost

        try:
            await asyncio.get_running_loop().run_in_executor(None, replica_lost, self.zk_activation,
                                                             self.broker.config.data_dir)
        except Exception as exc:
            log.error("could not move the activation sequence on after losing the backup (%s): this node "
                      "stops serving", exc, extra={"event": "ha.lock_lost"})
            await self._leave_live(reason="this node could not keep its lock manager lease")
            replicator.release_waiters()  # they fail with the closed connections
            self._spawn(self._after_lost_lock())
            return
        replicator.release_waiters()

    def failback_requested(self, replicator: Replicator) -> None:
        if not self.policy.allow_failback and self.role == "backup":
            log.warning("the primary asks for failback but allow_failback = false: staying live")
            return
        log.warning("the primary of node %s is back and in sync: giving way (failback)", self.broker.node_id,
                    extra={"event": "ha.failback"})
        self._spawn(self._give_way(replicator))

    async def _give_way(self, replicator: Replicator) -> None:
        await self._hand_over(replicator, fail_over=True, reason="the primary is back (failback)")
        if self.role == "backup" and not self.policy.restart_backup:
            self._set(STOPPED)
            return
        await self._run_backup_loop()

    async def _hand_over(self, replicator: Replicator | None, *, fail_over: bool, reason: str,
                         timeout: float = 10.0) -> None:
        """Stop serving; the backup gets everything up to the last write, then the word to take over."""
        keep = {replicator.adapter.conn} if replicator is not None and replicator.state == "in-sync" else set()
        from petrel.codec.core import DisconnectCode

        code = int(DisconnectCode.FAILOVER) if fail_over and keep else None
        store = self.broker.store
        await self.broker.deactivate(timeout, reason=reason, code=code, keep=keep)
        if keep:
            replicator.stopping(fail_over)
            deadline = time.monotonic() + self.policy.initial_replication_sync_timeout / 1000
            final = store.stream.seq
            while replicator.acked_seq < final and replicator.state == "in-sync" and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            handed = replicator.acked_seq >= final
            log.info("backup %s has %s (%d of %d operations)", replicator.backup_node,
                     "everything" if handed else "NOT everything", replicator.acked_seq, final,
                     extra={"event": "ha.handover" if handed else "ha.handover_incomplete"})
            replicator.stop()
            replicator.adapter.conn.close()
        elif replicator is not None:
            replicator.stop()
        self.replicator = None
        self._release_zk()
        self._unlock_dir()
        self._set(BACKUP)

    async def _leave_live(self, reason: str) -> None:
        """Stop serving because the lock is lost: nothing is claimed on the way out (the backup's
        loss is expected), the lock is let go, the directory unlocked."""
        activation, self.zk_activation = self.zk_activation, None
        replicator = self.replicator
        if replicator is not None:
            replicator.handing_over = True
        await self.broker.deactivate(10.0, reason=reason)
        if replicator is not None:
            replicator.stop()
        self.replicator = None
        self.zk_activation = activation
        self._release_zk()
        self._unlock_dir()
        self._set(BACKUP)

    def _release_zk(self) -> None:
        activation, self.zk_activation = self.zk_activation, None
        if activation is not None:
            try:
                activation.lock.unlock()
            except Exception:
                pass

    # -- views and stop ------------------------------------------------------------------------------------

    def describe(self) -> dict:
        view = super().describe()
        repl: dict = {"group_name": self.policy.group_name,
                      "lock_manager": self.policy.lock_manager.type if self.policy.lock_manager else None}
        if self.replicator is not None:
            repl["backup"] = self.replicator.describe()
        elif self.last_replica is not None:
            repl["backup"] = {**self.last_replica, "state": "lost"}
        if self.client is not None:
            repl["live"] = self.client.describe()
        view["replication"] = repl
        if self.broker.colocated is not None:
            view["colocated"] = self.broker.colocated.describe()
        return view

    async def stop(self, timeout: float) -> None:
        for task in list(self._tasks) + ([self._task] if self._task else []):
            task.cancel()
        if self.client is not None:
            self.client.close()
        for task in list(self._tasks) + ([self._task] if self._task else []):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self.state == LIVE:
            handover = self.policy.failover_on_shutdown
            await self._hand_over(self.replicator, fail_over=handover,
                                  reason="the broker is shutting down" + ("; fail over to the backup" if handover
                                                                          else ""), timeout=timeout)
        self._release_zk()
        self._unlock_dir()
        if self.lock_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.lock_manager.stop)
        self._set(STOPPED)


class ReplicationPrimary(_Replicated):
    role = "primary"

    async def start(self) -> None:
        self.broker.node_id = self._lock_dir()
        try:
            await self._start_lock_manager()
            if await self._fail_back():  # never serve stale data while another node serves this ID
                return
            if self.policy.lock_manager is not None:
                from petrel.ha.activation_sequence import StaleActivationSequence

                try:
                    free = await self._zk_activate(self.broker.node_id)
                except StaleActivationSequence as exc:
                    free = False
                    log.warning("%s", exc, extra={"event": "ha.stale"})
                if not free:
                    # another broker serves this node ID (this primary could not reach it just now):
                    # wait as its backup, never serve this stale copy
                    log.warning("node %s is served by another broker (its lock is held): this primary waits as "
                                "its backup", self.broker.node_id, extra={"event": "ha.primary_as_backup"})
                    self._set(BACKUP)
                    self._spawn(self._run_backup_loop())
                    return
            await self._serve()
        except BaseException:
            self._unlock_dir()
            if self.lock_manager is not None:
                self.lock_manager.stop()
            raise

    async def _fail_back(self) -> bool:
        """Look for a node serving this node ID (the backup, which took over while this primary was
        away): with check_for_live_server, sync from it and take over (failback); without, wait as
        its backup rather than serve stale data. False: none found, this primary may serve."""
        take_back = self.policy.check_for_live_server
        for connector in self._connectors():
            self._set(SYNCING)
            outcome = await self._sync_from(connector, twin=True, request_failback=take_back)
            if not outcome.accepted:
                continue
            if take_back and outcome.kind == "fail-over" and outcome.in_sync:
                if self.policy.lock_manager is not None and not await self._zk_activate(self.broker.node_id):
                    raise PetrelError("failback: the node that gave way still holds the lock")
                self._set(STARTING)
                await self._take_over()
                return True
            if not take_back:
                log.warning("node %s is served by %s: this primary's data is stale, so it waits as a backup "
                            "(set check_for_live_server = true to take over once in sync)", self.broker.node_id,
                            connector, extra={"event": "ha.primary_as_backup"})
            self._spawn(self._after_twin(outcome))
            return True
        self._set(STARTING)
        return False

    async def _after_twin(self, outcome) -> None:
        """Carry on as a backup after a first copy from the twin (it went, or gave way)."""
        if outcome.in_sync and await self._may_take_over(outcome):
            await self._take_over()
            return
        await self._run_backup_loop()


class ReplicationBackup(_Replicated):
    role = "backup"

    async def start(self) -> None:
        self.broker.node_id = self._lock_dir()
        self._set(BACKUP)
        try:
            await self._start_lock_manager()
        except BaseException:
            self._unlock_dir()
            raise
        if self.policy.lock_manager is None and not self.policy.lone_pair_failover:
            log.warning("replication backup without a lock manager: it takes over only when its live hands over "
                        "or a quorum of other lives agrees; in a lone pair it never takes over by itself. For a "
                        "pair that fails over safely on its own, configure [ha_policy] lock_manager (ZooKeeper)",
                        extra={"event": "ha.no_lock_manager"})
        elif self.policy.lone_pair_failover and self.policy.lock_manager is None:
            log.warning("lone_pair_failover = true without a lock manager: if the live is only cut off from this "
                        "backup, both will serve (split brain)", extra={"event": "ha.split_brain_risk"})
        self._spawn(self._run_backup_loop())
