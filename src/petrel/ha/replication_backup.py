"""Being a replication backup (a mixin of the replication activations): find a live of the
group, keep a copy of its data directory, and decide whether to take over when it is lost —
at once when it handed over, through the lock manager when there is one, else on a quorum of
the other lives, or alone for a lone pair with ``lone_pair_failover``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from petrel.ha import quorum
from petrel.ha.activation import BACKUP

__all__ = ["BackupSide", "SYNCING", "KEEP"]

log = logging.getLogger("petrel.ha")

SYNCING = "syncing"
RETRY_WAIT = 1.0  # s between attempts to find a live (Artemis retry-replication-wait: 2 s)
KEEP = ("server.lock",)  # kept in place when old data is set aside (the process holds its lock)


class BackupSide:
    def _connectors(self) -> list[str]:
        config = self.broker.config
        out = []
        for cc in config.cluster_connections:
            out.extend(config.connector_url(c) for c in cc.static_connectors)
        own = self._own_connector()
        return [c for c in dict.fromkeys(out) if c != own]

    def _own_connector(self) -> str:
        config = self.broker.config
        cc = config.cluster_connections[0] if config.cluster_connections else None
        if cc is not None and cc.connector:
            return config.connector_url(cc.connector)
        host = "127.0.0.1" if config.host in ("0.0.0.0", "", "::") else config.host
        return f"{host}:{config.listen_port()}"

    async def _sync_from(self, connector: str, *, twin: bool = False, request_failback: bool = False):
        from petrel.ha.replica_client import ReplicaClient
        from petrel.storage.replica import ReplicaDirectory

        config = self.broker.config
        directory = ReplicaDirectory(config.data_dir)
        saved = self.policy.max_saved_replicated_journals_size
        saved = saved if saved >= 0 else 1 << 30

        def set_aside() -> None:  # the live took this backup: its copy starts from scratch
            directory.set_aside(saved, keep=KEEP)

        client = ReplicaClient(connector=connector, directory=directory, node_id=self.broker.node_id,
                               group_name=self.policy.group_name, user=config.cluster_user,
                               password=config.cluster_password, own_connector=self._own_connector(),
                               twin=twin, request_failback=request_failback, on_accepted=set_aside,
                               on_in_sync=lambda: self._set(BACKUP), tls=self.broker.tls.link_context)
        self.client = client
        try:
            return await client.run()
        finally:
            self.client = None

    async def _run_backup_loop(self) -> None:
        """Keep a copy of a live until this node must take over; then serve."""
        self._set(BACKUP)
        if self._dir_lock is None:
            self.broker.node_id = self._lock_dir()
        copy = None  # the last complete copy, while the directory still holds it
        while True:
            outcome = None
            for connector in self._connectors():
                outcome = await self._sync_from(connector, twin=self.role == "primary")
                if outcome.accepted or outcome.kind == "stopped":
                    break
                log.debug("%s did not take this backup: %s", connector, outcome.reason)
            self._set(BACKUP)
            if outcome is not None and outcome.kind == "stopped":
                return
            if outcome is not None and outcome.accepted:
                copy = outcome if outcome.in_sync else None
            if copy is not None:
                if await self._may_take_over(copy, again=outcome is not copy):
                    break
                if copy.kind == "live-stopped":
                    copy = None  # a live that stopped on purpose is waited for, whatever happens next
            await asyncio.sleep(RETRY_WAIT)
        await self._take_over()

    async def _may_take_over(self, outcome, *, again: bool = False) -> bool:
        """Whether this backup, holding a complete copy, takes over from the live it lost (``again``:
        asked anew, the live still unreachable)."""
        node = outcome.live_node_id
        if outcome.kind == "live-stopped":
            log.warning("the live of node %s stopped without handing over: staying a backup (it takes over "
                        "only from a live that fails, or that stops with failover_on_shutdown = true)", node,
                        extra={"event": "ha.stay_backup"})
            return False
        if outcome.kind == "fail-over":
            log.warning("the live of node %s handed over: taking over", node, extra={"event": "ha.failover"})
            return not self.policy.lock_manager or await self._zk_activate(node)
        if outcome.kind != "lost":
            return False
        if not again:
            log.warning("lost the live of node %s (%s)", node, outcome.reason, extra={"event": "ha.live_lost"})
        if self.policy.lock_manager is not None:
            from petrel.ha.activation_sequence import StaleActivationSequence
            from petrel.ha.lock_manager import LockManagerUnavailable

            try:
                ok = await self._zk_activate(node)
            except StaleActivationSequence as exc:
                log.warning("%s; staying a backup", exc, extra={"event": "ha.stale"})
                return False
            except LockManagerUnavailable as exc:
                log.warning("cannot reach the lock manager (%s); staying a backup", exc,
                            extra={"event": "ha.lock_manager_lost"})
                return False
            if not ok and not again:
                log.warning("node %s's lock is still held: its live is alive (or its session not yet expired); "
                            "staying a backup", node, extra={"event": "ha.stay_backup"})
            return ok
        # every node this backup knows of, but itself and the lost live: the lives among them vote
        # (the live's members when it took this backup, and the configured connectors, which also
        # name lives that joined later)
        skip = {self._own_connector(), outcome.connector}
        voters = [c for c in dict.fromkeys([*outcome.data.get("members", []), *self._connectors()]) if c not in skip]
        known = int(outcome.data.get("cluster_size", 1))
        config = self.broker.config
        for attempt in range(self.policy.vote_retries + 1):
            ballots = await quorum.ask(voters, node, config.cluster_user, config.cluster_password,
                                       self.policy.quorum_vote_wait / 1000, tls=self.broker.tls.link_context)
            answered = [b for b in ballots if b.gone is not None]
            if self.policy.quorum_size > 0:
                size = self.policy.quorum_size
            else:  # the largest cluster of lives anyone has seen, the lost live included
                size = max([known, *(b.cluster_size for b in answered)])
            if size <= 1 and not answered:
                return self._lone_pair(node, again)
            needed = quorum.votes_needed(size)
            gone = sum(1 for b in answered if b.gone)  # the other lives' views: this backup's own is no vote
            if gone >= needed:
                log.warning("quorum: %d of the other lives say node %s is gone (%d needed): taking over", gone,
                            node, needed, extra={"event": "ha.failover"})
                return True
            log.warning("quorum not reached (%d of %d needed say node %s is gone; %d of %d asked answered)", gone,
                        needed, node, len(answered), len(voters), extra={"event": "ha.vote"})
            if attempt < self.policy.vote_retries:
                # the voters may not have noticed the death yet (it is a matter of milliseconds):
                # ask again soon, then every vote_retry_wait
                await asyncio.sleep(min(self.policy.vote_retry_wait / 1000, 0.1 * 2 ** attempt))
        return False

    def _lone_pair(self, node: str, again: bool) -> bool:
        if self.policy.lone_pair_failover:
            log.warning("a lone pair: taking over without a vote (lone_pair_failover = true; if the live is "
                        "only cut off, both now serve node %s)", node, extra={"event": "ha.failover"})
            return True
        if not again:
            log.error("cannot tell whether the live of node %s died or is cut off: no lock manager and no other "
                      "lives to vote; staying a backup. Configure [ha_policy] lock_manager (ZooKeeper), or run "
                      "at least 3 pairs, or set lone_pair_failover = true to accept the risk of split brain",
                      node, extra={"event": "ha.no_quorum"})
        return False

    async def _take_over(self) -> None:
        t0 = time.monotonic()
        self._unlock_dir()  # _serve locks it again and reads the node ID the copy holds now
        self._dir_lock = None
        await self._serve()
        self.failovers += 1
        log.warning("live for node %s after %.2fs", self.broker.node_id, time.monotonic() - t0,
                    extra={"event": "ha.live"})
