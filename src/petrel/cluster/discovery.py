"""UDP discovery: broadcast groups announce this node, discovery groups learn the others.

Artemis's ``BroadcastGroupImpl`` and ``DiscoveryGroupImpl``, on asyncio datagram sockets:

- A :class:`BroadcastGroup` sends this node's :class:`~petrel.cluster.beacon.Announcement`
  once on start, then every ``broadcast_period`` ms, to ``group_address:group_port``, a
  multicast group (``231.7.7.7``), a broadcast address (``255.255.255.255``) or a unicast
  address alike.
- A :class:`DiscoveryGroup` listens on that address and port, keeps the newest announcement of
  every other node (only authentic ones: sealed with the cluster's key, see
  :mod:`petrel.cluster.beacon_auth`; others are dropped and logged once per sender), drops a
  node not heard from for ``refresh_timeout`` ms, and calls ``on_change(entries)`` when a
  node appears, changes what it announces, or is dropped.

Several brokers on one host can listen on one group port (``SO_REUSEADDR``/``SO_REUSEPORT``).
Every listener gets a copy of a multicast or broadcast datagram, but only one of them gets a
unicast datagram: unicast discovery suits one broker per address.

Multicast leaves from, and is joined on, ``local_bind_address`` when given (else the interface
the routing table picks for the group). For multicast on the loopback interface, set
``local_bind_address = "127.0.0.1"`` on both groups.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable

from petrel.cluster.beacon import MAX_PACKET, Announcement, decode, encode
from petrel.cluster.beacon_auth import BeaconKey, BeaconRefused, ReplayGuard, open_sealed, seal
from petrel.cluster.config import BroadcastGroupModel, DiscoveryGroupModel

__all__ = ["BroadcastGroup", "DiscoveryGroup"]

log = logging.getLogger("petrel.cluster.discovery")

OnChange = Callable[[dict[str, Announcement]], None]


async def _resolve(host: str, port: int, what: str) -> tuple[int, str]:
    """(address family, IP text) of `host`, an IP literal or a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), str(ip)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise OSError(f"{what} {host!r} does not resolve ({exc.strerror}): use an IP address "
                      "or fix the name") from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr[0]


def _is_multicast(ip: str) -> bool:
    return ipaddress.ip_address(ip.split("%", 1)[0]).is_multicast


async def _local_address(local: str | None, family: int, what: str) -> str | None:
    if local is None:
        return None
    local_family, local_ip = await _resolve(local, 0, what)
    if local_family != family:
        raise ValueError(f"{what} {local!r} is not of the group address's family (IPv4 vs IPv6): "
                         "use a local address of the same family as group_address")
    return local_ip


# --- broadcasting -------------------------------------------------------------------------


#: What sealing adds to an announcement (petrel.cluster.beacon_auth).
_SEAL_BYTES = len(seal(BeaconKey(b"size"), b""))


def _encode(announcement: Announcement) -> bytes:
    packet = encode(announcement)
    if len(packet) + _SEAL_BYTES > MAX_PACKET:
        raise ValueError(f"announcement of node {announcement.node_id!r} is {len(packet) + _SEAL_BYTES} bytes "
                         f"sealed, over the {MAX_PACKET}-byte UDP limit: announce fewer connectors")
    return packet


class BroadcastGroup:
    """Announce `announcement` to the group every ``model.broadcast_period`` ms, sealed with `key`."""

    def __init__(self, model: BroadcastGroupModel, announcement: Announcement, *, key: BeaconKey) -> None:
        self.model = model
        self._key = key
        self._packet = _encode(announcement)  # fail here, not in the timer, if it cannot be sent
        self.announcement = announcement
        self._sock: socket.socket | None = None
        self._target: tuple | None = None
        self._task: asyncio.Task | None = None
        self._failing = False

    @property
    def running(self) -> bool:
        return self._task is not None

    def update(self, announcement: Announcement) -> None:
        """Announce `announcement` from now on (sent at once when running)."""
        self._packet = _encode(announcement)
        self.announcement = announcement
        if self._sock is not None:
            self._send()

    async def start(self) -> None:
        if self._task is not None:
            return
        m = self.model
        family, group_ip = await _resolve(m.group_address, m.group_port, "broadcast group address")
        local_ip = await _local_address(m.local_bind_address, family, "broadcast group local_bind_address")
        self._sock = _sender_socket(m, family, group_ip, local_ip)
        self._target = (group_ip, m.group_port)
        log.info("broadcast group %s: announcing node %s to %s:%d every %d ms", m.name,
                 self.announcement.node_id, group_ip, m.group_port, m.broadcast_period,
                 extra={"event": "cluster.broadcast_started"})
        self._send()
        self._task = asyncio.create_task(self._run(), name=f"petrel-broadcast-{m.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.model.broadcast_period / 1000
        due = loop.time()
        while True:
            due = max(due + period, loop.time())  # no burst after a stalled loop
            await asyncio.sleep(due - loop.time())
            self._send()

    def _send(self) -> None:
        try:
            self._sock.sendto(seal(self._key, self._packet), self._target)  # a new time and nonce each
        except BlockingIOError:
            log.debug("broadcast group %s: send buffer full, announcement skipped", self.model.name)
        except OSError as exc:
            if not self._failing:
                self._failing = True
                log.warning("broadcast group %s: cannot send to %s:%d (%s); retrying every %d ms: "
                            "check group_address and local_bind_address", self.model.name,
                            *self._target[:2], exc.strerror or exc, self.model.broadcast_period,
                            extra={"event": "cluster.broadcast_failed"})
        else:
            if self._failing:
                self._failing = False
                log.info("broadcast group %s: sending again", self.model.name,
                         extra={"event": "cluster.broadcast_resumed"})


def _sender_socket(m: BroadcastGroupModel, family: int, group_ip: str, local_ip: str | None) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if family == socket.AF_INET:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        if _is_multicast(group_ip):
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
                if local_ip is not None:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(local_ip))
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 1)
        if local_ip is not None or m.local_bind_port > 0:
            port = max(m.local_bind_port, 0)
            try:
                sock.bind((local_ip or "", port))
            except OSError as exc:
                raise OSError(exc.errno, f"broadcast group {m.name!r} cannot bind {local_ip or '*'}:{port} "
                                         f"({exc.strerror}): check local_bind_address and local_bind_port") from None
    except BaseException:
        sock.close()
        raise
    return sock


# --- discovery ----------------------------------------------------------------------------


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, group: DiscoveryGroup) -> None:
        self.group = group

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.group._received(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("discovery group %s: receive error: %s", self.group.model.name, exc)


class DiscoveryGroup:
    """The other nodes heard on the group: ``entries`` maps node id to newest announcement.

    Only announcements sealed with `key` count; the rest are dropped, with a warning once per
    sender and kind of fault (then at debug level)."""

    def __init__(self, model: DiscoveryGroupModel, own_node_id: str, on_change: OnChange, *,
                 key: BeaconKey) -> None:
        self.model = model
        self._key = key
        self._replays = ReplayGuard()
        self._refused: set[tuple[str, str]] = set()  # (sender host, reason) already warned about
        self.refused_count = 0  # datagrams dropped as not authentic (or replayed)
        self.own_node_id = own_node_id
        self.on_change = on_change
        self.entries: dict[str, Announcement] = {}
        self._expiry: dict[str, float] = {}  # node id -> loop time it is dropped at
        self._seen: dict[str, dict[str, tuple[float, object]]] = {}  # node id -> unique id -> (time, addr)
        self._current: dict[str, str] = {}  # node id -> unique id of its latest announcement
        self._warned: set[str] = set()  # node ids already reported as duplicates
        self._heard = asyncio.Event()
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._started_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return self._transport is not None

    async def start(self) -> None:
        if self._transport is not None:
            return
        m = self.model
        self._loop = loop = asyncio.get_running_loop()
        family, group_ip = await _resolve(m.group_address, m.group_port, "discovery group address")
        local_ip = await _local_address(m.local_bind_address, family, "discovery group local_bind_address")
        sock = _listener_socket(m, family, group_ip, local_ip)
        self._heard = asyncio.Event()
        self._started_at = loop.time()
        try:
            self._transport, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        log.info("discovery group %s: listening on %s:%d", m.name, group_ip, m.group_port,
                 extra={"event": "cluster.discovery_started"})

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.entries.clear()
        self._expiry.clear()
        self._seen.clear()
        self._current.clear()
        self._warned.clear()

    async def wait_initial(self) -> bool:
        """Wait until another node is heard (True) or ``initial_wait_timeout`` ms after start passed (False)."""
        if self._started_at is None:
            raise RuntimeError(f"discovery group {self.model.name!r}: call start() before wait_initial()")
        if self._heard.is_set():
            return True
        remaining = self._started_at + self.model.initial_wait_timeout / 1000 - self._loop.time()
        try:
            await asyncio.wait_for(self._heard.wait(), max(remaining, 0))
        except TimeoutError:
            return self._heard.is_set()
        return True

    # -- packets

    def _received(self, data: bytes, addr: tuple) -> None:
        try:
            a = decode(open_sealed(self._key, data, self._replays))
        except BeaconRefused as exc:
            self._refuse(exc, addr)
            return
        except ValueError as exc:
            log.debug("discovery group %s: ignored a datagram from %s: %s", self.model.name, addr, exc)
            return
        self._check_unique_id(a, addr)
        if a.node_id == self.own_node_id:  # our own echo; another broker with our id is caught above
            return
        now = self._loop.time()
        old = self.entries.get(a.node_id)
        self.entries[a.node_id] = a
        fresh = a.node_id not in self._expiry
        self._expiry[a.node_id] = now + self.model.refresh_timeout / 1000
        if fresh:
            self._schedule(self._expiry[a.node_id])
        self._heard.set()
        if old is None:
            log.info("discovery group %s: node %s found at %s", self.model.name, a.node_id,
                     ", ".join(a.connectors) or "(no connectors)", extra={"event": "cluster.node_found"})
            self._notify()
        elif _visible(old) != _visible(a):
            log.info("discovery group %s: node %s now announces %s", self.model.name, a.node_id,
                     ", ".join(a.connectors) or "(no connectors)", extra={"event": "cluster.node_changed"})
            self._notify()

    def _refuse(self, exc: BeaconRefused, addr: tuple) -> None:
        self.refused_count += 1
        host = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        key = (host, exc.reason)
        if exc.reason == "foreign" or key in self._refused or len(self._refused) >= 1024:
            log.debug("discovery group %s: dropped a datagram from %s: %s", self.model.name, addr, exc)
            return
        self._refused.add(key)
        log.warning("discovery group %s: dropped an announcement from %s: %s; no bridge is opened to "
                    "it (every node needs the same cluster_user and cluster_password; further ones from "
                    "there are logged at debug level)", self.model.name, host, exc,
                    extra={"event": "cluster.beacon_refused"})

    def _check_unique_id(self, a: Announcement, addr: object) -> None:
        """Warn once when two live processes announce one node id.

        A restart also changes the unique id, so a change alone proves nothing: a duplicate is
        a switch *back* to a unique id heard within the refresh timeout while the other one
        is still heard too (A, B, A), which two brokers broadcasting side by side produce.
        """
        now = self._loop.time()
        refresh = self.model.refresh_timeout / 1000
        seen = self._seen.setdefault(a.node_id, {})
        for unique_id, (when, _) in list(seen.items()):
            if now - when >= refresh:
                del seen[unique_id]
        current = self._current.get(a.node_id)
        if (current is not None and current != a.unique_id and a.unique_id in seen
                and current in seen and a.node_id not in self._warned):
            self._warned.add(a.node_id)
            log.warning(
                "discovery group %s: duplicate node id %s: two brokers announce it (unique ids %s "
                "from %s and %s from %s), most likely started on copies of one data directory; "
                "give each broker its own data_dir (a fresh one gets a new node id)",
                self.model.name, a.node_id, current, seen[current][1], a.unique_id, addr,
                extra={"event": "cluster.duplicate_node"})
        seen[a.unique_id] = (now, addr)
        self._current[a.node_id] = a.unique_id

    # -- expiry

    def _schedule(self, when: float) -> None:
        if self._transport is None:
            return
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time() + 0.001  # call_at may fire a clock tick early
        dropped = [node_id for node_id, when in self._expiry.items() if when <= now]
        for node_id in dropped:
            del self._expiry[node_id]
            self.entries.pop(node_id, None)
            self._seen.pop(node_id, None)
            self._current.pop(node_id, None)
            self._warned.discard(node_id)
            log.info("discovery group %s: node %s dropped: not heard from for %d ms", self.model.name,
                     node_id, self.model.refresh_timeout, extra={"event": "cluster.node_dropped"})
        if self._expiry:
            self._schedule(min(self._expiry.values()))
        if dropped:
            self._notify()

    def _notify(self) -> None:
        try:
            self.on_change(dict(self.entries))
        except Exception:
            log.exception("discovery group %s: on_change failed", self.model.name,
                          extra={"event": "cluster.discovery_callback_failed"})


def _visible(a: Announcement) -> tuple:
    """What a listener acts on; a new unique id alone (a restart) is not a change."""
    return a.cluster, a.connectors, a.http


def _listener_socket(m: DiscoveryGroupModel, family: int, group_ip: str, local_ip: str | None) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        multicast = _is_multicast(group_ip)
        # Bound to the group address (as Artemis does on Linux), the socket gets only this
        # group's datagrams; where that is refused, it listens on the local or any address.
        try:
            sock.bind((group_ip, m.group_port))
        except OSError:
            fallback = "" if multicast else (local_ip or "")
            try:
                sock.bind((fallback, m.group_port))
            except OSError as exc:
                raise OSError(exc.errno, f"discovery group {m.name!r} cannot listen on {fallback or '*'}:"
                                         f"{m.group_port} ({exc.strerror}): another program holds the "
                                         "port; pick another group_port") from None
        if multicast:
            try:
                if family == socket.AF_INET:
                    mreq = socket.inet_aton(group_ip) + socket.inet_aton(local_ip or "0.0.0.0")
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
                else:
                    mreq = socket.inet_pton(socket.AF_INET6, group_ip.split("%", 1)[0]) + struct.pack("@I", 0)
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
            except OSError as exc:
                raise OSError(exc.errno, f"discovery group {m.name!r} cannot join multicast group {group_ip} "
                                         f"on {local_ip or 'the default interface'} ({exc.strerror}): set "
                                         "local_bind_address to the address of a multicast-capable "
                                         "interface") from None
    except BaseException:
        sock.close()
        raise
    return sock
