"""The protocols a broker speaks, in one registry.

Each protocol declares its name, how to recognise it from a client's first bytes, the
setting of its own acceptor (with the port it has by standard), and its adapter, made
lazily so that a protocol's modules load only when a client speaks it. The all-protocols
port (61616) asks every registered protocol in turn; a protocol's own acceptor speaks it
alone. Adding a protocol is one entry here, its codec's `detect` and its adapter.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from petrel.codec.amqp.frames import detect as detect_amqp
from petrel.codec.core.frames import detect as detect_core
from petrel.codec.mqtt.connection import detect as detect_mqtt
from petrel.codec.openwire.connection import detect as detect_openwire
from petrel.codec.stomp.frames import detect as detect_stomp

if TYPE_CHECKING:
    from petrel.config import BrokerConfig
    from petrel.server.broker import Broker
    from petrel.server.connection import Adapter, Connection

log = logging.getLogger("petrel.server.protocols")

#: Bytes held before a client that matches no protocol is closed.
MAX_DETECT_BYTES = 1024


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: `detect(head)` is True (this protocol), False (not this one) or None
    (too few bytes to tell); `adapter` is "module:Class", called as Class(broker, conn)."""

    name: str
    detect: Callable[[bytes], bool | None]
    adapter: str
    port_setting: str | None = None  # BrokerConfig field of the protocol's own acceptor
    standard_port: int | None = None  # that acceptor's port when the setting is left unset
    on_start: str | None = None  # "module:function", called as function(broker) once the broker serves

    def make_adapter(self, broker: Broker, conn: Connection) -> Adapter:
        module, _, cls = self.adapter.partition(":")
        return getattr(importlib.import_module(module), cls)(broker, conn)


PROTOCOLS: tuple[ProtocolSpec, ...] = (
    ProtocolSpec("core", detect_core, "petrel.server.adapters.core:CoreAdapter"),
    ProtocolSpec("stomp", detect_stomp, "petrel.server.adapters.stomp:StompAdapter",
                 port_setting="stomp_port", standard_port=61613),
    ProtocolSpec("mqtt", detect_mqtt, "petrel.server.adapters.mqtt:MqttAdapter",
                 port_setting="mqtt_port", standard_port=1883,
                 on_start="petrel.server.adapters.mqtt_state:start"),
    ProtocolSpec("amqp", detect_amqp, "petrel.server.adapters.amqp:AmqpAdapter",
                 port_setting="amqp_port", standard_port=5672),
    ProtocolSpec("openwire", detect_openwire, "petrel.server.adapters.openwire:OpenWireAdapter"),
)

BY_NAME: dict[str, ProtocolSpec] = {spec.name: spec for spec in PROTOCOLS}


def names() -> tuple[str, ...]:
    return tuple(spec.name for spec in PROTOCOLS)


def detect(head: bytes, among: tuple[str, ...] | None = None) -> str | None:
    """The protocol a client speaks from its first bytes: a name, "unknown", or None (need
    more). `among` limits the answer to those protocols (an acceptor's)."""
    undecided = False
    for spec in PROTOCOLS:
        if among is not None and spec.name not in among:
            continue
        verdict = spec.detect(head)
        if verdict:
            return spec.name
        if verdict is None:
            undecided = True
    if undecided and len(head) < MAX_DETECT_BYTES:
        return None
    return "unknown"


def start(broker: Broker) -> None:
    """Each protocol's start hook, for what it keeps across restarts (MQTT's session expiry)."""
    for spec in PROTOCOLS:
        if spec.on_start is not None:
            module, _, fn = spec.on_start.partition(":")
            try:
                getattr(importlib.import_module(module), fn)(broker)
            except Exception:  # the broker serves the other protocols (and this one's new clients)
                log.exception("the %s protocol's start hook failed", spec.name)


def acceptors(config: BrokerConfig) -> list[tuple[str, int, tuple[str, ...]]]:
    """(name, port after the offset, protocols) of every acceptor the config asks for:
    the all-protocols port, then each protocol's own."""
    out = []
    if config.listen_port() >= 0:  # -1: no client listener (a drainer)
        out.append(("all", config.listen_port(), names()))
    for spec in PROTOCOLS:
        if spec.port_setting is None:
            continue
        port = config.protocol_port(spec.port_setting, spec.standard_port)
        if port >= 0:
            out.append((spec.name, port, (spec.name,)))
    return out
