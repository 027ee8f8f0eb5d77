"""Which packets each side of an MQTT connection may send, and when (one table, as h11's).

A client sends CONNECT first and once; a server answers with CONNACK first and once. AUTH is
5.0's. Every other packet belongs to one direction, or to both (PUBLISH and its acks,
DISCONNECT).
"""

from __future__ import annotations

from petrel.codec.roles import Role

from .codes import PacketType as T

__all__ = ["CLIENT_SENDS", "SERVER_SENDS", "may_send", "may_receive", "receivable_when_open"]

BOTH = frozenset({T.PUBLISH, T.PUBACK, T.PUBREC, T.PUBREL, T.PUBCOMP, T.DISCONNECT, T.AUTH})
CLIENT_SENDS = BOTH | {T.CONNECT, T.SUBSCRIBE, T.UNSUBSCRIBE, T.PINGREQ}
SERVER_SENDS = BOTH | {T.CONNACK, T.SUBACK, T.UNSUBACK, T.PINGRESP}
_OPENING = {Role.CLIENT: T.CONNECT, Role.SERVER: T.CONNACK}


def may_send(role: Role, opened: bool, ptype: T, v5: bool) -> str | None:
    """Why `role` may not send `ptype` now, or None when it may. `opened`: its CONNECT or
    CONNACK went out already."""
    return _check(role, opened, ptype, v5, "send")


def may_receive(role: Role, opened: bool, ptype: T, v5: bool) -> str | None:
    """Why `role` may not receive `ptype` now (the peer's side of the table)."""
    peer = Role.CLIENT if role is Role.SERVER else Role.SERVER
    return _check(peer, opened, ptype, v5, "send")


def _check(sender: Role, opened: bool, ptype: T, v5: bool, verb: str) -> str | None:
    allowed = CLIENT_SENDS if sender is Role.CLIENT else SERVER_SENDS
    who = sender.value
    if ptype not in allowed:
        return f"a {who} does not {verb} {ptype.name}"
    if ptype == T.AUTH and not v5:
        return "AUTH is a 5.0 packet"
    opening = _OPENING[sender]
    if not opened and ptype not in (opening, T.DISCONNECT if sender is Role.SERVER else opening):
        return f"{ptype.name} before {opening.name}: a {who} {verb}s {opening.name} first"
    if opened and ptype == opening:
        return f"a second {opening.name}"
    return None


def receivable_when_open(role: Role, v5: bool) -> frozenset[int]:
    """The packet types `role` may receive once the connection is open (its peer's, less the
    opening one, and AUTH unless 5.0): those need no other check."""
    peer = CLIENT_SENDS if role is Role.SERVER else SERVER_SENDS
    return frozenset(int(t) for t in peer if t not in (T.CONNECT, T.CONNACK) and (v5 or t != T.AUTH))
