"""CORE, Petrel's own binary protocol, as a sans-IO codec.

:class:`CoreConnection` turns received bytes into events (frozen structs, one
class per frame type, see :mod:`.events`) and events into bytes, enforcing the
preamble, frame size limits and the connection state table. Wire constants are
in :mod:`.frames`.
"""

from . import cluster, cursors, replication  # noqa: F401  (register the cluster, cursor and replication frame types)
from .connection import CoreConnection, decode_payload, encode_frame
from .events import *  # noqa: F401,F403
from .events import __all__ as _events_all
from .events import range_of
from .frames import (
    CAPABILITIES,
    CREDIT_OVERHEAD,
    DEFAULT_LARGE_MESSAGE_SIZE,
    DEFAULT_MAX_FRAME_SIZE,
    HEADER,
    MAGIC,
    NEED_DATA,
    NO_ROUTING_TYPE,
    PREAMBLE,
    PROTOCOL_VERSIONS,
    RANGES,
    DisconnectCode,
    ErrorCode,
    FrameRange,
    FrameType,
    credit_of,
)
from .state import Phase, Role

__all__ = [
    "CoreConnection",
    "encode_frame",
    "decode_payload",
    "range_of",
    "CAPABILITIES",
    "CREDIT_OVERHEAD",
    "DEFAULT_LARGE_MESSAGE_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER",
    "MAGIC",
    "NEED_DATA",
    "NO_ROUTING_TYPE",
    "PREAMBLE",
    "PROTOCOL_VERSIONS",
    "RANGES",
    "DisconnectCode",
    "ErrorCode",
    "FrameRange",
    "FrameType",
    "credit_of",
    "Phase",
    "Role",
    *_events_all,
]
