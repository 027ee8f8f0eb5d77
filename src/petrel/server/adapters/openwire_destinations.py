"""ActiveMQ's destination names as Petrel's addresses: wildcards and composite destinations.

ActiveMQ separates the words of a name with ``.``, as Petrel does; in a topic consumer's name
``*`` is one word (as in Petrel) and ``>`` all the words that follow (Petrel's ``#``), so
``prices.>`` subscribes to Petrel's pattern address ``prices.#`` and gets what is sent to every
address below ``prices`` (`petrel.core.wildcard_routing`). A producer's composite destination
lists several, comma-separated: ``a,b`` (each of the destination's kind) or
``queue://a,topic://b``; the message goes to each. A queue consumer's wildcard (``orders.>``,
``orders.*.eu``) names every anycast queue it matches, existing or created later
(`consumer_parts`; the consumer follows them in `openwire_consumers`). A consumer's composite
destination takes from each of its parts (each one a name or a wildcard, of the destination's
kind or prefixed). Sends to a wildcard destination are refused with a clear error.
"""

from __future__ import annotations

import functools

from petrel.codec.openwire import Destination
from petrel.core.message import RoutingType
from petrel.core.names import name_problem
from petrel.server.refusals import Refused

__all__ = ["consumer_address", "consumer_parts", "send_targets", "QUEUE_PREFIX", "TOPIC_PREFIX"]

QUEUE_PREFIX = "queue://"
TOPIC_PREFIX = "topic://"
_ANY_WORDS = ">"  # ActiveMQ's "the rest of the words"
_WILDCARDS = ("*", ">")


def consumer_address(dest: Destination) -> tuple[str, bool]:
    """The Petrel address (or pattern) a consumer of `dest` subscribes to, and whether it is a
    pattern (its words checked here: a pattern is not a name `petrel.core.names` accepts)."""
    name = dest.name or ""
    if "," in name:
        raise Refused(f"composite destination {name!r}: one destination here (`consumer_parts` splits them)")
    return _consumer_name(name)


def _consumer_name(name: str) -> tuple[str, bool]:
    words = name.split(".")
    if not any(w in _WILDCARDS for w in words):
        return name, False
    if _ANY_WORDS in words[:-1]:
        raise Refused(f"'>' must be the last word of a wildcard destination, not in {name!r}")
    problem = name_problem(".".join("w" if w in _WILDCARDS else w for w in words))
    if problem is not None:
        raise Refused(f"invalid destination {name!r}: {problem}")
    return ".".join("#" if w == _ANY_WORDS else w for w in words), True


def consumer_parts(dest: Destination) -> list[tuple[str, RoutingType, bool]]:
    """What a consumer of `dest` takes from: (address or pattern, routing type, is a pattern)."""
    name = dest.name or ""
    default = RoutingType.MULTICAST if dest.is_topic else RoutingType.ANYCAST
    out: list[tuple[str, RoutingType, bool]] = []
    for part in name.split(","):
        part, routing = _prefixed(part.strip(), default)
        if part:
            address, pattern = _consumer_name(part)
            if (address, routing, pattern) not in out:
                out.append((address, routing, pattern))
    if not out:
        raise Refused(f"composite destination {name!r} names no destination")
    return out


def _prefixed(part: str, default: RoutingType) -> tuple[str, RoutingType]:
    """A composite destination's part without its ``queue://``/``topic://`` prefix, and its kind."""
    if part.startswith(QUEUE_PREFIX):
        return part[len(QUEUE_PREFIX):], RoutingType.ANYCAST
    if part.startswith(TOPIC_PREFIX):
        return part[len(TOPIC_PREFIX):], RoutingType.MULTICAST
    return part, default


@functools.lru_cache(maxsize=256)
def send_targets(dest: Destination) -> list[tuple[str, RoutingType]]:
    """The addresses (and routing types) a message sent to `dest` goes to: one, or each of a
    composite destination's (remembered per destination: the same list, not to be changed)."""
    name = dest.name or ""
    default = RoutingType.MULTICAST if dest.is_topic else RoutingType.ANYCAST
    if "," not in name:
        _no_wildcard(name)
        return [(name, default)]
    out = []
    for part in name.split(","):
        part, routing = _prefixed(part.strip(), default)
        _no_wildcard(part)
        if part and (part, routing) not in out:
            out.append((part, routing))
    if not out:
        raise Refused(f"composite destination {name!r} names no destination")
    return out


def _no_wildcard(name: str) -> None:
    if any(w in _WILDCARDS for w in name.split(".")):
        raise Refused(f"cannot send to the wildcard destination {name!r} (wildcards are for consumers here)")
