"""Clustered grouping at the protocol edge: a grouped message a REMOTE node has no decision
for waits, holding its connection (so later frames stay behind it), until the LOCAL grouping
handler answers; then the frame is handled again, or refused with the reason."""

from __future__ import annotations

from collections.abc import Callable

from petrel.core.message import GROUP_ID, Message, RoutingType

__all__ = ["wait_for_group"]


def wait_for_group(adapter, address: str, properties: dict, routing_type: RoutingType | None,
                   again: Callable[[], None], refuse: Callable[[str], None]) -> bool:
    """True when the frame now waits (`again()` or `refuse(reason)` follows, connection held)."""
    office = adapter.office
    grouping = office.grouping
    if grouping is None or not office.remote_by_address.get(address):
        return False
    probe = Message(0, address, b"", properties)
    if not grouping.needs_decision(probe):
        return False
    adapter.hold()

    def decided(key: str | None) -> None:
        if key is not None and grouping.resolve(key) is not None:
            adapter.resume_held(again)
            return
        group = properties.get(GROUP_ID)
        if key is not None:
            reason = f"group {group!r} on {address} belongs to {key}, which this node cannot reach now"
        else:
            reason = (f"no grouping decision for group {group!r} on {address} within {grouping.model.timeout} ms: "
                      "is the node with the LOCAL grouping handler up?")
        adapter.resume_held(lambda: refuse(reason))

    grouping.ask(probe, decided, routing_type)
    return True
