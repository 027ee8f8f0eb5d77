"""CORE, Petrel's own protocol, on the post office: the server side of `petrel.codec.core`.

`adapter` holds the connection (read loop, ordered replies after the disk, TTL, sessions,
sends, transactions); `consuming` the consumer frames; `large` bodies streamed through
large-message files; `admin` address, queue, query and browse requests; `session` the
per-connection state.
"""

from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["CoreAdapter"]
