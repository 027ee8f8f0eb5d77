"""The broker process: one event loop, its listeners, the post office and the store.

`Broker(config)` is the programmatic form (`async with Broker(config) as b:`); `run(config)`
is what `petrel run` calls: it blocks until SIGTERM/SIGINT and returns the exit code.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from petrel import __version__
from petrel.config import BrokerConfig
from petrel.core.message import now_ms
from petrel.core.limits import MemoryLimits
from petrel.core.migrations_open import OpenMigrations
from petrel.core.postoffice import PostOffice
from petrel.core.quotas import AutoCreateQuota
from petrel.errors import PetrelError
from petrel.security import Security
from petrel.storage.disk import DiskWatch
from petrel.storage.large import LargeMessageStore, reconcile
from petrel.storage.store import NullStore
from petrel.server import heap, protocols, websocket
from petrel.server.connection import Connection
from petrel.server.limits import ConnectionLimits
from petrel.server.tls import BrokerTls

log = logging.getLogger("petrel.server")


class LoopScheduler:
    """The post office's timers on the event loop, in epoch milliseconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def call_at_ms(self, when_ms: int, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return self.loop.call_later(max(0.0, (when_ms - now_ms()) / 1000), fn)


class Broker:
    version = __version__

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.connections: set[Connection] = set()
        # nodes whose migration here began and has not said MIGRATION_DONE (a drainer killed part
        # way leaves the rest in its directory): queue_info's migrating_from, kept in the store
        # (core/migrations_open.py; recovered in activate)
        self.migrations_open: OpenMigrations | frozenset = frozenset()
        self.limits = ConnectionLimits(config)  # max_connections, handshake_timeout, unfinished frames
        self.servers: list[asyncio.AbstractServer] = []
        self.ports: dict[str, int] = {}
        self._acceptors: set[str] = set()  # the entries of `ports` that _listen made (deactivate clears them)
        self.node_id = ""
        self.started_at = 0.0
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._disk_timer: asyncio.TimerHandle | None = None
        self.disk_watch: DiskWatch | None = None
        self._stopping = False
        self._stopped = False
        self.activation = None  # how this node becomes live (petrel.ha.activation)
        self.colocated = None  # the backups of other lives this broker hosts (petrel.ha.colocated)
        self.scale_down_target: str | None = None  # asked for by management: move everything there on stop
        self.staged_recovery = False  # the drainer: most messages built after start (core/staged.py)
        self.stop_requested: asyncio.Event | None = None  # set to stop the process (serve waits on it)
        self.exit_code = 0
        self.store = None
        self.large: LargeMessageStore | None = None  # large-message files
        self.office: PostOffice | None = None
        self.management = None  # the management HTTP server, when http_port >= 0
        self.cluster = None  # the ClusterConnection, when cluster_connections is configured
        self.tls = BrokerTls(config)  # TLS contexts: acceptors, management, cluster links
        self.security = Security.from_config(config)  # logins and permission checks

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start as the HA policy says: live at once, or a backup waiting in the background."""
        from petrel.cluster.credentials import check_cluster_password
        from petrel.ha.activation import activation_for

        config = self.config
        check_cluster_password(config)  # not the well-known default, when security is on
        self.security.prepare()  # the users file; on first start, an admin with a generated password
        http_port = config.listen_http_port()
        if http_port >= 0:
            from petrel.management.server import ManagementServer

            self.management = ManagementServer(self)
            self.ports["http"] = await self.management.start(config.http_host, http_port)
        self.activation = activation_for(self)
        active = False
        try:
            await self.activation.start()
            active = True
            if config.ha_policy.colocated is not None:
                from petrel.ha.colocated import ColocatedBackups

                self.colocated = ColocatedBackups(self)
                await self.colocated.start()
        except BaseException:
            if self.colocated is not None:
                await self.colocated.stop()
            if active:
                await self.activation.stop(10.0)
            if self.management is not None:
                await self.management.stop()
            raise

    async def activate(self) -> None:
        """Serve: recover the store, open the post office, listen, join the cluster.

        The caller (an activation) holds whatever lock makes this node the live one."""
        config = self.config
        loop = asyncio.get_running_loop()
        data_dir = Path(config.data_dir)
        self._stopping = False
        self.store = self._make_store(loop, data_dir)
        t0 = time.monotonic()
        # the collector does not traverse what recovery builds (see petrel.server.heap)
        with heap.paused():
            try:
                recover = self.store.recover
                if self.staged_recovery and config.persistence_enabled:
                    recover = functools.partial(recover, defer=True)
                recovered = await loop.run_in_executor(None, recover)
                # large-message files are part of the data directory's stream (replication copies them)
                self.large = LargeMessageStore(config.large_messages_dir, sync=config.journal_datasync,
                                               stream=self.store.stream)
                reconcile(self.large, recovered, self.store)
            except Exception as exc:
                self.store = None
                if type(exc).__module__.startswith("petrel.storage"):
                    raise PetrelError(str(exc)) from None
                raise
            self.office = PostOffice(
                self.store,
                config.address_settings_repository(),
                LoopScheduler(loop),
                id_cache_size=config.id_cache_size,
                persist_id_cache=config.persist_id_cache,
                limits=MemoryLimits(global_max_size(config), config.producer_flow_control_bytes),
                large=self.large,
            )
            self.office.quota = AutoCreateQuota(config.max_auto_created_queues, config.max_auto_created_addresses,
                                                config.max_queues_per_user)
            self.office.recover(recovered)
            self.migrations_open = OpenMigrations(self.store, recovered.migrations_open)
            del recovered
            heap.settle()
        self.office.ensure_defaults()
        self._apply_configured_destinations()
        count = sum(q.message_count for q in self.office.queues.values())
        log.info(
            "recovered %d queues and %d messages in %.2fs (node %s)",
            len(self.office.queues), count, time.monotonic() - t0, self.node_id,
            extra={"event": "broker.recovered"},
        )
        if config.cluster_connections:
            from petrel.cluster.connection import ClusterConnection

            self.cluster = ClusterConnection(self, config.cluster_connections[0])
        for name, port, spoken in protocols.acceptors(config):  # all protocols, then each one's own
            await self._listen(name, port, spoken)
        ws_port = config.protocol_port("ws_port", websocket.STANDARD_PORT)
        if ws_port >= 0:  # STOMP and MQTT over WebSocket
            await self._listen("ws", ws_port, (), factory=lambda: websocket.WebSocket(self))
        if self.management is not None:
            self.management.metrics.attach()
        if self.cluster is not None:
            await self.cluster.start()
        self._schedule_expiry_scan()
        self._schedule_disk_check()
        protocols.start(self)  # what a protocol keeps across restarts (MQTT sessions' expiry)
        self.started_at = time.time()
        log.info(
            "Petrel %s started: %s", __version__,
            ", ".join(f"{k} on {config.http_host if k == 'http' else config.host}:{v}" for k, v in self.ports.items()),
            extra={"event": "broker.started"},
        )

    def _apply_configured_destinations(self) -> None:
        """Queues and diverts from broker.toml that do not exist yet."""
        from petrel.core.message import RoutingType

        office = self.office
        for q in self.config.queues:
            if q.name in office.queues:
                continue
            attrs = {k: getattr(q, k) for k in ("exclusive", "last_value_key", "non_destructive", "ring_size",
                                                "group_rebalance", "group_buckets")}
            office.create_queue(q.name, q.address or q.name, RoutingType.parse(q.routing_type), durable=q.durable,
                                filter=q.filter, attributes=attrs)
        for d in self.config.diverts:
            if d.name in office.diverts:
                continue
            office.create_divert(d.name, d.address, d.forwarding_address, exclusive=d.exclusive, filter=d.filter,
                                 routing_type=d.routing_type)

    def _make_store(self, loop: asyncio.AbstractEventLoop, data_dir: Path):
        config = self.config
        if not config.persistence_enabled:
            return NullStore()
        from petrel.storage.file_store import FileStore

        def dispatch(callbacks: list[Callable[[], None]]) -> None:
            loop.call_soon_threadsafe(_run_all, callbacks)

        return FileStore(
            data_dir,
            dispatch=dispatch,
            sync_transactional=config.journal_sync_transactional,
            sync_non_transactional=config.journal_sync_non_transactional,
            skip_damaged=config.journal_skip_damaged,
            file_size=config.journal_file_size,
            min_files=config.journal_min_files,
            pool_files=config.journal_pool_files,
            datasync=config.journal_datasync,
            buffer_timeout_ns=config.journal_buffer_timeout,
            compact_min_files=config.journal_compact_min_files,
            compact_percentage=config.journal_compact_percentage,
        )

    async def _listen(self, name: str, port: int, protocols: tuple[str, ...],
                      factory: Callable[[], asyncio.Protocol] | None = None) -> None:
        try:
            server = await self.tls.create_server(  # loop.create_server, or a TLS listener
                factory or (lambda: Connection(self, protocols)), self.config.host, port, reuse_address=True,
                backlog=1024)
        except OSError as exc:
            raise PetrelError(f"cannot listen on {self.config.host}:{port} ({name}): {exc.strerror}") from None
        self.servers.append(server)
        self.ports[name] = server.sockets[0].getsockname()[1]
        self._acceptors.add(name)

    def make_adapter(self, kind: str, conn: Connection):
        return protocols.BY_NAME[kind].make_adapter(self, conn)

    def _schedule_expiry_scan(self) -> None:
        period = self.config.message_expiry_scan_period
        if period <= 0 or self._stopping:
            return

        def scan() -> None:
            try:
                n = self.office.expire_scan()
                if n:
                    log.debug("expiry scan expired %d messages", n)
            finally:
                self._schedule_expiry_scan()

        self._expiry_timer = asyncio.get_running_loop().call_later(period / 1000, scan)

    def _disk_changed(self, full: bool, percent: float) -> None:
        limits = self.office.limits
        limits.disk_full = full
        if full:
            log.warning("disk %.1f%% full (max_disk_usage %d%%): producers are blocked until space frees",
                        percent, self.config.max_disk_usage, extra={"event": "disk.full"})
            self._look_again_soon()
        else:
            log.info("disk back under max_disk_usage: producers resume", extra={"event": "disk.ok"})
            limits.wake(lambda a: not self.office.space_for(a))

    def _schedule_disk_check(self) -> None:
        """The timer side of the disk check (the store checks on its write path too): it sees
        space come back while producers are blocked, sooner while the disk is full."""
        if self._stopping:
            return
        watch = self.disk_watch
        if watch is None:
            watch = self.disk_watch = DiskWatch(Path(self.config.data_dir), self.config.max_disk_usage,
                                                self._disk_changed)
            self.store.disk_watch = watch
        period = self.config.disk_scan_period / 1000
        if watch.check():
            period = min(period, 0.5)
        if self._disk_timer is not None:
            self._disk_timer.cancel()  # one chain of looks, even when the check above rescheduled
        self._disk_timer = asyncio.get_running_loop().call_later(period, self._schedule_disk_check)

    def _look_again_soon(self) -> None:
        """The write path found the disk full: look every 0.5 s from now on, not only after the
        rest of ``disk_scan_period``, so producers resume as soon as space comes back."""
        if self._disk_timer is not None and not self._stopping:
            self._disk_timer.cancel()
            self._disk_timer = asyncio.get_running_loop().call_later(0.5, self._schedule_disk_check)

    def cannot_persist(self) -> str | None:
        """Why persistent messages cannot be taken now (a failing disk, a full one), or None."""
        store = self.store
        error = store.persist_error() if store is not None else None
        if error is not None:
            return f"the store cannot write: {error}"
        if self.office is not None and self.office.limits.disk_full:
            percent = self.disk_watch.percent if self.disk_watch is not None else 0.0
            return f"disk {percent:.1f}% full (max_disk_usage {self.config.max_disk_usage}%)"
        return None

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, close connections, finish in-flight syncs, release the data directory."""
        if self._stopped:
            return
        self._stopped = True
        if self.colocated is not None:
            await self.colocated.stop(timeout)
        if self.management is not None:
            await self.management.stop()
        if self.activation is not None:
            await self.activation.stop(timeout)
        else:
            await self.deactivate(timeout)
        self.security.close()
        log.info("Petrel stopped", extra={"event": "broker.stopped"})

    async def deactivate(self, timeout: float = 10.0, *, reason: str = "the broker is shutting down",
                         code: int | None = None, keep: set | frozenset = frozenset(), redirect: str | None = None,
                         before_close: Callable[[], Awaitable[None]] | None = None) -> None:
        """Stop serving: leave the cluster, close listeners and connections, close the store.

        The data directory's lock is the activation's to release; a backup that gave way to its
        primary (failback) can activate again later. Connections in ``keep`` stay open (the
        replication link, which carries the last writes to the backup); CORE clients are told to
        go to ``redirect`` when given; ``before_close`` runs once no client is connected, before
        the store closes (a scale-down moves the messages then)."""
        if self._stopping:
            return
        self._stopping = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self._disk_timer is not None:
            self._disk_timer.cancel()
        if self.cluster is not None:
            await self.cluster.stop()
        for server in self.servers:
            server.close()
        for conn in list(self.connections - keep):
            disconnect = getattr(conn.adapter, "disconnect", None)
            if disconnect is not None:
                # CORE: confirmations still waiting for the disk go out first, then a
                # DISCONNECT tells the client to fail over.
                disconnect(reason, redirect=redirect, code=code)
            else:
                conn.close()
        deadline = time.monotonic() + timeout
        while self.connections - keep and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections - keep):
            conn.close(after_flush=False)
        if not keep:  # (wait_closed also waits for the kept connection)
            for server in self.servers:
                await server.wait_closed()
        if before_close is not None and self.office is not None:
            await before_close()
        if self.store is not None:
            if self.management is not None:
                self.management.metrics.detach()
            await asyncio.get_running_loop().run_in_executor(None, self.store.close)
            # the store's last callbacks were handed to the loop; let them run
            await asyncio.sleep(0)
        self.servers = []
        for name in self._acceptors:  # every acceptor's (protocols.acceptors' and the WebSocket one); http stays
            self.ports.pop(name, None)
        self._acceptors.clear()
        self.cluster = None
        self.office = None
        self.store = None
        self.disk_watch = None
        self.started_at = 0.0

    def request_stop(self, *, scale_down_to: str | None = None) -> None:
        """Stop the process as a signal would (management's scale-down)."""
        if scale_down_to:
            self.scale_down_target = scale_down_to
        if self.stop_requested is not None:
            self.stop_requested.set()
        else:  # an embedded broker: no process to end, just stop it
            asyncio.get_running_loop().create_task(self.stop())

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def global_max_size(config: BrokerConfig) -> int:
    """`global_max_size`, or a quarter of the machine's memory when it is -1."""
    if config.global_max_size >= 0:
        return config.global_max_size
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError):
        return 1 << 30


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for cb in callbacks:
        try:
            cb()
        except Exception:
            log.exception("error in a durability callback")


async def serve(config: BrokerConfig) -> int:
    broker = Broker(config)
    stop = broker.stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # a primary may wait a while for its backup to give way: a signal meanwhile stops it
    starting = loop.create_task(broker.start())
    stopped = loop.create_task(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            pass
        log.info("signal received while starting, stopping", extra={"event": "broker.stopping"})
        await broker.stop()
        return 0
    stopped.cancel()
    starting.result()  # a failed start raises here (it has cleaned up after itself)
    try:
        await stop.wait()
        log.info("stop requested, stopping", extra={"event": "broker.stopping"})
    finally:
        await broker.stop()
    return broker.exit_code


def run(config: BrokerConfig) -> int:
    """Run a broker in the foreground until SIGTERM/SIGINT; returns the exit code. The broker
    owns the process: its garbage collector is tuned for it (`petrel.server.heap`)."""
    heap.tune_process()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    return runner(serve(config))
