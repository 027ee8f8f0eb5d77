"""The cluster connection: this node's membership in a cluster (Artemis `ClusterConnectionImpl`).

It owns a bridge per peer (from static connectors, from the members peers report, and from
UDP discovery), accepts peers' joins (checking the cluster name and credentials), tells
joined peers the members and bindings they should know and keeps them up to date, turns the
bindings peers advertise into the post office's remote bindings, and pushes the topology to
CORE clients so they can spread their connections and fail over.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from typing import TYPE_CHECKING

from petrel.cluster.advertise import AddressFilter, advertised, binding_info
from petrel.cluster.bridge import Bridge, sf_queue_name
from petrel.cluster import remembered
from petrel.cluster.config import DEFAULT_CLUSTER_PASSWORD, DEFAULT_CLUSTER_USER, ClusterConnectionModel
from petrel.codec.core import Member
from petrel.codec.core.cluster import BindingInfo, Bindings, ClusterJoin, ClusterMember, ClusterMembers
from petrel.core.message import RoutingType
from petrel.core.remote import Balancing, RemoteBinding, remote_key
from petrel.core.selector import SelectorError, compile_selector

if TYPE_CHECKING:
    from petrel.core.queue import Queue
    from petrel.server.adapters.core import CoreAdapter
    from petrel.server.node import NodeContext

__all__ = ["ClusterConnection"]

log = logging.getLogger("petrel.cluster")


class _Peer:
    """A node that joined us: what it should hear about, and changes not yet sent."""

    __slots__ = ("node_id", "unique_id", "max_hops", "connector", "http", "upserts", "removed")

    def __init__(self, join: ClusterJoin) -> None:
        self.node_id = join.node_id
        self.unique_id = join.unique_id  # its process: new at every start
        self.max_hops = join.max_hops
        self.connector = join.connector
        self.http = join.http
        self.upserts: dict[str, BindingInfo] = {}
        self.removed: set[str] = set()


class ClusterConnection:
    def __init__(self, broker: NodeContext, model: ClusterConnectionModel) -> None:
        config = broker.config
        self.broker = broker
        self.model = model
        self.office = broker.office
        self.name = model.name
        self.node_id = broker.node_id
        self.unique_id = uuid.uuid4().hex
        # how others reach this node; without a configured connector, known once the broker listens
        self.connector = config.connector_url(model.connector) if model.connector else ""
        self.http: str | None = None
        self.filter = AddressFilter(model.address)
        self.bridges: list[Bridge] = []
        self.by_node: dict[str, Bridge] = {}
        self.peers: dict[CoreAdapter, _Peer] = {}
        self.known: dict[str, ClusterMember] = {}  # members heard of, by node id
        self.refused: dict[str, str] = {}  # node id -> why its last join was refused (logged once)
        self.grouping = None
        self.discovery = None
        self.broadcasts: list = []
        self._flush_scheduled = False
        self._topology_event = 0
        # Peers may join as soon as the broker listens, before `start`: the post office is
        # cluster-aware from here on.
        if config.grouping_handler is not None:
            from petrel.cluster.grouping import GroupingHandler

            self.grouping = GroupingHandler(self, config.grouping_handler)
        self.office.attach_cluster(self.node_id, Balancing(model.message_load_balancing), self, self.grouping)
        # the peers' bindings known before a restart, routed to until their bridges join
        self.absent: dict[str, remembered.Absent] = {}
        self._remembered_path = config.data_dir / remembered.FILE_NAME
        self._remembered: list[dict] = []
        self._save_scheduled = False
        self._restore()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Once the broker listens: connect to the seeds and start discovery."""
        config = self.broker.config
        if not self.connector:
            self.connector = _own_connector(self.broker)
        http = self.broker.ports.get("http")
        self.http = f"http://{_client_host(config.http_host)}:{http}" if http else None
        if config.cluster_user == DEFAULT_CLUSTER_USER or config.cluster_password == DEFAULT_CLUSTER_PASSWORD:
            log.warning("cluster_user/cluster_password are left at their defaults: any node knowing them can "
                        "join this cluster; set the same secret on every node", extra={"event": "cluster.insecure"})
        for ref in self.model.static_connectors:
            self._bridge_to(config.connector_url(ref))
        if self.model.discovery_group is not None:
            await self._start_discovery()
        for group in config.broadcast_groups:
            await self._start_broadcast(group)
        log.info("cluster connection %s started: node %s at %s, %d seed(s), load balancing %s, max hops %d",
                 self.name, self.node_id, self.connector, len(self.model.static_connectors),
                 self.model.message_load_balancing, self.model.max_hops, extra={"event": "cluster.started"})

    async def _start_discovery(self) -> None:
        from petrel.cluster.discovery import DiscoveryGroup

        model = next(g for g in self.broker.config.discovery_groups if g.name == self.model.discovery_group)
        self.discovery = DiscoveryGroup(model, self.node_id, self._discovered, key=await self._beacon_key())
        await self.discovery.start()

    async def _start_broadcast(self, group) -> None:
        from petrel.cluster.beacon import Announcement
        from petrel.cluster.discovery import BroadcastGroup

        config = self.broker.config
        connectors = tuple(config.connector_url(c) for c in group.connectors) or (self.connector,)
        broadcast = BroadcastGroup(group, Announcement(self.node_id, self.unique_id, self.name, connectors, self.http),
                                   key=await self._beacon_key())
        await broadcast.start()
        self.broadcasts.append(broadcast)

    async def _beacon_key(self):
        """The key announcements are sealed with (PBKDF2 of the cluster credentials, off the loop)."""
        from petrel.cluster.beacon_auth import BeaconKey

        config = self.broker.config
        return await asyncio.get_running_loop().run_in_executor(
            None, BeaconKey.derive, config.cluster_user, config.cluster_password)

    async def stop(self) -> None:
        for bridge in self.bridges:
            bridge.stop()
        if self.discovery is not None:
            await self.discovery.stop()
        for broadcast in self.broadcasts:
            await broadcast.stop()
        if self.grouping is not None:
            self.grouping.stop()
        self.office.detach_cluster()

    # -- bridges -------------------------------------------------------------------------------

    def _bridge_to(self, connector: str) -> Bridge | None:
        if connector == self.connector:
            return None
        for bridge in self.bridges:
            if bridge.connector == connector and bridge.state != "stopped":
                return bridge
        bridge = Bridge(self, connector)
        self.bridges.append(bridge)
        bridge.start()
        return bridge

    def bridge_identified(self, bridge: Bridge, node_id: str) -> bool:
        """The peer behind `bridge` answered with its node id; False: drop this bridge."""
        if not node_id or node_id == self.node_id:
            log.debug("connector %s is this node itself; no bridge", bridge.connector)
            self.bridges.remove(bridge)
            return False
        other = self.by_node.get(node_id)
        if other is not None and other is not bridge:
            if other.state != "stopped" and not other.connected and other.connector != bridge.connector:
                # the same node answers at another connector (its backup took over) while the old
                # bridge cannot reach it: the identified one wins
                log.info("node %s answers at %s now; its bridge to %s stops", node_id, bridge.connector,
                         other.connector, extra={"event": "cluster.node_moved"})
                other.stop()
            if other.state != "stopped" and (other.connected or other.state in ("joining", "connecting", "retrying")):
                log.debug("node %s is already bridged through %s; dropping %s", node_id, other.connector,
                          bridge.connector)
                self.bridges.remove(bridge)
                return False
            self._take_over(other, bridge)
        bridge.node_id = node_id
        self.by_node[node_id] = bridge
        name = sf_queue_name(self.name, node_id)
        queue = self.office.queues.get(name)
        if queue is None:
            queue = self.office.create_queue(name, name, RoutingType.ANYCAST, durable=True)
        bridge.sf_queue = queue
        absent = self.absent.pop(node_id, None)
        if absent is not None:  # bindings remembered from before a restart: through this bridge now
            for their_key, ours in absent.bindings.items():
                binding = self.office.remote_bindings.get(ours)
                if binding is not None and binding.link is absent:
                    binding.link = bridge
                    bridge.bindings.setdefault(their_key, ours)
        member = self.known.get(node_id)
        if member is not None:
            bridge.http = member.http
        return True

    def _take_over(self, old: Bridge, new: Bridge) -> None:
        """`new` replaces a bridge to the same node that stopped (its node fell silent) or gave
        up: the bindings learnt through `old` are reached through `new` now (its first snapshot
        then drops those that are gone), through the same store-and-forward queue."""
        office = self.office
        for their_key, ours in old.bindings.items():
            binding = office.remote_bindings.get(ours)
            if binding is not None and binding.link is old:
                binding.link = new
                new.bindings[their_key] = ours
        old.bindings.clear()
        if old.state == "stopped" and old in self.bridges:
            self.bridges.remove(old)

    def _bridged(self, node_id: str) -> bool:
        """A bridge to `node_id` exists and has not been stopped."""
        bridge = self.by_node.get(node_id)
        return bridge is not None and bridge.state != "stopped"

    def bridge_changed(self, bridge: Bridge) -> None:
        """A bridge came up or went down: the topology changed."""
        if bridge.connected:
            self.known.setdefault(bridge.node_id, ClusterMember(bridge.node_id, bridge.connector, bridge.http))
        self._members_changed()

    # -- joins (the accepting side) ----------------------------------------------------------------

    def check_join(self, join: ClusterJoin) -> str | None:
        config = self.broker.config
        if join.cluster != self.name:
            return f"cluster name {join.cluster!r} is not this node's {self.name!r}"
        good_user = hmac.compare_digest(join.user.encode(), config.cluster_user.encode())
        good_password = hmac.compare_digest(join.password.encode(), config.cluster_password.encode())
        if not (good_user and good_password):
            return "wrong cluster_user or cluster_password"
        if join.node_id == self.node_id:
            log.warning("duplicate node id %s: a node at %s has this node's id (a copied data directory?); "
                        "refused", join.node_id, join.connector, extra={"event": "cluster.duplicate_node"})
            return f"node id {join.node_id} is this node's own (duplicate node id)"
        return None

    def peer_joined(self, adapter: CoreAdapter, join: ClusterJoin) -> None:
        peer = _Peer(join)
        self.peers[adapter] = peer
        self.known[join.node_id] = ClusterMember(join.node_id, join.connector, join.http, None, join.grouping)
        log.info("node %s at %s joined", join.node_id, join.connector, extra={"event": "cluster.peer_joined"})
        adapter.cluster_send(ClusterMembers(self._members()))
        snapshot = [binding_info(b, self.node_id) for b in self._bindings() if self._for(b, peer)]
        adapter.cluster_send(Bindings(True, snapshot, []))
        bridge = self.by_node.get(join.node_id)
        if not self._bridged(join.node_id) and not self.model.allow_direct_connections_only:
            self._bridge_to(join.connector)
        elif (bridge is not None and not bridge.connected and bridge.connector != join.connector
              and not self.model.allow_direct_connections_only):
            # the node serves elsewhere now (its backup took over): a bridge there takes over the
            # old one's bindings and store-and-forward queue once it is identified
            log.info("node %s joined from %s, its bridge still tries %s: bridging to %s (its backup took over?)",
                     join.node_id, join.connector, bridge.connector, join.connector,
                     extra={"event": "cluster.node_moved"})
            bridge.http = join.http
            self._bridge_to(join.connector)
        elif bridge is not None and bridge.state == "retrying":
            bridge.http = join.http
        self._members_changed()

    def peer_left(self, adapter: CoreAdapter) -> None:
        peer = self.peers.pop(adapter, None)
        if peer is not None:
            log.info("node %s left (its link to this node closed)", peer.node_id)

    # -- what peers tell us ------------------------------------------------------------------------

    def members_from(self, bridge: Bridge, members: list[ClusterMember]) -> None:
        for m in members:
            if m.node_id == self.node_id:
                continue
            if m.node_id == bridge.node_id:
                bridge.http = m.http
                self.known[m.node_id] = m  # what a node says of itself wins
            else:
                self.known.setdefault(m.node_id, m)
            if not self.model.allow_direct_connections_only and not self._bridged(m.node_id):
                self._bridge_to(m.connector)

    def bindings_from(self, bridge: Bridge, event: Bindings) -> None:
        office = self.office
        seen: set[str] = set()
        for info in event.upserts:
            key = self._upsert(bridge, info)
            if key is not None:
                seen.add(info.key)
        stale = set(bridge.bindings) - seen if event.reset else set(event.removed)
        for their_key in stale:
            ours = bridge.bindings.pop(their_key, None)
            binding = office.remote_bindings.get(ours) if ours else None
            if binding is not None and binding.link is bridge:
                office.remove_remote_binding(ours)
        self._remember_soon()

    def _upsert(self, bridge: Bridge, info: BindingInfo) -> str | None:
        if info.origin == self.node_id:
            return None
        if info.distance > 0:
            direct = self.by_node.get(info.origin)
            if direct is not None and direct is not bridge:
                return None  # reached directly; not through a neighbour
        office = self.office
        key = remote_key(info.name, info.origin)
        existing = office.remote_bindings.get(key)
        try:
            consumer_selectors = [compile_selector(f) if f else None for f in info.consumer_filters]
            selector = compile_selector(info.filter) if info.filter else None
        except SelectorError as exc:
            log.warning("binding %s from node %s has a filter this node cannot parse: %s", key, bridge.node_id, exc)
            return None
        if existing is not None and existing.link is bridge and existing.remote_key == info.key and (
            (existing.selector.text if existing.selector else None) == info.filter
        ):
            bridge.bindings[info.key] = key
            office.update_remote_consumers(key, info.consumer_count, consumer_selectors)
            return key
        if existing is not None and existing.link is not bridge and existing.distance <= info.distance + 1:
            return None
        try:
            routing_type = RoutingType(info.routing_type)
        except ValueError:
            return None
        bridge.bindings[info.key] = key
        office.add_remote_binding(RemoteBinding(
            key, info.key, info.name, info.address, routing_type, selector, origin=info.origin,
            distance=info.distance + 1, link=bridge, consumer_count=info.consumer_count,
            consumer_selectors=consumer_selectors))
        return key

    # -- bindings remembered across a restart (see remembered.py) ------------------------------

    def _restore(self) -> None:
        office = self.office
        entries = remembered.load(self._remembered_path)
        for e in entries:
            try:
                via, origin = str(e["via"]), str(e["origin"])
                if not via or via == self.node_id or origin == self.node_id or e["key"] in office.remote_bindings:
                    continue
                selector = compile_selector(e["filter"]) if e.get("filter") else None
                absent = self.absent.get(via)
                if absent is None:
                    name = sf_queue_name(self.name, via)
                    queue = office.queues.get(name) or office.create_queue(name, name, RoutingType.ANYCAST,
                                                                            durable=True)
                    absent = self.absent[via] = remembered.Absent(via, queue)
                absent.bindings[e["remote_key"]] = e["key"]
                office.add_remote_binding(RemoteBinding(
                    e["key"], e["remote_key"], e["name"], e["address"], RoutingType(e["routing_type"]), selector,
                    origin=origin, distance=int(e["distance"]), link=absent))
            except (KeyError, TypeError, ValueError, SelectorError) as exc:
                log.warning("remembered cluster binding %r skipped: %s", e, exc)
        self._remembered = entries
        if entries:
            log.info("%d remote binding(s) of %d node(s) remembered from before the restart: routed to until "
                     "their nodes join", len(office.remote_bindings), len(self.absent),
                     extra={"event": "cluster.bindings_remembered"})

    def _remember_soon(self) -> None:
        if not self._save_scheduled:
            self._save_scheduled = True
            asyncio.get_running_loop().call_soon(self._remember)

    def _remember(self) -> None:
        """Write the remote bindings down when the set of them changed (not for consumer counts)."""
        self._save_scheduled = False
        entries = sorted((remembered.entry(b) for b in self.office.remote_bindings.values() if b.link.node_id),
                         key=lambda e: e["key"])
        if entries != self._remembered:
            self._remembered = entries
            store = self.broker.store
            remembered.save(self._remembered_path, entries, store.stream if store is not None else None)

    # -- what we tell peers (the post office's BindingObserver) ----------------------------------------

    def binding_added(self, binding: Queue | RemoteBinding) -> None:
        self._changed(binding)

    def binding_changed(self, binding: Queue | RemoteBinding) -> None:
        self._changed(binding)

    def binding_removed(self, binding: Queue | RemoteBinding) -> None:
        key = binding.key if isinstance(binding, RemoteBinding) else binding.name
        for peer in self.peers.values():
            if advertised(binding, peer.node_id, peer.max_hops, self.filter, removing=True):
                peer.upserts.pop(key, None)
                peer.removed.add(key)
        self._flush_soon()

    def _changed(self, binding: Queue | RemoteBinding) -> None:
        if not self.peers:
            return
        info = None
        for peer in self.peers.values():
            if self._for(binding, peer):
                info = info or binding_info(binding, self.node_id)
                peer.removed.discard(info.key)
                peer.upserts[info.key] = info
        if info is not None:
            self._flush_soon()

    def _for(self, binding: Queue | RemoteBinding, peer: _Peer) -> bool:
        return advertised(binding, peer.node_id, peer.max_hops, self.filter)

    def _bindings(self) -> list:
        return [*self.office.queues.values(), *self.office.remote_bindings.values()]

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for adapter, peer in self.peers.items():
            if peer.upserts or peer.removed:
                event = Bindings(False, list(peer.upserts.values()), sorted(peer.removed))
                peer.upserts, peer.removed = {}, set()
                adapter.cluster_send(event)

    # -- topology ------------------------------------------------------------------------------

    @property
    def backup_connector(self) -> str | None:
        """Where this node's backup will serve if it takes over (a replicating pair), or None."""
        return getattr(self.broker.activation, "backup_connector", None)

    def sees_node(self, node_id: str, unique_id: str = "") -> bool:
        """Whether ``node_id`` is alive in this node's view: a link to it or from it is up now.

        With ``unique_id``, only a link to or from that process of it counts: a backup that took
        over runs under its live's node ID, and a link to it says nothing of the old live."""
        bridge = self.by_node.get(node_id)
        if bridge is not None and bridge.connected and (not unique_id or bridge.peer_unique_id == unique_id):
            return True
        return any(p.node_id == node_id and (not unique_id or p.unique_id == unique_id)
                   for p in self.peers.values())

    @property
    def largest_size(self) -> int:
        """The largest number of live members this node has known at once, itself included."""
        size = 1 + sum(1 for n in self.known if n != self.node_id)
        self._largest = max(getattr(self, "_largest", 1), size)
        return self._largest

    def _members(self) -> list[ClusterMember]:
        out = [ClusterMember(self.node_id, self.connector, self.http, self.backup_connector, self.grouping_type)]
        for node_id, m in self.known.items():
            if node_id != self.node_id:
                out.append(m)
        return out

    @property
    def grouping_type(self) -> str | None:
        return self.grouping.model.type if self.grouping is not None else None

    def client_members(self) -> list[Member]:
        """Live members for CORE clients: this node and every node its bridges reach now."""
        members = [Member(self.node_id, self.connector, self.backup_connector)]
        for bridge in self.bridges:
            if bridge.connected and bridge.node_id:
                known = self.known.get(bridge.node_id)
                members.append(Member(bridge.node_id, bridge.connector, known.backup if known else None))
        return members

    def _members_changed(self) -> None:
        members = self._members()
        for adapter in list(self.peers):
            adapter.cluster_send(ClusterMembers(members))
        client_view = self.client_members()
        self._topology_event += 1
        for conn in list(self.broker.connections):
            adapter = conn.adapter
            if getattr(adapter, "protocol", None) in ("core", "openwire") and \
                    getattr(adapter, "cluster_peer", None) is None:
                adapter.send_topology(client_view)

    def _discovered(self, entries: dict) -> None:
        for node_id, a in entries.items():
            if a.cluster != self.name or node_id == self.node_id or not a.connectors:
                continue
            if not self._bridged(node_id):
                self._bridge_to(a.connectors[0])
        seeds = {self.broker.config.connector_url(c) for c in self.model.static_connectors}
        for bridge in list(self.bridges):
            if bridge.node_id and bridge.node_id not in entries and not bridge.connected and \
                    bridge.connector not in seeds:
                # Its bindings stay (a bridge to it, when it is back, takes them over): multicast
                # copies for its subscriptions wait in its store-and-forward queue meanwhile.
                log.info("node %s is no longer announced and its bridge is down: stopping it", bridge.node_id)
                bridge.stop()
                self.bridges.remove(bridge)

    # -- the management view ---------------------------------------------------------------------

    def describe(self) -> dict:
        office = self.office
        return {
            "name": self.name,
            "node_id": self.node_id,
            "unique_id": self.unique_id,  # this process: new at every start
            "connector": self.connector,
            "message_load_balancing": self.model.message_load_balancing,
            "max_hops": self.model.max_hops,
            "members": [
                {"node_id": m.node_id, "connector": m.connector, "http": m.http, "backup": m.backup,
                 "self": m.node_id == self.node_id,
                 "connected": m.node_id == self.node_id or bool(self.by_node.get(m.node_id)
                                                                and self.by_node[m.node_id].connected)}
                for m in self._members()
            ],
            "bridges": [b.describe() for b in self.bridges],
            "peers": [{"node_id": p.node_id, "unique_id": p.unique_id, "connector": p.connector,
                       "max_hops": p.max_hops}
                      for p in self.peers.values()],
            "discovered": sorted(self.discovery.entries) if self.discovery is not None else [],
            "remote_bindings": [
                {"key": b.key, "name": b.name, "address": b.address, "routing_type": b.routing_type.name,
                 "filter": b.selector.text if b.selector else None, "node_id": b.origin,
                 "via": b.link.node_id, "distance": b.distance, "consumer_count": b.consumer_count,
                 "messages_forwarded": b.messages_forwarded}
                for b in office.remote_bindings.values()
            ],
            "messages_forwarded": office.messages_forwarded,
            "messages_redistributed": office.messages_redistributed,
            "duplicates_dropped": office.forwarded_duplicates,
            "grouping": self.grouping.describe() if self.grouping is not None else None,
        }


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def _own_connector(broker: NodeContext) -> str:
    host = _client_host(broker.config.host)
    port = broker.ports.get("all", 0)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"ssl://{address}" if broker.config.ssl_enabled else address
