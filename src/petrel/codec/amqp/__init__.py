"""AMQP 1.0 codec, sans-IO.

:class:`AmqpConnection` turns received bytes into :class:`ProtocolHeader`, :class:`Frame` and
:class:`Empty` events and performatives into bytes; :mod:`.types` is the type system,
:mod:`.performatives` the composite types, :mod:`.message` the message sections.
"""

from .connection import AmqpConnection
from .errors import AmqpError, AmqpLocalError
from .frames import AMQP, NEED_DATA, SASL, Empty, Frame, ProtocolHeader, detect, protocol_header
from .message import AmqpMessage, decode_message, encode_message
from .sasl import parse_plain

__all__ = [
    "AmqpConnection", "AmqpError", "AmqpLocalError", "AMQP", "SASL", "NEED_DATA", "Empty", "Frame",
    "ProtocolHeader", "detect", "protocol_header", "AmqpMessage", "decode_message", "encode_message",
    "parse_plain",
]
