"""The UDP announcement a broadcast group sends and a discovery group reads (sans-IO).

Artemis's ``BroadcastGroupImpl`` sends ``nodeID, uniqueID, n, n x TransportConfiguration``
every broadcast period. Petrel's packet carries the same facts plus the cluster connection's
name and the management URL::

    b"PTRLDSC" | version (1 byte) | msgpack [node_id, unique_id, cluster, [connector, ...], http | nil]

``unique_id`` changes every time a broker process starts, so that two brokers started on
copies of one data directory (hence one node id) can be told apart. Connectors are
``host:port`` (or ``tcp://host:port``) strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from petrel.cluster.config import parse_connector

__all__ = ["MAGIC", "MAX_PACKET", "VERSION", "Announcement", "decode", "encode"]

MAGIC = b"PTRLDSC"
VERSION = 1
#: The largest UDP payload over IPv4; a larger announcement cannot be sent.
MAX_PACKET = 65507

_HEADER = MAGIC + bytes([VERSION])
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(type=tuple[str, str, str, tuple[str, ...], str | None])


@dataclass(frozen=True, slots=True)
class Announcement:
    """What one node says about itself in each broadcast."""

    node_id: str
    unique_id: str  # new on every broker process start
    cluster: str  # the cluster connection's name
    connectors: tuple[str, ...]  # "host:port"
    http: str | None = None  # management URL, if the node serves one

    def __post_init__(self) -> None:
        if not isinstance(self.connectors, tuple):
            object.__setattr__(self, "connectors", tuple(self.connectors))
        _check(self)


def _check(a: Announcement) -> None:
    for field in ("node_id", "unique_id", "cluster"):
        value = getattr(a, field)
        if not isinstance(value, str) or not value:
            raise ValueError(f"announcement {field} must be a non-empty string, got {value!r}")
    for connector in a.connectors:
        if not isinstance(connector, str):
            raise ValueError(f"announcement connector must be a 'host:port' string, got {connector!r}")
        parse_connector(connector)  # ValueError that names the connector
    if a.http is not None and (not isinstance(a.http, str) or not a.http):
        raise ValueError(f"announcement http must be a URL or None, got {a.http!r}")


def encode(a: Announcement) -> bytes:
    """The datagram for `a`; ValueError if it would not fit in one UDP packet."""
    data = _HEADER + _encoder.encode((a.node_id, a.unique_id, a.cluster, a.connectors, a.http))
    if len(data) > MAX_PACKET:
        raise ValueError(
            f"announcement of node {a.node_id!r} is {len(data)} bytes, over the {MAX_PACKET}-byte "
            "UDP limit: announce fewer connectors")
    return data


def decode(data: bytes) -> Announcement:
    """The announcement in one datagram; ValueError (and nothing else) if it is not one."""
    data = bytes(data)
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data[: len(MAGIC)]) and len(data) < len(MAGIC):
            raise ValueError(f"not a petrel announcement: truncated to {len(data)} bytes")
        raise ValueError(f"not a petrel announcement: bad magic {data[:len(MAGIC)]!r}")
    if len(data) == len(MAGIC):
        raise ValueError("petrel announcement truncated: no version byte")
    version = data[len(MAGIC)]
    if version != VERSION:
        raise ValueError(
            f"petrel announcement version {version} is not supported (this broker reads version "
            f"{VERSION}): run the same petrel version on every node of the cluster")
    try:
        node_id, unique_id, cluster, connectors, http = _decoder.decode(data[len(_HEADER):])
    except (msgspec.MsgspecError, ValueError) as exc:  # UnicodeDecodeError for bad UTF-8
        raise ValueError(f"malformed petrel announcement: {exc}") from None
    try:
        return Announcement(node_id, unique_id, cluster, connectors, http)
    except ValueError as exc:
        raise ValueError(f"malformed petrel announcement: {exc}") from None
