"""MQTT 3.1, 3.1.1 and 5.0 codec, sans-IO.

:class:`MqttConnection` turns received bytes into packet events (frozen dataclasses in
`packets`) and packets into bytes; `detect` recognises a client's CONNECT for the protocol
registry. Malformed or illegal input raises :class:`MqttProtocolError`, whose ``reason`` is
the reason code to answer with.
"""

from .codes import ConnackCode, PacketType, PropertyId, ReasonCode, v3_connack_code
from .connection import DEFAULT_MAX_PACKET_SIZE, MqttConnection, detect
from .errors import MqttLocalError, MqttProtocolError
from .packets import (
    NEED_DATA,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from .wire import decode_varint_prefix, encode_varint

__all__ = [
    "MqttConnection", "detect", "DEFAULT_MAX_PACKET_SIZE", "MqttProtocolError", "MqttLocalError",
    "PacketType", "ReasonCode", "ConnackCode", "PropertyId", "v3_connack_code", "NEED_DATA",
    "Connect", "Connack", "Publish", "Puback", "Pubrec", "Pubrel", "Pubcomp", "Subscribe", "Subscription",
    "Suback", "Unsubscribe", "Unsuback", "Pingreq", "Pingresp", "Disconnect", "Auth", "Will",
    "encode_varint", "decode_varint_prefix",
]
