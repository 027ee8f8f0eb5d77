"""Rendering MESSAGE and RECEIPT frames on the hot path, without building frame objects.

Our headers come first, then the message's properties, rendered once per message and STOMP
version and cached on it (`Message.wire_put`, key ``stomp<version>``), so a message delivered to
several subscriptions, or redelivered, is rendered once. Other protocols' internal properties
are left out and typed values become text as `petrel.core.message_props` says (bytes in base64).
"""

from __future__ import annotations

from petrel.codec.stomp import Frame
from petrel.core.message import WIRE_CACHE_LIMIT
from petrel.core.message_props import INTERNAL_PREFIXES, public
from petrel.core.message_props import text as header_text
from petrel.core.queue import MessageReference

__all__ = ["MESSAGE_HEADERS", "header_text", "headers_of", "render_properties", "message_prefix", "render_message",
           "receipt_bytes"]

# Headers the broker writes on MESSAGE; a property of the same name is not repeated.
MESSAGE_HEADERS = frozenset(
    {"subscription", "message-id", "destination", "persistent", "priority", "expires", "timestamp",
     "redelivered", "ack", "content-length"}
)

#: The wire-cache key of each STOMP version (their escaping differs).
_CACHE_KEYS = {"1.0": "stomp1.0", "1.1": "stomp1.1", "1.2": "stomp1.2"}


def headers_of(properties: dict) -> dict[str, str]:
    """A message's properties as the headers of a MESSAGE built as a frame (large bodies)."""
    return {str(k): header_text(v) for k, v in public(properties).items()}


def render_properties(properties: dict, escaping) -> bytes:
    """`k:v\n` lines for a MESSAGE, escaped for the version. STOMP 1.0 has no escaping: a
    property it cannot carry (a line break or NUL in it, a colon in its name) is left out."""
    lines = []
    escapes = bool(escaping.decode_table)
    for k, v in properties.items():
        k = str(k)
        if k in MESSAGE_HEADERS or not k or (k[0] == "_" and k.startswith(INTERNAL_PREFIXES)):
            continue
        v = v if isinstance(v, str) else header_text(v)
        if escapes:
            if escaping.needs_escape(k):
                k = escaping.escape(k)
            if escaping.needs_escape(v):
                v = escaping.escape(v)
            if "\x00" in k or "\x00" in v:
                continue
        elif "\n" in k or "\n" in v or "\r" in k or "\r" in v or ":" in k or "\x00" in k or "\x00" in v:
            continue
        lines.append(f"{k}:{v}\n")
    return "".join(lines).encode("utf-8", "replace")


def message_prefix(escaping, sub_id: str, dest: str) -> bytes | None:
    """`MESSAGE\nsubscription:..\ndestination:..\n` for a subscription (None: cannot be sent as is)."""
    text = sub_id + dest
    if escaping.decode_table:
        if escaping.needs_escape(text):
            sub_id, dest = escaping.escape(sub_id), escaping.escape(dest)
    elif "\n" in text or "\r" in text:
        return None
    return f"MESSAGE\nsubscription:{sub_id}\ndestination:{dest}\n".encode()


def render_message(prefix: bytes, consumer_id: int, ref: MessageReference, version: str | None, ack_mode: str,
                   escaping) -> bytes:
    """The whole MESSAGE frame of a (non-large) message for one subscription."""
    m = ref.message
    key = _CACHE_KEYS.get(version, "stomp")  # type: ignore[arg-type]
    cache = m.wire_cache
    if cache is not None and cache[0] is key:
        props = cache[1]
    else:
        props = None if cache is None else m.wire_get(key)
        if props is None:
            props = render_properties(m.properties, escaping) if m.properties else b""
            if cache is None and len(props) <= WIRE_CACHE_LIMIT:  # (the first entry: `wire_put`, inlined)
                m.wire_cache = (key, props)
            else:
                m.wire_put(key, props, len(props))
    ack_id = f"{consumer_id}.{ref.seq}"
    head = (
        f"message-id:{ack_id}\npersistent:{'true' if m.durable else 'false'}\npriority:{m.priority}\n"
        f"expires:{m.expiration}\ntimestamp:{m.timestamp}\n"
        f"{'redelivered:true' + chr(10) if ref.delivery_count else ''}"
        f"{'ack:' + ack_id + chr(10) if version == '1.2' and ack_mode != 'auto' else ''}"
        f"content-length:{len(m.body)}\n"
    ).encode()
    return b"".join((prefix, head, props, b"\n", m.body, b"\x00"))


def receipt_bytes(codec, receipt_id: str) -> bytes:
    """A RECEIPT frame; through the codec only when the id needs escaping."""
    escaping = codec._escaping
    if escaping.decode_table and escaping.needs_escape(receipt_id):
        return codec.send(Frame("RECEIPT", {"receipt-id": receipt_id}))
    if not escaping.decode_table and ("\n" in receipt_id or "\r" in receipt_id):
        return codec.send(Frame("RECEIPT", {"receipt-id": receipt_id}))
    return b"RECEIPT\nreceipt-id:" + receipt_id.encode() + b"\n\n\x00"
