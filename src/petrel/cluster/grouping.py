"""Clustered message grouping: every message of a group goes to the one queue that owns it,
whichever node it was sent to (Artemis `LocalGroupingHandler` / `RemoteGroupingHandler`).

One node runs the LOCAL handler: it holds the decisions, group -> binding. Every other node
runs a REMOTE handler that asks the LOCAL one (GROUP_PROPOSE, proposing the binding its own
load balancing would pick) and caches the answer. A send of a grouped message whose group a
REMOTE node has not heard a decision for waits, holding its connection, for up to `timeout`
ms; without an answer it fails with an error that names the LOCAL handler. Decisions name
bindings cluster-wide as ``queue@node-id``. With `group_timeout` > 0, a group unused that
long is forgotten (swept every `reaper_period`), and the REMOTE nodes are told.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.cluster.config import GroupingHandlerModel
from petrel.codec.core.cluster import GroupDecision, GroupPropose
from petrel.core.message import GROUP_ID, Message, RoutingType
from petrel.core.queue import Queue
from petrel.core.remote import RemoteBinding

if TYPE_CHECKING:
    from petrel.cluster.connection import ClusterConnection

__all__ = ["GroupingHandler"]

log = logging.getLogger("petrel.cluster.grouping")

Decided = Callable[[str | None], None]  # the decided key, or None: no decision in time


class GroupingHandler:
    def __init__(self, cluster: ClusterConnection, model: GroupingHandlerModel) -> None:
        self.cluster = cluster
        self.model = model
        self.is_local = model.type == "LOCAL"
        self.decisions: dict[tuple[str, str], str] = {}  # (address, group) -> "queue@node"
        self.used: dict[tuple[str, str], float] = {}
        self._waiting: dict[tuple[str, str], list[Decided]] = {}
        self._corr = 1000  # clear of the bridge handshake's correlation ids
        self._reaper: asyncio.TimerHandle | None = None
        if model.group_timeout > 0:
            self._schedule_reaper()

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for callbacks in self._waiting.values():
            for cb in callbacks:
                cb(None)
        self._waiting.clear()

    # -- what the post office asks --------------------------------------------------------------

    def covers(self, message: Message) -> bool:
        return message.properties.get(GROUP_ID) is not None and message.address.startswith(self.model.address)

    def route(self, message: Message, proposal: Queue | RemoteBinding | None) -> Queue | RemoteBinding | None:
        """The binding a grouped message must go to (deciding it here on the LOCAL node)."""
        group = str(message.properties[GROUP_ID])
        slot = (message.address, group)
        key = self.decisions.get(slot)
        target = self.resolve(key) if key is not None else None
        if target is None and self.is_local and proposal is not None:
            key = self.global_key(proposal)
            self.decisions[slot] = key
            target = proposal
            log.debug("group %s on %s owned by %s", group, message.address, key)
        if target is not None:
            self.used[slot] = time.monotonic()
        return target

    def needs_decision(self, message: Message) -> bool:
        """A REMOTE node that must ask before routing this message."""
        if self.is_local or not self.covers(message):
            return False
        key = self.decisions.get((message.address, str(message.properties[GROUP_ID])))
        return key is None or self.resolve(key) is None

    # -- keys ------------------------------------------------------------------------------------

    def global_key(self, binding: Queue | RemoteBinding) -> str:
        if isinstance(binding, Queue):
            return f"{binding.name}@{self.cluster.node_id}"
        return f"{binding.name}@{binding.origin}"

    def resolve(self, key: str) -> Queue | RemoteBinding | None:
        name, _, node = key.rpartition("@")
        office = self.cluster.office
        if node == self.cluster.node_id:
            return office.queues.get(name)
        return office.remote_bindings.get(key)

    # -- asking the LOCAL handler (REMOTE nodes) -----------------------------------------------

    def ask(self, message: Message, decided: Decided, routing_type: RoutingType | None = None) -> None:
        """Ask the LOCAL handler who owns the message's group; `decided(key or None)` follows."""
        group = str(message.properties[GROUP_ID])
        slot = (message.address, group)
        waiting = self._waiting.get(slot)
        if waiting is not None:
            waiting.append(decided)
            return
        self._waiting[slot] = [decided]
        office = self.cluster.office
        proposal = office.propose_binding(message, routing_type)
        bridge = self._local_bridge()
        if bridge is None or proposal is None:
            why = "no LOCAL grouping handler node is connected" if bridge is None else "no queue to propose"
            log.warning("grouped message for %s (group %s) cannot be routed: %s", message.address, group, why)
            asyncio.get_running_loop().call_soon(self._answer, slot, None)
            return
        self._corr += 1
        bridge.link.send(GroupPropose(self._corr, group, message.address, self.global_key(proposal)))
        asyncio.get_running_loop().call_later(self.model.timeout / 1000, self._expire, slot)

    def _local_bridge(self):
        for node_id, member in self.cluster.known.items():
            if member.grouping == "LOCAL":
                bridge = self.cluster.by_node.get(node_id)
                if bridge is not None and bridge.connected and bridge.link is not None:
                    return bridge
        return None

    def decision(self, event: GroupDecision) -> None:
        """An answer (or, with corr 0, a forgotten group) from the LOCAL handler."""
        slot = (event.address, event.group)
        if event.key is None:
            self.decisions.pop(slot, None)
        else:
            self.decisions[slot] = event.key
        self._answer(slot, event.key)

    def _expire(self, slot: tuple[str, str]) -> None:
        if slot in self._waiting:
            log.warning("no grouping decision for group %s on %s within %d ms", slot[1], slot[0],
                        self.model.timeout, extra={"event": "cluster.group_timeout"})
            self._answer(slot, None)

    def _answer(self, slot: tuple[str, str], key: str | None) -> None:
        for cb in self._waiting.pop(slot, ()):
            cb(key)

    # -- answering REMOTE nodes (the LOCAL node) ---------------------------------------------------

    def propose_from_peer(self, e: GroupPropose) -> GroupDecision:
        slot = (e.address, e.group)
        key = self.decisions.get(slot)
        if key is None or (key != e.key and self.resolve(key) is None):
            key = e.key
            self.decisions[slot] = key
        self.used[slot] = time.monotonic()
        return GroupDecision(e.corr, e.group, e.address, key)

    def _schedule_reaper(self) -> None:
        self._reaper = asyncio.get_running_loop().call_later(self.model.reaper_period / 1000, self._reap)

    def _reap(self) -> None:
        horizon = time.monotonic() - self.model.group_timeout / 1000
        for slot in [s for s, t in self.used.items() if t < horizon]:
            self.used.pop(slot, None)
            self.decisions.pop(slot, None)
            if self.is_local:
                for adapter in list(self.cluster.peers):
                    adapter.cluster_send(GroupDecision(0, slot[1], slot[0], None))
        self._schedule_reaper()

    def describe(self) -> dict:
        return {"type": self.model.type, "groups": len(self.decisions), "waiting": len(self._waiting)}

