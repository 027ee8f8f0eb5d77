"""What the headers of a client's STOMP frame mean, and how a frame is refused.

`StompError` is a request we refuse (the adapter answers it with an ERROR frame, then closes
the connection); `parse_destination` and `int_header` read the headers that SEND and
SUBSCRIBE share.
"""

from __future__ import annotations

from petrel.core.message import RoutingType

__all__ = ["StompError", "int_header", "parse_destination"]


class StompError(Exception):
    """A request we refuse: becomes an ERROR frame, then the connection closes."""


def parse_destination(dest: str) -> tuple[str, RoutingType | None]:
    if dest.startswith("/queue/"):
        return dest[7:], RoutingType.ANYCAST
    if dest.startswith("/topic/"):
        return dest[7:], RoutingType.MULTICAST
    return dest, None


def int_header(headers: dict[str, str], name: str, low: int | None, high: int | None) -> int:
    text = headers[name]
    try:
        value = int(text)
    except ValueError:
        raise StompError(f"header {name} must be an integer, not {text!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise StompError(f"header {name} out of range: {value}")
    return value
