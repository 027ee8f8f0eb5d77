"""The phases of one direction of an AMQP 1.0 connection and the one table of their transitions.

Each direction (what we send, what the peer sends) goes: a protocol header; with SASL, sasl
frames until the outcome, then a second (AMQP) header; then open, frames, close. An event a
phase does not list is illegal: the codec raises `AmqpError` (illegal-state) for the peer's,
`AmqpLocalError` for ours.
"""

from __future__ import annotations

from .performatives import SASL_FRAMES, Close, Open, SaslOutcome

__all__ = ["HEADER", "SASL_PHASE", "OPENING", "OPEN", "CLOSED", "TRANSITIONS", "event_of", "transition"]

HEADER, SASL_PHASE, OPENING, OPEN, CLOSED = "header", "sasl", "opening", "open", "closed"

# events
AMQP_HEADER, SASL_HEADER = "amqp-header", "sasl-header"
SASL_FRAME, SASL_OUTCOME = "sasl-frame", "sasl-outcome"
OPEN_FRAME, FRAME, CLOSE_FRAME = "open", "frame", "close"

TRANSITIONS: dict[tuple[str, str], str] = {
    (HEADER, AMQP_HEADER): OPENING,
    (HEADER, SASL_HEADER): SASL_PHASE,
    (SASL_PHASE, SASL_FRAME): SASL_PHASE,
    (SASL_PHASE, SASL_OUTCOME): HEADER,
    (OPENING, OPEN_FRAME): OPEN,
    (OPEN, FRAME): OPEN,
    (OPEN, CLOSE_FRAME): CLOSED,
}

_SASL = frozenset(SASL_FRAMES)


def event_of(kind: type) -> str:
    """The event a performative (or SASL frame) class is."""
    if kind in _SASL:
        return SASL_OUTCOME if kind is SaslOutcome else SASL_FRAME
    if kind is Open:
        return OPEN_FRAME
    if kind is Close:
        return CLOSE_FRAME
    return FRAME


def transition(phase: str, event: str, name: str) -> str:
    """The phase after `event` (`name`: what it is, for the error), or ValueError saying why not."""
    after = TRANSITIONS.get((phase, event))
    if after is not None:
        return after
    if phase == OPENING and event != OPEN_FRAME:
        raise ValueError(f"{name} before open")
    if event == OPEN_FRAME:
        raise ValueError("a second open")
    raise ValueError(f"{name} in phase {phase}")
