"""The cluster's members for ActiveMQ's failover transport (`failover:(...)`).

After the ConnectionInfo and again whenever the cluster's membership changes, an OpenWire client
of a clustered broker gets a ConnectionControl whose connectedBrokers lists every live member's
all-protocols URI (``tcp://host:port``, ``ssl://host:port`` for a TLS connector), this node's
first, as ActiveMQ's transport connectors do with ``updateClusterClients``. A failover client
adds them to the URIs it reconnects to (its ``updateURIsSupported``, on by default), so a client
given one node's address reaches the others when that node goes. The BrokerInfo names the same
peers (peerBrokerInfos), as informational.

``rebalance_cluster_clients`` (ActiveMQ's and Artemis's ``rebalanceClusterClients``): when a
node joins the cluster (a new one, or one back after a restart, whose clients went to the
others meanwhile), every node asks a share of its failover clients to move to it, as many as
leave each member about as many as the newcomer gets (``clients * newcomers // members``, any
of them, dealt round-robin over the newcomers). Such a client gets two
ConnectionControls: the members without the newcomer, then the newcomer first with
rebalanceConnection (and reconnectTo naming it), both after the responses still owed to it.

A client moves only once it holds nothing unsettled here. ActiveMQ's transport moves without
telling the JMS session (no transportInterrupted): messages dispatched here and not yet
acknowledged stay in the session, which would acknowledge them on the newcomer, where such an
ack settles nothing, while they come back here to be delivered again (an acknowledgement the
client was told succeeded, and a duplicate). So from the plan on, nothing more is dispatched to
the client's consumers (a pulling consumer still gets the one message it asks for), and the
controls go out at the end of the first read that leaves it quiet: every message dispatched to
it acknowledged and no transaction open. A client not quiet within `MOVE_GRACE` seconds stays
(its consumers get messages again), as does one that ignores the controls but then is
disconnected.
ActiveMQ's failover transport acts on a
rebalance only when the set of URIs it was given changes (``FailoverTransport.updateURIs``), and
then reconnects to the first: the first control makes sure the second changes the set. A moving
client's sends that wait for a response are neither stored nor answered here from then on: its
transport replays them on the newcomer, so a send in flight at the move is stored once, there.
A client still connected `MOVE_GRACE` seconds later (one that ignores the controls: its URL
has ``updateURIsSupported=false``) is disconnected, and its transport replays them wherever it
reconnects.

New failover clients are spread too, as ActiveMQ does: a node sends the k-th new one (a
ConnectionInfo that is not a failover reconnect) the members rotated by k, with
rebalanceConnection, so it goes to member ``k % members`` (its transport's URI set was empty, so
it changes): clients that all name the same node first end up even.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from petrel.codec.openwire import BrokerId, BrokerInfo, ConnectionControl

log = logging.getLogger("petrel.server.openwire")

MOVE_GRACE = 5.0  # seconds a client asked to move may stay before it is disconnected


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


class ClientBalance:
    """One broker's view for ``rebalance_cluster_clients``: the members it last told its clients
    of, and the moves planned for the change being announced."""

    def __init__(self) -> None:
        self.members: tuple[str, ...] = ()
        self.moves: dict[int, str] = {}  # id(adapter) -> the URI it is asked to move to
        self.turn = 0  # new failover clients so far: the k-th goes to member k % members

    def plan(self, broker: Any, uris: list[str]) -> None:
        """A membership change: who moves where (nobody unless a member joined)."""
        known, self.members, self.moves = self.members, tuple(uris), {}
        newcomers = [u for u in uris[1:] if u not in known] if known else []
        if not newcomers:
            return
        clients = [c.adapter for c in list(broker.connections)
                   if getattr(c.adapter, "protocol", None) == "openwire" and c.adapter.movable()]
        share = len(clients) * len(newcomers) // len(uris)
        for n, adapter in enumerate(clients[len(clients) - share:]):
            self.moves[id(adapter)] = newcomers[n % len(newcomers)]
        if share:
            log.info("rebalancing %d of %d OpenWire failover clients to %s", share, len(clients),
                     ", ".join(newcomers), extra={"event": "openwire.rebalance"})


_BALANCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def balance_of(broker: Any) -> ClientBalance:
    balance = _BALANCES.get(broker)
    if balance is None:
        balance = _BALANCES[broker] = ClientBalance()
    return balance


class OpenWireCluster:
    """Mixed into the OpenWire adapter: what it tells failover clients of the cluster."""

    moving_to: str | None = None  # asked to move to this member (rebalance_cluster_clients)
    move_planned: tuple[str, list[str]] | None = None  # (to, the others): once quiet here
    xa_used = False  # an XA transaction was seen on this connection

    def rebalancing(self) -> bool:
        return bool(getattr(self.broker.config, "rebalance_cluster_clients", False))

    def movable(self) -> bool:
        """A failover client, connected, not yet asked to move, and not one of a transaction
        manager (its prepared branches live here: a commit sent to another node would not find them)."""
        return (self.fault_tolerant and self.connection_id is not None and self.moving_to is None
                and self.move_planned is None and not self.xa_used and not self._closing and not self.conn.closed)

    def holding(self) -> bool:
        """Nothing is pushed to this client's consumers: it is about to move, or moving."""
        return self.moving_to is not None or self.move_planned is not None

    def leaving(self, m: Any) -> bool:
        """Drop this send, unanswered (`m` waits for a response, outside a transaction): the
        client was asked to move, and its transport replays the send where it goes."""
        return self.moving_to is not None and m.response_required and m.transaction_id is None

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

    def send_cluster(self, new: bool = False) -> None:
        """The ConnectionControl naming the cluster's members (clustered brokers only), after the
        ConnectionInfo's response; `new`: the client's first connection, not a failover reconnect."""
        members = self.cluster_members()
        uris = member_uris(members) if members else None
        if not uris:
            return
        k = 0
        if self.rebalancing():
            balance = balance_of(self.broker)
            balance.members = tuple(uris)  # what a later join is compared with
            if new and self.fault_tolerant and len(uris) > 1:
                k, balance.turn = balance.turn % len(uris), balance.turn + 1
        if k:
            self.moving_to = uris[k]
            log.info("asking new OpenWire client %s to move to %s", self.client_id or self.conn.peer, uris[k])
            self.conn.call_later(MOVE_GRACE, self._moved_or_closed)
        control = ConnectionControl(connected_brokers=",".join(uris[k:] + uris[:k]), rebalance_connection=bool(k))
        self.session.confirm(self.codec.send(control))

    def send_topology(self, members: list[Any]) -> None:
        """Push the members to this client (the cluster calls this as nodes come and go)."""
        if self._closing or self.conn.closed or self.connection_id is None:
            return
        uris = member_uris(members)
        if not uris:
            return
        target = None
        if self.rebalancing():
            balance = balance_of(self.broker)
            if tuple(uris) != balance.members:  # the first client told of this change plans the moves
                balance.plan(self.broker, uris)
            target = balance.moves.pop(id(self), None)
        if target is None or not self.movable():
            self.write(ConnectionControl(connected_brokers=",".join(uris)))
            return
        self.move_planned = (target, [u for u in uris if u != target])
        log.info("OpenWire client %s moves to %s once it holds nothing unacknowledged here",
                 self.client_id or self.conn.peer, target)
        for sub in self.subs.values():
            if sub.prefetch:
                for consumer in sub.consumers:
                    consumer.window = 0  # (a pulling consumer's window is its pull's)
        self.conn.call_later(MOVE_GRACE, self._stay)
        self.try_move()
        self.session.flush()  # (not inside one of this client's reads: out now, in order)

    def quiet(self) -> bool:
        """Nothing dispatched here unacknowledged, no transaction open: a move loses nothing."""
        if self.session.transactions or self.tx_acks:
            return False
        return not any(consumer.delivering for sub in self.subs.values() for consumer in sub.consumers)

    def try_move(self) -> None:
        """The planned move, if the client is quiet now (called at the end of each of its reads)."""
        if self.move_planned is None or self._closing or self.conn.closed or not self.quiet():
            return
        (target, others), self.move_planned = self.move_planned, None
        self.moving_to = target
        log.info("asking OpenWire client %s to move to %s", self.client_id or self.conn.peer, target)
        # after every response still owed (a send read before this is answered, not replayed)
        self.session.confirm(self.codec.send(ConnectionControl(connected_brokers=",".join(others))))
        self.session.confirm(self.codec.send(ConnectionControl(
            connected_brokers=",".join([target, *others]), rebalance_connection=True, reconnect_to=target)))
        self.conn.call_later(MOVE_GRACE, self._moved_or_closed)

    def _stay(self) -> None:
        """The planned move did not find the client quiet in time: it stays, and consumes again."""
        if self.move_planned is None or self._closing or self.conn.closed:
            return
        unsettled = sum(sub.held() for sub in self.subs.values())
        log.info("OpenWire client %s stays: it held %d unacknowledged message(s)%s for %.0fs", self.client_id
                 or self.conn.peer, unsettled, " and a transaction" if self.session.transactions else "", MOVE_GRACE)
        self.move_planned = None
        for sub in self.subs.values():
            if sub.consumers and sub.prefetch:
                sub.open_windows(sub.prefetch + sub.extension)
                sub.deliver()

    def _moved_or_closed(self) -> None:
        if not self._closing and not self.conn.closed:
            log.info("OpenWire client %s did not move to %s: disconnected", self.client_id or self.conn.peer,
                     self.moving_to)
            self.close()
