"""What became of a send: the post office's answer to the protocol adapters."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["SendOutcome", "SendResult"]


class SendOutcome(Enum):
    ROUTED = "routed"
    UNROUTED = "unrouted"
    DUPLICATE = "duplicate"
    QUEUED_IN_TX = "queued-in-transaction"
    DROPPED = "dropped"  # address full, DROP policy


@dataclass(slots=True)
class SendResult:
    outcome: SendOutcome
    queues: int = 0
    blocked: bool = False  # BLOCK policy: the producer should stop until space frees
    throttled: bool = False  # flow control: consumers are behind; pause the producer a moment
