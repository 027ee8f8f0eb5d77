"""SASL mechanisms the broker takes (RFC 4616 PLAIN, RFC 4505 ANONYMOUS, RFC 4422 EXTERNAL: the
identity the TLS layer established)."""

from __future__ import annotations

from .errors import DECODE_ERROR, AmqpError

__all__ = ["PLAIN", "ANONYMOUS", "EXTERNAL", "parse_plain"]

PLAIN = "PLAIN"
ANONYMOUS = "ANONYMOUS"
EXTERNAL = "EXTERNAL"


def parse_plain(response: bytes | None) -> tuple[str, str, str]:
    """(authzid, authcid, password) of a PLAIN initial response ``authzid NUL authcid NUL passwd``."""
    parts = (response or b"").split(b"\x00")
    if len(parts) != 3:
        raise AmqpError(DECODE_ERROR, "a SASL PLAIN response is authzid NUL authcid NUL password")
    try:
        authzid, authcid, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise AmqpError(DECODE_ERROR, "a SASL PLAIN response that is not UTF-8") from None
    return authzid, authcid, password
