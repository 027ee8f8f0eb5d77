"""The cluster's members for ActiveMQ's failover transport (`failover:(...)`).

After the ConnectionInfo and again whenever the cluster's membership changes, an OpenWire client
of a clustered broker gets a ConnectionControl whose connectedBrokers lists every live member's
all-protocols URI (``tcp://host:port``, ``ssl://host:port`` for a TLS connector), this node's
first, as ActiveMQ's transport connectors do with ``updateClusterClients``. A failover client
adds them to the URIs it reconnects to (its ``updateURIsSupported``, on by default), so a client
given one node's address reaches the others when that node goes. The BrokerInfo names the same
peers (peerBrokerInfos), as informational. ``rebalanceClusterClients`` is not offered: the
control's rebalanceConnection is always false, so no client is moved off a healthy node.
"""

from __future__ import annotations

from typing import Any

from petrel.codec.openwire import BrokerId, BrokerInfo, ConnectionControl


def member_uri(connector: str) -> str:
    """A cluster connector (``host:port`` or ``ssl://host:port``) as an OpenWire client URI."""
    return connector if "://" in connector else f"tcp://{connector}"


def member_uris(members: list[Any]) -> list[str]:
    """The client URIs of the live members (CORE topology `Member`s), in order, once each."""
    out: list[str] = []
    for m in members:
        if m.live and not m.leaving:
            uri = member_uri(m.live)
            if uri not in out:
                out.append(uri)
    return out


class OpenWireCluster:
    """Mixed into the OpenWire adapter: what it tells failover clients of the cluster."""

    def cluster_members(self) -> list[Any] | None:
        cluster = self.broker.cluster
        return cluster.client_members() if cluster is not None else None

    def broker_info(self) -> BrokerInfo:
        members = self.cluster_members()
        uris = member_uris(members) if members else []
        peers = tuple(BrokerInfo(broker_id=BrokerId(f"ID:petrel-{m.node_id}"), broker_url=member_uri(m.live),
                                 broker_name=m.node_id)
                      for m in (members or ())[1:] if m.live)
        return BrokerInfo(broker_id=BrokerId(self.node), broker_name="petrel",
                          broker_url=uris[0] if uris else None, peer_broker_infos=peers or None,
                          fault_tolerant_configuration=bool(peers))

    def send_cluster(self) -> None:
        """The ConnectionControl naming the cluster's members (clustered brokers only), after the
        ConnectionInfo's response."""
        members = self.cluster_members()
        uris = member_uris(members) if members else None
        if uris:
            self.session.confirm(self.codec.send(ConnectionControl(connected_brokers=",".join(uris))))

    def send_topology(self, members: list[Any]) -> None:
        """Push the members to this client (the cluster calls this as nodes come and go)."""
        if self._closing or self.conn.closed or self.connection_id is None:
            return
        uris = member_uris(members)
        if uris:
            self.write(ConnectionControl(connected_brokers=",".join(uris)))
