"""`ZooKeeperLockManager`: the lock manager seam on ZooKeeper, through kazoo.

Artemis's `CuratorDistributedLockManager`, same properties and layout. Per node id::

    /<namespace>/<node_id>/locks                  one lease at a time (ephemeral, sequential)
    /<namespace>/<node_id>/activation-sequence    8 bytes, a big-endian signed 64-bit integer

The lock: every contender creates an ephemeral sequential ``lease-<uuid>-<seq>`` child; the
lowest sequence holds it, the others watch their predecessor. A lease is deleted on
`unlock()`, and by ZooKeeper itself when the holder's session ends (closed, or expired after
``session_ms`` without hearing from it), which is what makes a crashed or cut-off holder give
the lock up. `held()` is False as soon as the session is suspended: a holder that cannot
reach ZooKeeper cannot know whether its lease survives. It is True again if the same session
reconnects in time (ZooKeeper kept the lease; a ZooKeeper restart keeps sessions too), and
never after the session expired: a new session does not inherit leases.

The sequence is compared and set by znode version, so a write that raced another fails.

Threads: kazoo runs its connection on its own thread. The unavailable listeners run on a
kazoo worker thread, once each time the session is suspended and once when it is lost; they
must not block, and an asyncio broker hops to its loop (``loop.call_soon_threadsafe``).
`stop()` itself calls no listener.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, ConnectionClosedError, ConnectionLoss, KazooException,
                              NodeExistsError, NoNodeError, OperationTimeoutError, SessionExpiredError)
from kazoo.retry import KazooRetry

from petrel.ha.lock_manager import LockManagerUnavailable, UnavailableListener

__all__ = ["ZooKeeperLock", "ZooKeeperLockManager", "ZooKeeperSequence"]

log = logging.getLogger("petrel.ha.zookeeper")

_LONG = struct.Struct(">q")
_LEASE = "lease-"
_UNAVAILABLE = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, OperationTimeoutError)
#: How often a waiting `try_lock` re-checks the session while it waits for its turn.
_RECHECK = 0.2


class ZooKeeperLockManager:
    def __init__(self, connect_string: str, session_ms: int = 18000, connection_ms: int = 8000, retries: int = 1,
                 retries_ms: int = 1000, namespace: str = "petrel") -> None:
        if not namespace or "/" in namespace:
            raise ValueError(f"namespace must be one path segment, got {namespace!r}")
        self.connect_string = connect_string
        self.session_ms = session_ms
        self.connection_ms = connection_ms
        self.retries = retries
        self.retries_ms = retries_ms
        self.namespace = namespace
        #: This manager's identity, written into its leases (Artemis: a random UUID).
        self.holder_id = uuid.uuid4().hex
        self._client: KazooClient | None = None
        self._listeners: list[UnavailableListener] = []
        self._locks: dict[str, ZooKeeperLock] = {}
        self._sequences: dict[str, ZooKeeperSequence] = {}
        self._stopping = False
        self._mutex = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Connect within `timeout` seconds (default ``connection_ms``), or raise
        `LockManagerUnavailable`. Once connected, kazoo reconnects by itself for as long as
        the manager runs."""
        with self._mutex:
            if self._client is not None:
                return
            timeout = self.connection_ms / 1000 if timeout is None else timeout
            try:
                client = KazooClient(
                    hosts=self.connect_string,
                    timeout=self.session_ms / 1000,
                    connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
                    command_retry=KazooRetry(max_tries=self.retries, delay=self.retries_ms / 1000, backoff=1),
                )
            except (ValueError, KazooException) as exc:
                raise LockManagerUnavailable(f"bad ZooKeeper connect string {self.connect_string!r}: {exc}") from exc
            client.add_listener(self._on_state)
            self._stopping = False
            began = time.monotonic()
            try:
                client.start(timeout=timeout)
            except client.handler.timeout_exception as exc:
                raise LockManagerUnavailable(
                    f"could not reach ZooKeeper at {self.connect_string!r} within {timeout:g}s: check the connect "
                    f"string and that ZooKeeper is up and reachable from this host") from exc
            self._client = client
            log.info("connected to ZooKeeper at %s in %.2fs (session %d ms)", self.connect_string,
                     time.monotonic() - began, self.session_ms, extra={"event": "ha.lock_manager_connected"})

    def stop(self) -> None:
        """Release every lock (best effort) and close the session: ZooKeeper deletes this
        session's leases at once."""
        with self._mutex:
            client, self._client = self._client, None
            self._stopping = True
        if client is None:
            return
        for lock in list(self._locks.values()):
            lock._forget()
        try:
            client.stop()
        finally:
            client.close()

    @property
    def connected(self) -> bool:
        client = self._client
        return client is not None and client.state == KazooState.CONNECTED

    def session_id(self) -> int | None:
        client = self._client
        if client is None or client.client_id is None:
            return None
        return client.client_id[0]

    # -- the seam --------------------------------------------------------------------------

    def lock(self, node_id: str) -> ZooKeeperLock:
        with self._mutex:
            lock = self._locks.get(node_id)
            if lock is None:
                lock = self._locks[node_id] = ZooKeeperLock(self, node_id)
            return lock

    def sequence(self, node_id: str) -> ZooKeeperSequence:
        with self._mutex:
            sequence = self._sequences.get(node_id)
            if sequence is None:
                sequence = self._sequences[node_id] = ZooKeeperSequence(self, node_id)
            return sequence

    def add_unavailable_listener(self, listener: UnavailableListener) -> None:
        self._listeners.append(listener)

    def remove_unavailable_listener(self, listener: UnavailableListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # -- internals -------------------------------------------------------------------------

    def node_path(self, node_id: str) -> str:
        if not node_id or "/" in node_id:
            raise ValueError(f"a node id is one path segment, got {node_id!r}")
        return f"/{self.namespace}/{node_id}"

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: never block here."""
        client = self._client
        if state == KazooState.CONNECTED:
            if client is not None:
                for lock in list(self._locks.values()):
                    if lock.has_leftovers():
                        client.handler.spawn(lock._clean_up_leftovers)
            return
        if state == KazooState.LOST:
            for lock in list(self._locks.values()):
                lock._forget()
        if client is None or self._stopping:
            return  # a start that timed out, or our own stop
        log.warning("ZooKeeper session %s (%s): every lock this node holds must be considered lost",
                    "lost" if state == KazooState.LOST else "suspended", self.connect_string,
                    extra={"event": "ha.lock_manager_unavailable"})
        if self._listeners:
            client.handler.spawn(self._notify)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not stop the others
                log.exception("unavailable listener %r failed", listener)

    def _connected_client(self) -> KazooClient:
        client = self._client
        if client is None:
            raise LockManagerUnavailable(f"the ZooKeeper lock manager for {self.connect_string!r} is not started")
        if client.state != KazooState.CONNECTED:
            raise LockManagerUnavailable(
                f"no ZooKeeper session ({client.state.lower()}) with {self.connect_string!r}: check that ZooKeeper "
                f"is up and reachable; kazoo keeps reconnecting")
        return client

    def _wait(self, result, what: str):
        """The result of one kazoo async call, within ``connection_ms``."""
        client = self._client
        timeout = self.connection_ms / 1000
        try:
            return result.get(timeout=timeout)
        except _UNAVAILABLE as exc:
            raise LockManagerUnavailable(
                f"{what}: lost the connection to ZooKeeper at {self.connect_string!r} ({type(exc).__name__}): "
                f"check that ZooKeeper is up and reachable") from exc
        except Exception as exc:
            if client is not None and isinstance(exc, client.handler.timeout_exception):
                raise LockManagerUnavailable(
                    f"{what}: ZooKeeper at {self.connect_string!r} did not answer within {timeout:g}s: check that "
                    f"ZooKeeper is up and reachable") from exc
            raise


class ZooKeeperLock:
    """The lock of one node id. Thread-safe; one instance per manager and node id."""

    def __init__(self, manager: ZooKeeperLockManager, node_id: str) -> None:
        self._manager = manager
        self.node_id = node_id
        self.path = manager.node_path(node_id) + "/locks"
        self._mutex = threading.RLock()
        self._lease: str | None = None  # our lease's full path while held
        self._session: int | None = None  # the session that created it
        #: Leases that may exist although we hold nothing: a create or delete whose outcome
        #: we never learned. Deleted once connected again (or gone with the session).
        self._leftover_prefixes: set[str] = set()
        self._leftover_leases: set[str] = set()

    def held(self) -> bool:
        return (self._lease is not None and self._manager.connected
                and self._manager.session_id() == self._session)

    def try_lock(self, timeout: float = 0.0) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._mutex:
            if self.held():
                return True
            client = self._manager._connected_client()
            if self._lease is not None:  # of a session that is gone, or a lease we cannot vouch for
                self._leftover_leases.add(self._lease)
                self._lease = self._session = None
            self._clean_up_leftovers()
            prefix = f"{_LEASE}{uuid.uuid4().hex}-"
            self._leftover_prefixes.add(prefix)
            lease, stat = self._manager._wait(
                client.create_async(f"{self.path}/{prefix}", self._manager.holder_id.encode(), ephemeral=True,
                                    sequence=True, makepath=True, include_data=True), f"lock {self.node_id}")
            session = stat.ephemeralOwner  # the session the lease lives and dies with
            self._leftover_prefixes.discard(prefix)
            self._leftover_leases.add(lease)
            if self._wait_for_turn(client, lease, deadline):
                self._leftover_leases.discard(lease)
                self._lease, self._session = lease, session
                log.info("lock %s held (lease %s)", self.node_id, lease, extra={"event": "ha.lock_acquired"})
                return True
            self._delete(lease)
            return False

    def unlock(self) -> None:
        with self._mutex:
            lease, self._lease, self._session = self._lease, None, None
            if lease is None:
                return
            self._leftover_leases.add(lease)
            try:
                self._delete(lease)
            except LockManagerUnavailable:
                log.warning("lock %s: could not delete lease %s now; it goes when connected again or with the "
                            "session", self.node_id, lease, extra={"event": "ha.lock_release_deferred"})
                return
            log.info("lock %s released", self.node_id, extra={"event": "ha.lock_released"})

    def has_leftovers(self) -> bool:
        return bool(self._leftover_prefixes or self._leftover_leases)

    def _wait_for_turn(self, client: KazooClient, lease: str, deadline: float) -> bool:
        name = lease.rsplit("/", 1)[1]
        while True:
            children = self._manager._wait(client.get_children_async(self.path), f"lock {self.node_id}")
            if name not in children:
                raise LockManagerUnavailable(f"lock {self.node_id}: our lease vanished, the ZooKeeper session "
                                             f"with {self._manager.connect_string!r} was lost")
            contenders = sorted((child for child in children if child.startswith(_LEASE)), key=lambda c: c[-10:])
            index = contenders.index(name)
            if index == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            woken = threading.Event()
            predecessor = f"{self.path}/{contenders[index - 1]}"
            if self._manager._wait(client.exists_async(predecessor, watch=lambda event: woken.set()),
                                   f"lock {self.node_id}") is None:
                continue
            while not woken.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if client.state != KazooState.CONNECTED:
                    self._manager._connected_client()  # raises, saying why
                woken.wait(min(remaining, _RECHECK))

    def _delete(self, lease: str) -> None:
        client = self._manager._connected_client()
        try:
            self._manager._wait(client.delete_async(lease), f"unlock {self.node_id}")
        except NoNodeError:
            pass
        self._leftover_leases.discard(lease)

    def _clean_up_leftovers(self) -> None:
        """Delete leases left by calls whose outcome we never learned (kazoo worker thread,
        or the start of `try_lock`)."""
        with self._mutex:
            if not self.has_leftovers():
                return
            # snapshots: `_forget` swaps the sets from kazoo's thread without the mutex
            leases, prefixes = tuple(self._leftover_leases), tuple(self._leftover_prefixes)
            try:
                client = self._manager._connected_client()
                for lease in leases:
                    self._delete(lease)
                if prefixes:
                    children = self._manager._wait(client.get_children_async(self.path), f"lock {self.node_id}")
                    for child in children:
                        if child.startswith(prefixes):
                            self._delete(f"{self.path}/{child}")
                    self._leftover_prefixes.difference_update(prefixes)
            except NoNodeError:
                self._leftover_prefixes.difference_update(prefixes)
            except LockManagerUnavailable:
                pass  # next time we are connected

    def _forget(self) -> None:
        """The session is gone, and every ephemeral lease with it (kazoo's connection
        thread: no mutex, which a waiting `try_lock` may hold)."""
        self._lease = self._session = None
        self._leftover_prefixes = set()
        self._leftover_leases = set()


class ZooKeeperSequence:
    """The activation sequence of one node id: reads 0 until first set."""

    def __init__(self, manager: ZooKeeperLockManager, node_id: str) -> None:
        self._manager = manager
        self.node_id = node_id
        self.path = manager.node_path(node_id) + "/activation-sequence"

    def get(self) -> int:
        return self._read()[0]

    def compare_and_set(self, expected: int, new: int) -> bool:
        """A write whose outcome is unknown (the connection dropped after sending it) raises
        `LockManagerUnavailable`: the activation sequence's states repair that."""
        _LONG.pack(new)  # struct.error outside a signed 64-bit integer
        current, version = self._read()
        if current != expected:
            return False
        client = self._manager._connected_client()
        what = f"activation sequence {self.node_id}"
        try:
            if version is None:
                self._manager._wait(client.create_async(self.path, _LONG.pack(new), makepath=True), what)
            else:
                self._manager._wait(client.set_async(self.path, _LONG.pack(new), version=version), what)
        except (NodeExistsError, BadVersionError):
            return False
        return True

    def _read(self) -> tuple[int, int | None]:
        """(value, znode version), version None when the znode does not exist yet."""
        client = self._manager._connected_client()
        what = f"activation sequence {self.node_id}"
        for attempt in range(self._manager.retries + 1):
            try:
                data, stat = self._manager._wait(client.get_async(self.path), what)
            except NoNodeError:
                return 0, None
            except LockManagerUnavailable:
                if attempt >= self._manager.retries:
                    raise
                time.sleep(self._manager.retries_ms / 1000)
                client = self._manager._connected_client()
                continue
            if len(data) != _LONG.size:
                raise LockManagerUnavailable(f"{what}: {self.path} holds {len(data)} bytes, not a 64-bit integer")
            return _LONG.unpack(data)[0], stat.version
        raise AssertionError("unreachable")
