"""MQTT topic names and filters, and the Petrel addresses and queues they become.

As Artemis maps them: the level separator ``/`` is the address word separator ``.``, the
single-level wildcard ``+`` is ``*`` and the multi-level ``#`` stays ``#`` (``a/+/c`` is
``a.*.c``, ``a/#`` is ``a.#``). The way back turns ``.`` into ``/``, so a topic holding ``.``
comes back with ``/`` there (as in Artemis). Topics Petrel cannot name are refused with
TOPIC_NAME_INVALID / TOPIC_FILTER_INVALID: empty levels (``/a``, ``a//b``, ``a/``), and ``*``
inside a level. A shared subscription ``$share/<group>/<filter>`` is one queue for the group.
"""

from __future__ import annotations

from dataclasses import dataclass

from petrel.codec.mqtt import ReasonCode

__all__ = ["TopicError", "topic_to_address", "filter_to_address", "address_to_topic", "parse_filter",
           "Filter", "queue_name"]


class TopicError(ValueError):
    def __init__(self, message: str, reason: ReasonCode) -> None:
        super().__init__(message)
        self.reason = reason


def _check_levels(text: str, what: str, reason: ReasonCode) -> list[str]:
    if not text:
        raise TopicError(f"an empty {what}", reason)
    levels = text.split("/")
    if any(not level for level in levels):
        raise TopicError(f"{what} {text!r} has an empty level, which has no Petrel address", reason)
    for level in levels:
        if "*" in level or (("#" in level or "+" in level) and len(level) > 1):
            raise TopicError(f"{what} {text!r}: '*', or '+' and '#' inside a level", reason)
    return levels


def topic_to_address(topic: str) -> str:
    """The address a PUBLISH to `topic` goes to."""
    levels = _check_levels(topic, "topic name", ReasonCode.TOPIC_NAME_INVALID)
    if "+" in levels or "#" in levels:
        raise TopicError(f"topic name {topic!r} holds a wildcard", ReasonCode.TOPIC_NAME_INVALID)
    return ".".join(levels)


def filter_to_address(topic_filter: str) -> str:
    levels = _check_levels(topic_filter, "topic filter", ReasonCode.TOPIC_FILTER_INVALID)
    if "#" in levels[:-1]:
        raise TopicError(f"topic filter {topic_filter!r}: '#' must be the last level",
                         ReasonCode.TOPIC_FILTER_INVALID)
    return ".".join("*" if level == "+" else level for level in levels)


def address_to_topic(address: str) -> str:
    return address.replace(".", "/")


@dataclass(frozen=True, slots=True)
class Filter:
    text: str  # as the client gave it
    address: str  # the Petrel address (a pattern for a wildcard filter)
    group: str | None = None  # shared subscription group

    @property
    def wildcard(self) -> bool:
        words = self.address.split(".")
        return "*" in words or "#" in words


def parse_filter(text: str) -> Filter:
    if text.startswith("$share/"):
        _, _, rest = text.partition("/")
        group, sep, inner = rest.partition("/")
        if not sep or not group or "+" in group or "#" in group or not inner:
            raise TopicError(f"shared subscription {text!r} is not $share/<group>/<filter>",
                             ReasonCode.TOPIC_FILTER_INVALID)
        if "." in group or "*" in group:
            raise TopicError(f"shared subscription group {group!r} holds '.' or '*'",
                             ReasonCode.TOPIC_FILTER_INVALID)
        return Filter(text, filter_to_address(inner), group)
    return Filter(text, filter_to_address(text))


def queue_name(client_id: str, f: Filter) -> str:
    """The subscription queue: ``<client id>.<address>``, or ``$share.<group>.<address>``."""
    if f.group is not None:
        return f"$share.{f.group}.{f.address}"
    return f"{client_id}.{f.address}"
