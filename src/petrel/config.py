"""Broker configuration: ``broker.toml``, then ``PETREL_*`` variables, then flags.

:func:`load_config` reads the TOML file (standard library ``tomllib``), lays
environment variables over its top-level keys, then explicit overrides (the CLI
flags), and validates the result once with pydantic.  Every failure is a
:class:`~petrel.errors.ConfigError` whose one-line message names where the bad
value came from and its key, e.g.::

    broker.toml: journal_file_size: Input should be a valid integer (got 'abc')
    environment: PETREL_PORT_OFFSET: Input should be a valid integer (got 'two')

Environment variables: ``PETREL_<FIELD>`` (upper-case field name) sets a
top-level field; booleans take ``true/false/1/0/yes/no``, ``stomp_heartbeat``
takes ``"10000,10000"``.  ``address_settings`` can only come from the file.  A
``PETREL_`` variable that names no field is an error (a typo would otherwise go
unnoticed), except the ones Petrel uses for other things, listed in
:data:`NON_CONFIG_VARIABLES` and :data:`NON_CONFIG_PREFIXES`.

A relative ``data_dir`` is resolved against the config file's directory when
it comes from the file (or is the default and a file is used), and against the
current directory when it comes from the environment, a flag, or no file at all.

Fields in :data:`RELOADABLE` may be re-read by a running broker; the rest take
effect on restart.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from petrel.cluster.config import (
    DEFAULT_CLUSTER_PASSWORD,
    DEFAULT_CLUSTER_USER,
    BroadcastGroupModel,
    ClusterConnectionModel,
    DiscoveryGroupModel,
    GroupingHandlerModel,
    connector_tls,
    parse_connector,
)
from petrel.core.names import name_problem
from petrel.core.settings import AddressSettingsRepository
from petrel.errors import ConfigError
from petrel.ha.config import HaPolicyModel
from petrel.server.limits import LimitSettings
from petrel.security.config import LdapModel, SecurityModel, SecuritySettings
from petrel.server import tls

__all__ = [
    "AddressSettingsModel",
    "BrokerConfig",
    "ENV_PREFIX",
    "NON_CONFIG_PREFIXES",
    "NON_CONFIG_VARIABLES",
    "RELOADABLE",
    "env_settable",
    "load_config",
]

ENV_PREFIX = "PETREL_"
#: PETREL_ variables that are not settings (read by the CLI and the tooling): a user who exports
#: the client commands' (``petrel producer --url``...) can still start a broker in that shell.
NON_CONFIG_VARIABLES = frozenset({"PETREL_LOG_LEVEL", "PETREL_LOG_FORMAT", "PETREL_CONFIG", "PETREL_URL",
                                  "PETREL_USER", "PETREL_PASSWORD", "PETREL_MANAGEMENT_URL",
                                  "PETREL_MANAGEMENT_CA"})
#: Prefixes reserved for test and benchmark tooling.
NON_CONFIG_PREFIXES = ("PETREL_TEST_", "PETREL_BENCH_")
#: Top-level fields a running broker may reload.
RELOADABLE = frozenset({"address_settings", "message_expiry_scan_period"})

KIB = 1024
MIB = 1024 * 1024

Port = Annotated[int, Field(ge=-1, le=65535)]
_LIMITS = LimitSettings.model_fields
NonNegative = Annotated[int, Field(ge=0)]


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


RoutingType = Annotated[Literal["ANYCAST", "MULTICAST"], BeforeValidator(_upper)]


class AddressSettingsModel(BaseModel):
    """One ``[address_settings."<pattern>"]`` table; unset fields are inherited.

    Mirrors :class:`petrel.core.settings.AddressSettings` field for field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dead_letter_address: str | None = Field(
        None, description='where undeliverable messages go ("" = drop them)')
    expiry_address: str | None = Field(
        None, description='where expired messages go ("" = drop them)')
    expiry_delay: int | None = Field(
        None, ge=-1, description="ms; expiration given to messages that have none (-1 = keep theirs)")
    max_delivery_attempts: int | None = Field(
        None, ge=-1, description="deliveries before a message goes to the dead-letter address (-1 = infinite)")
    redelivery_delay: int | None = Field(
        None, ge=0, description="ms to wait before redelivering a rolled-back message")
    redelivery_multiplier: float | None = Field(
        None, gt=0, description="factor applied to redelivery_delay on each further attempt")
    max_redelivery_delay: int | None = Field(
        None, ge=0, description="ms cap on the redelivery delay (default redelivery_delay * 10)")
    auto_create_addresses: bool | None = Field(
        None, description="create an address when a client first uses it")
    auto_create_queues: bool | None = Field(
        None, description="create a queue when a client first uses it")
    auto_delete_addresses: bool | None = Field(
        None, description="delete auto-created addresses once they have no queues")
    auto_delete_queues: bool | None = Field(
        None, description="delete auto-created queues once they have no consumers and no messages")
    auto_delete_queues_delay: int | None = Field(
        None, ge=0, description="ms to wait before auto-deleting a queue")
    default_address_routing_type: RoutingType | None = Field(
        None, description="routing type of auto-created addresses: ANYCAST or MULTICAST")
    default_queue_routing_type: RoutingType | None = Field(
        None, description="routing type of auto-created queues: ANYCAST or MULTICAST")
    id_cache_size: int | None = Field(
        None, ge=0, description="duplicate-ID cache entries per address (default: the broker's id_cache_size)")
    send_to_dla_on_no_route: bool | None = Field(
        None, description="send messages that match no queue to the dead-letter address")
    default_exclusive_queue: bool | None = Field(
        None, description="auto-created queues deliver to one consumer at a time")
    default_last_value_key: str | None = Field(
        None, description="auto-created queues keep only the newest message per value of this property")
    default_non_destructive: bool | None = Field(
        None, description="auto-created queues keep messages after they are acknowledged")
    default_ring_size: int | None = Field(
        None, ge=-1, description="auto-created queues drop their oldest message beyond this count (-1 = no limit)")
    default_group_rebalance: bool | None = Field(
        None, description="re-spread message groups over consumers when a consumer is added")
    default_group_buckets: int | None = Field(
        None, ge=-1, description="hash groups into this many buckets (-1 = one per group)")
    max_size_bytes: int | None = Field(
        None, ge=-1, description="bytes of messages held in memory for the address before address_full_policy applies (-1 = no limit of its own)")
    max_size_messages: int | None = Field(
        None, ge=-1, description="messages held in memory for the address before address_full_policy applies (-1 = no limit)")
    address_full_policy: Literal["PAGE", "BLOCK", "FAIL", "DROP"] | None = Field(
        None, description="what happens when the address is full: PAGE, BLOCK, FAIL or DROP")
    page_size_bytes: int | None = Field(
        None, ge=4096, description="size of each page file")
    redistribution_delay: int | None = Field(
        None, ge=-1, description="ms a clustered queue without consumers waits before its messages move to "
        "nodes with consumers (-1 = never, 0 = at once)")

    def partial(self) -> dict[str, Any]:
        """Only the keys that were set, for :class:`AddressSettingsRepository`."""
        return self.model_dump(exclude_none=True)


def _valid_name(name: str | None) -> str | None:
    problem = None if name is None else name_problem(name)
    if problem is not None:
        raise ValueError(f"invalid name: {problem}")
    return name


class QueueModel(BaseModel):
    """A ``[[queues]]`` entry: a queue created at start if it does not exist (Artemis ``<queue>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, AfterValidator(_valid_name)] = Field(min_length=1)
    address: Annotated[str | None, AfterValidator(_valid_name)] = Field(None, description="defaults to the queue name")
    routing_type: RoutingType = "ANYCAST"
    durable: bool = True
    filter: str | None = None
    exclusive: bool | None = None
    last_value_key: str | None = None
    non_destructive: bool | None = None
    ring_size: int | None = Field(None, ge=-1)
    group_rebalance: bool | None = None
    group_buckets: int | None = Field(None, ge=-1)


class DivertModel(BaseModel):
    """A ``[[diverts]]`` entry (Artemis ``<divert>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    address: str = Field(min_length=1)
    forwarding_address: str = Field(min_length=1)
    exclusive: bool = False
    filter: str | None = None
    routing_type: Literal["STRIP", "PASS", "ANYCAST", "MULTICAST"] = "STRIP"


class BrokerConfig(BaseModel):
    """Everything one broker reads at start-up (validated, immutable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("petrel", min_length=1, description="broker name, shown in logs and management")
    data_dir: Path = Field(
        Path("data"), description="journal, bindings, paging and large messages (relative to this file)")
    host: str = Field("0.0.0.0", description="interface the acceptors listen on")
    port_offset: int = Field(
        0, ge=0, le=65535, description="added to every port below, to run several brokers on one host")
    port: Port = Field(61616, description="acceptor for all protocols, detected from the first bytes (-1 = off, 0 = any free port)")
    stomp_port: Port = Field(61613, description="STOMP-only acceptor (-1 = off, 0 = any free port)")
    mqtt_port: Port | None = Field(
        None, description="MQTT-only acceptor (-1 = off, 0 = any free port); unset: 1883 when port is the "
        "standard 61616, else off (the all-protocols port speaks MQTT too)")
    amqp_port: Port | None = Field(
        None, description="AMQP-only acceptor (-1 = off, 0 = any free port); unset: 5672 when port is the "
        "standard 61616, else off (the all-protocols port speaks AMQP too)")
    ws_port: Port | None = Field(
        None, description="STOMP, MQTT and AMQP over WebSocket (ws://host:61614/stomp, /mqtt, /amqp; wss with "
        "ssl_enabled; -1 = off, 0 = any free port); unset: 61614 when port is the standard 61616, else off")
    http_port: Port = Field(8161, description="management API and console (-1 = off, 0 = any free port)")
    http_host: str = Field(
        "127.0.0.1", description="interface the management API listens on (only this host by default; "
        '"0.0.0.0" opens it to the network)')
    management_metrics_open: bool = Field(
        False, description="serve /metrics without credentials (with security enabled it needs the view permission)")
    management_token_ttl: int = Field(
        3600, ge=1, description="seconds a management bearer token (POST /api/v1/tokens) stays valid")
    max_frame_size: int = Field(
        100 * MIB, ge=1, description="largest STOMP frame accepted, in bytes (bodies over "
        "min_large_message_size are streamed to disk, never held whole)")
    min_large_message_size: int = Field(
        100 * KIB, ge=1, description="bytes; a larger body is a large message: kept in its own file under "
        "large-messages/, not in memory or the journal")
    stomp_heartbeat_min: int = Field(
        1000, ge=0, description="ms; fastest heart-beat the server agrees to, whatever a client asks (0 = no floor)")
    stomp_heartbeat: tuple[NonNegative, NonNegative] = Field(
        (10000, 10000), description="ms; heart-beats the server offers in CONNECTED: [send every, expect every]")
    connection_ttl: int = Field(
        60000, ge=-1, description="ms; drop a connection silent this long when no heart-beats are agreed (-1 = never)")
    journal_type: Literal["NIO"] = Field("NIO", description="journal I/O: NIO (plain file writes)")
    journal_file_size: int = Field(
        10 * MIB, ge=64 * KIB, multiple_of=4096, description="bytes per journal file (>= 64 KiB, a multiple of 4096)")
    journal_min_files: int = Field(2, ge=2, description="journal files created up front and always kept")
    journal_pool_files: int = Field(
        10, ge=-1, description="free journal files kept for reuse (-1 = keep all)")
    journal_sync_transactional: bool = Field(
        True, description="wait for the disk before confirming a commit")
    journal_sync_non_transactional: bool = Field(
        True, description="wait for the disk before confirming a persistent send or ack")
    journal_datasync: bool = Field(
        True, description="fsync journal writes (false survives a process crash but not a power loss)")
    journal_buffer_timeout: int = Field(
        0, ge=0, description="ns to gather writes before a sync (0 = sync as soon as the previous one ends)")
    journal_compact_min_files: int = Field(
        10, ge=0, description="compact only when at least this many journal files are in use")
    journal_compact_percentage: int = Field(
        30, ge=0, le=100, description="compact when live data falls below this percentage")
    journal_skip_damaged: bool = Field(
        False, description="on start, skip damaged journal records instead of refusing to start")
    persistence_enabled: bool = Field(True, description="false keeps everything in memory")
    global_max_size: int = Field(
        -1, ge=-1, description="bytes of messages all addresses may hold in memory (-1 = a quarter of the machine's memory)")
    producer_flow_control_bytes: int = Field(
        8 * MIB, ge=-1, description="bytes a queue's consumers may fall behind before the address's producers are "
        "slowed; a queue that stays behind (a stalled subscriber) stops slowing them and pages instead (-1 = off)")
    max_disk_usage: int = Field(
        90, ge=0, le=100, description="percent of the data disk in use above which producers are blocked")
    disk_scan_period: int = Field(5000, ge=100, description="ms between disk usage checks")
    id_cache_size: int = Field(20000, ge=0, description="duplicate-ID cache entries per address (0 = off)")
    persist_id_cache: bool = Field(True, description="journal duplicate IDs so they survive a restart")
    message_expiry_scan_period: int = Field(
        30000, ge=-1, description="ms between scans for expired messages (-1 = never)")
    address_settings: dict[str, AddressSettingsModel] = Field(
        default_factory=dict, description="per address pattern; see the tables below")
    queues: list[QueueModel] = Field(default_factory=list, description="queues created at start")
    diverts: list[DivertModel] = Field(default_factory=list, description="diverts created at start")
    cluster_user: str = Field(DEFAULT_CLUSTER_USER, description="user cluster nodes present to each other")
    cluster_password: str = Field(
        DEFAULT_CLUSTER_PASSWORD, description="password cluster nodes present to each other (the same on every node)")
    connectors: dict[str, str] = Field(
        default_factory=dict, description="named connectors: tcp://host:port URLs other settings refer to")
    broadcast_groups: list[BroadcastGroupModel] = Field(
        default_factory=list, description="UDP announcements of this node's connectors")
    discovery_groups: list[DiscoveryGroupModel] = Field(
        default_factory=list, description="UDP listeners that learn other nodes from their announcements")
    cluster_connections: list[ClusterConnectionModel] = Field(
        default_factory=list, description="at most one: how this node joins a cluster")
    rebalance_cluster_clients: bool = Field(
        False, description="OpenWire (ActiveMQ/Artemis rebalanceClusterClients): when a node joins the cluster, "
        "ask a share of the failover clients of every node to reconnect to it (ConnectionControl "
        "rebalanceConnection), so connections even out")
    grouping_handler: GroupingHandlerModel | None = Field(
        None, description="clustered message grouping: LOCAL on one node, REMOTE on the others")
    ha_policy: HaPolicyModel = Field(
        default_factory=HaPolicyModel, description="live-backup pairing: shared_store, replication or live_only")
    security_enabled: bool = Field(
        True, description="check logins and per-address permissions (false: anyone who reaches a port may do anything)")
    security: SecurityModel = Field(
        default_factory=SecurityModel, description="the users file, anonymous access, certificate users")
    security_settings: SecuritySettings = Field(
        default_factory=dict, description='per address pattern: permission -> roles, e.g. '
        '[security_settings."orders.#"] send = ["app"] (most specific pattern wins)')
    # TLS (petrel.server.tls checks the files and builds the contexts)
    ssl_enabled: bool = Field(
        False, description="the client acceptors (all-protocols, STOMP, MQTT, AMQP, WebSocket) speak TLS only "
        "(a plain-TCP client is refused)")
    ssl_cert: Path | None = Field(None, description="PEM certificate (chain, leaf first) the broker presents")
    ssl_key: Path | None = Field(None, description="PEM private key of ssl_cert")
    ssl_key_password: str | None = Field(None, description="password of an encrypted ssl_key")
    ssl_ca: Path | None = Field(
        None, description="PEM CA certificates client certificates must chain to; cluster links to ssl:// "
        "connectors trust them (default: the system's CAs)")
    ssl_need_client_auth: bool = Field(
        False, description="mutual TLS: refuse a client without a certificate signed by ssl_ca")
    ssl_protocols: Annotated[list[Literal["TLSv1.2", "TLSv1.3"]], BeforeValidator(tls.split_versions)] = Field(
        ["TLSv1.2", "TLSv1.3"], min_length=1, description="TLS versions accepted: TLSv1.2, TLSv1.3")
    ssl_ciphers: str | None = Field(
        None, description="OpenSSL cipher list for TLS 1.2 (default: Python's: forward-secret AEAD ciphers only)")
    ssl_handshake_timeout: int = Field(
        10000, ge=100, description="ms a client has to finish its TLS handshake before it is dropped")
    ssl_verify_host: bool = Field(
        True, description="cluster links check that a peer's certificate names the host they connect to")
    http_ssl_enabled: bool = Field(
        False, description="HTTPS on the management port, with ssl_cert and ssl_key")

    # Limits on what clients may hold, defined in petrel.server.limits (see the README's Limits)
    max_connections: int = _LIMITS["max_connections"]
    max_connections_per_user: int = _LIMITS["max_connections_per_user"]
    max_queues_per_user: int = _LIMITS["max_queues_per_user"]
    handshake_timeout: int = _LIMITS["handshake_timeout"]
    max_partial_frames_size: int = _LIMITS["max_partial_frames_size"]
    max_pending_writes_size: int = _LIMITS["max_pending_writes_size"]
    max_auto_created_queues: int = _LIMITS["max_auto_created_queues"]
    max_auto_created_addresses: int = _LIMITS["max_auto_created_addresses"]
    metrics_max_queues: int = _LIMITS["metrics_max_queues"]

    @model_validator(mode="after")
    def _check(self) -> BrokerConfig:
        if self.message_expiry_scan_period == 0:
            raise ValueError("message_expiry_scan_period: must be -1 (never) or a positive number of ms")
        for field in ("port", "stomp_port", "mqtt_port", "amqp_port", "ws_port", "http_port"):
            port = getattr(self, field)
            if port is not None and port > 0 and port + self.port_offset > 65535:
                raise ValueError(
                    f"{field}: {port} + port_offset {self.port_offset} is above 65535")
        self._check_cluster()
        tls.check(self)
        if self.ha_policy.replication and not self.cluster_connections:
            raise ValueError("ha_policy: replication finds the other half of its pair through "
                             "[[cluster_connections]]; add one (static_connectors or a discovery_group)")
        if self.ha_policy.replication and not self.persistence_enabled:
            raise ValueError("ha_policy: replication needs persistence_enabled = true")
        return self

    def _check_cluster(self) -> None:
        for name, url in self.connectors.items():
            try:
                parse_connector(url)
            except ValueError as exc:
                raise ValueError(f"connectors.{name}: {exc}") from None
        if len(self.cluster_connections) > 1:
            raise ValueError("cluster_connections: Petrel runs at most one cluster connection per broker")
        groups = {g.name for g in self.discovery_groups}
        for cc in self.cluster_connections:
            for ref in [cc.connector, *cc.static_connectors]:
                if ref is not None and ":" not in ref and ref not in self.connectors:
                    raise ValueError(f"cluster_connections: connector {ref!r} is neither a URL nor a name in [connectors]")
            if cc.discovery_group is not None and cc.discovery_group not in groups:
                raise ValueError(f"cluster_connections: discovery_group {cc.discovery_group!r} is not in [[discovery_groups]]")
        for bg in self.broadcast_groups:
            for ref in bg.connectors:
                if ":" not in ref and ref not in self.connectors:
                    raise ValueError(f"broadcast_groups: connector {ref!r} is neither a URL nor a name in [connectors]")

    def connector_url(self, ref: str) -> str:
        """A connector reference (a [connectors] name or a URL) as ``host:port`` (``ssl://host:port``
        for a TLS connector)."""
        url = self.connectors.get(ref, ref)
        host, port = parse_connector(url)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return f"ssl://{address}" if connector_tls(url) else address

    # -- derived values ----------------------------------------------------

    def _offset(self, port: int) -> int:
        return port + self.port_offset if port > 0 else port

    def listen_port(self) -> int:
        """The all-protocols port after the offset (0 = ephemeral, -1 = off)."""
        return self._offset(self.port)

    def listen_stomp_port(self) -> int:
        """The STOMP port after the offset (0 = ephemeral, -1 = off)."""
        return self._offset(self.stomp_port)

    def protocol_port(self, setting: str, standard: int | None) -> int:
        """A protocol's own acceptor after the offset (0 = ephemeral, -1 = off). Unset, it is
        the protocol's standard port on a broker whose all-protocols port is the standard
        61616, and off otherwise (tests, colocated backups, drainers: 61616 speaks it)."""
        port = getattr(self, setting)
        if port is None:
            port = standard if standard is not None and self.port == 61616 else -1
        return self._offset(port)

    def listen_http_port(self) -> int:
        """The management port after the offset (0 = ephemeral, -1 = off)."""
        return self._offset(self.http_port)

    @property
    def journal_dir(self) -> Path:
        return self.data_dir / "journal"

    @property
    def bindings_dir(self) -> Path:
        return self.data_dir / "bindings"

    @property
    def paging_dir(self) -> Path:
        return self.data_dir / "paging"

    @property
    def large_messages_dir(self) -> Path:
        return self.data_dir / "large-messages"

    def address_settings_repository(self) -> AddressSettingsRepository:
        """A new repository holding this config's address settings (build once per broker)."""
        return AddressSettingsRepository(
            {pattern: model.partial() for pattern, model in self.address_settings.items()},
            id_cache_size=self.id_cache_size,
        )


# Fields that environment variables may not set.
_NOT_FROM_ENV = frozenset({"address_settings", "connectors", "broadcast_groups", "discovery_groups",
                           "cluster_connections", "grouping_handler", "ha_policy", "security",
                           "security_settings"})


def env_settable() -> frozenset[str]:
    """The top-level settings a ``PETREL_<SETTING>`` variable may set."""
    return frozenset(BrokerConfig.model_fields) - _NOT_FROM_ENV


def load_config(
    path: Path | str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    overrides_source: str = "command line",
) -> BrokerConfig:
    """Read, merge and validate the configuration; raise ``ConfigError`` if bad.

    ``path`` is the TOML file (None: defaults only); ``env`` defaults to
    ``os.environ``; ``overrides`` are top-level fields that win over both
    (``None`` values are ignored).
    """
    if env is None:
        env = os.environ
    raw: dict[str, Any] = {}
    # key -> (where it came from, whether messages should repeat the key)
    sources: dict[str, tuple[str, bool]] = {}
    base_dir = Path.cwd()

    if path is not None:
        path = Path(path)
        raw = _read_toml(path)
        sources = {key: (str(path), True) for key in raw}
        base_dir = path.parent.absolute()
        tls.resolve_paths(raw, base_dir)  # ssl_cert, ssl_key, ssl_ca: relative to the file

    for key, value in _from_env(env).items():
        raw[key] = value
        sources[key] = (f"environment: {ENV_PREFIX}{key.upper()}", False)

    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in BrokerConfig.model_fields:
            raise ConfigError(f"{overrides_source}: {key}: unknown setting{_suggest(key, BrokerConfig)}")
        raw[key] = value
        sources[key] = (overrides_source, True)

    try:
        config = BrokerConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources, str(path) if path is not None else "config")) from None

    data_dir = config.data_dir.expanduser()
    if not data_dir.is_absolute():
        # from the file, or the default while a file is used: next to the file
        from_file = path is not None and sources.get("data_dir", (str(path),))[0] == str(path)
        data_dir = (base_dir if from_file else Path.cwd()) / data_dir
    security = config.security
    users_file = security.users_file
    if users_file is not None and not users_file.expanduser().is_absolute():  # next to the file
        security = security.model_copy(update={"users_file": base_dir / users_file})
    ldap = security.ldap
    if ldap is not None and ldap.ca_file is not None and not ldap.ca_file.expanduser().is_absolute():
        security = security.model_copy(update={"ldap": ldap.model_copy(update={"ca_file": base_dir / ldap.ca_file})})
    return config.model_copy(update={"data_dir": data_dir, "security": security})


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 text") from None


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or var in NON_CONFIG_VARIABLES:
            continue
        if var.startswith(NON_CONFIG_PREFIXES):
            continue
        key = var[len(ENV_PREFIX):].lower()
        if key not in BrokerConfig.model_fields:
            unknown.append(var)
            continue
        if key in _NOT_FROM_ENV:
            raise ConfigError(f"environment: {var}: {key} can only be set in the config file")
        if key == "stomp_heartbeat":
            values[key] = [part.strip() for part in value.split(",")]
        else:
            values[key] = value
    if unknown:
        described = ", ".join(
            var + _suggest(var[len(ENV_PREFIX):].lower(), BrokerConfig, prefix=ENV_PREFIX, upper=True)
            for var in sorted(unknown))
        raise ConfigError(f"environment: unknown Petrel setting {described}")
    return values


def _suggest(key: str, model: type[BaseModel], *, prefix: str = "", upper: bool = False) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), list(model.model_fields), n=1, cutoff=0.6)
    if not close:
        return ""
    name = close[0].upper() if upper else close[0]
    return f" (did you mean {prefix}{name}?)"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = part if _BARE_KEY.fullmatch(part) else '"' + part.replace('"', '\\"') + '"'
        out += f".{text}" if out else text
    return out


def _shown(value: Any) -> str:
    text = repr(str(value) if isinstance(value, Path) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(exc: ValidationError, sources: Mapping[str, tuple[str, bool]], default_source: str) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            model: type[BaseModel] = (BrokerConfig if len(loc) == 1 else LdapModel if loc[:2] == ("security", "ldap")
                                      else SecurityModel if loc[0] == "security" else AddressSettingsModel)
            message = "unknown setting" + _suggest(str(loc[-1]), model)
        else:
            message = error["msg"]
            if message.startswith("Value error, "):
                message = message[len("Value error, "):]
            if loc and "input" in error and kind != "missing" and not isinstance(error["input"], dict):  # a table: secrets
                message += f" (got {_shown(error['input'])})"
        source, show_key = sources.get(loc[0], (default_source, True)) if loc else (default_source, False)
        if show_key:
            problems.append(f"{source}: {_dotted(loc)}: {message}")
        else:
            problems.append(f"{source}: {message}")
    return "; ".join(problems)
