"""The error a malformed or illegal MQTT packet raises: it carries the reason code to answer with."""

from __future__ import annotations

from petrel.codec.errors import LocalProtocolError, RemoteProtocolError

from .codes import ReasonCode

__all__ = ["MqttProtocolError", "MqttLocalError"]


class MqttProtocolError(RemoteProtocolError):
    """The peer broke the protocol. `reason` is the 5.0 reason code for the DISCONNECT (or the
    CONNACK, before CONNECT was accepted) that says so."""

    def __init__(self, message: str, reason: int = ReasonCode.MALFORMED_PACKET) -> None:
        super().__init__(message, {"reason": f"{int(reason):#04x}"})
        self.reason = ReasonCode(reason)


class MqttLocalError(LocalProtocolError):
    """We tried to send a packet the protocol does not allow now (or cannot encode)."""
