"""``[ha_policy]`` in ``broker.toml``: how a broker pairs with a backup (Artemis ``<ha-policy>``).

One of three kinds, named by the key that is set::

    [ha_policy]
    shared_store = "primary"          # or "backup": one data directory on a shared filesystem
    failover_on_shutdown = true

    [ha_policy]
    replication = "backup"            # or "primary": the backup keeps a copy over the network
    group_name = "pair-a"
    lock_manager = { type = "zookeeper", connect_string = "zk1:2181,zk2:2181,zk3:2181" }

    [ha_policy]
    live_only = true                  # the default: no backup (scale_down is for issue 11)

Names and defaults are Artemis's; durations are in milliseconds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["HaPolicyModel", "LockManagerModel", "ColocatedModel", "ScaleDownModel"]

Role = Literal["primary", "backup"]


class LockManagerModel(BaseModel):
    """A distributed lock per node ID plus an activation sequence: no two lives, no stale backup."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["zookeeper"] = "zookeeper"
    connect_string: str = Field(min_length=1, description="host:port[,host:port...] of the ZooKeeper ensemble")
    session_ms: int = Field(18000, ge=1000, description="ms; a holder silent this long loses the lock")
    session_percent: int = Field(33, ge=1, le=100, description="percent of session_ms between heart-beats")
    connection_ms: int = Field(8000, ge=100, description="ms to wait for ZooKeeper at start")
    retries: int = Field(1, ge=0)
    retries_ms: int = Field(1000, ge=0)
    namespace: str = Field("petrel", min_length=1, description="root znode of this cluster's locks")


class ColocatedModel(BaseModel):
    """Every live also hosts a backup of another live (Artemis ``<colocated>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_backup: bool = False
    backup_request_retries: int = Field(-1, ge=-1)
    backup_request_retry_interval: int = Field(5000, ge=1)
    max_backups: int = Field(1, ge=0)
    backup_port_offset: int = Field(
        100, ge=0, description="added to the host's ports for its n-th backup (times n); 0 = free ports picked at start")


class ScaleDownModel(BaseModel):
    """On a graceful stop, move every message to a live target first (live_only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    connectors: list[str] = Field(default_factory=list)
    discovery_group: str | None = None
    group_name: str | None = None


class HaPolicyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shared_store: Role | None = Field(None, description="primary | backup on one shared data directory")
    replication: Role | None = Field(None, description="primary | backup keeping a copy over the network")
    live_only: bool = Field(False, description="no backup (the default)")

    failover_on_shutdown: bool = Field(
        False, description="a graceful stop of the active node hands over to its backup")
    allow_failback: bool = Field(
        True, description="an active backup gives way to its primary when the primary returns")
    restart_backup: bool = Field(
        True, description="a backup that gave way (failback) waits as a backup again instead of exiting")
    check_for_live_server: bool = Field(
        False, description="replication primary: before activating, sync from a backup active under "
        "this node ID, then take over from it (failback)")
    group_name: str | None = Field(None, description="pairs a backup only with a primary of the same group")
    initial_replication_sync_timeout: int = Field(
        30000, ge=1, description="ms the live waits for its backup to confirm the end of the initial copy")
    max_saved_replicated_journals_size: int = Field(
        2, ge=-1, description="old replicas a backup keeps aside when it syncs anew (-1 = all)")
    vote_on_replication_failure: bool = Field(
        False, description="a live that loses its backup asks the cluster whether it may stay live")
    quorum_size: int = Field(-1, ge=-1, description="votes that decide (-1 = from the largest cluster seen)")
    vote_retries: int = Field(12, ge=0)
    vote_retry_wait: int = Field(5000, ge=1, description="ms between votes")
    quorum_vote_wait: int = Field(30000, ge=1, description="ms to wait for the votes of one round")
    lone_pair_failover: bool = Field(
        False, description="without a lock manager or other lives to vote, a replication backup takes "
        "over when it loses its live (this risks split brain; Artemis does it silently)")
    lock_manager: LockManagerModel | None = None
    colocated: ColocatedModel | None = None
    scale_down: ScaleDownModel | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> HaPolicyModel:
        kinds = [k for k, on in (("shared_store", self.shared_store), ("replication", self.replication),
                                 ("live_only", self.live_only)) if on]
        if len(kinds) > 1:
            raise ValueError(f"set one of shared_store, replication, live_only (got {', '.join(kinds)})")
        if self.lock_manager is not None and self.replication is None:
            raise ValueError("lock_manager: only a replication pair uses a lock manager")
        if self.colocated is not None and self.replication != "primary":
            raise ValueError("colocated: only a replication primary hosts backups of other lives")
        if self.scale_down is not None and not self.is_live_only:
            raise ValueError("scale_down: only a live_only broker scales down")
        return self

    @property
    def kind(self) -> str:
        if self.shared_store:
            return "shared_store"
        if self.replication:
            return "replication"
        return "live_only"

    @property
    def role(self) -> str:
        """primary, backup, or live (live_only)."""
        return self.shared_store or self.replication or "live"

    @property
    def is_live_only(self) -> bool:
        return self.shared_store is None and self.replication is None
