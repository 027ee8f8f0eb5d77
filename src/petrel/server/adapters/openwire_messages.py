"""OpenWire messages to Petrel's and back: the JMS headers a message carries as fields, typed
properties, and the kinds of body (`petrel.server.adapters.openwire_bodies`: a text message's
text in UTF-8, a map or stream as JSON for the other protocols, compressed bodies inflated).

Petrel notes what only OpenWire can say under ``_OW_`` properties (see
`petrel.core.message_props`): the JMS message kind (`KIND`), the Java types of properties a
plain int or float would lose (`TYPES`), and the JMSReplyTo's kind (`REPLY_KIND`). No client
sees them; a client's own internal properties (``_MQTT_*``, ``_AMQP_*``, ``_OW_*``) are dropped
on the way in and never sent on the way out (`public`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from petrel.codec.openwire import DataType, Destination, Message as OwMessage, MessageId, ProducerId, new_message
from petrel.codec.openwire.marshal import JavaByte, JavaFloat, JavaLong, JavaShort
from petrel.core.message import DUPLICATE_ID, ORIGINAL_ADDRESS, ORIGINAL_QUEUE, Message
from petrel.core.message_props import CORRELATION_ID, GROUP_ID, GROUP_SEQ, REPLY_TO, SUBJECT, public, text
from petrel.server.adapters.openwire_bodies import KIND, BodyError, inflate, to_openwire_body, to_petrel_body
from petrel.server.refusals import Refused
from petrel.storage.large import LargeBodyMissing

if TYPE_CHECKING:
    from petrel.storage.large import LargeMessageStore

__all__ = ["KIND", "TYPES", "REPLY_KIND", "to_message", "to_openwire", "with_whole_body"]

log = logging.getLogger("petrel.server.openwire")

TYPES = "_OW_TYPES"  # the Java types of properties a plain int or float would lose: "l:name,s:name..."
REPLY_KIND = "_OW_REPLY_KIND"  # the JMSReplyTo's kind (queue, topic, temporary queue or topic)
JMS_TYPE = "JMSType"

_CODES = {JavaLong: "l", JavaShort: "s", JavaByte: "b", JavaFloat: "f"}
_JAVA = {code: cls for cls, code in _CODES.items()}
#: the destination of a dispatched message, one object a name (the codec caches its bytes by object)
_destination = functools.lru_cache(maxsize=4096)(Destination)


def _plain(properties: dict[str, Any]) -> dict[str, Any]:
    """Properties as Petrel keeps them (plain ints and floats; a map or list value as text), the
    Java types a plain number would lose noted under `TYPES`; a client's internal ones dropped."""
    out: dict[str, Any] = {}
    types = []
    for name, value in public(properties).items():
        cls = type(value)
        code = _CODES.get(cls)
        if code is not None:
            types.append(f"{code}:{name}")
            value = float(value) if cls is JavaFloat else int(value)
        elif cls is dict or cls is list:
            value = str(value)
        out[name] = value
    if types:
        out[TYPES] = ",".join(types)
    return out


def to_message(m: OwMessage, address: str, message_id: int, *, user: str | None,
               fault_tolerant: bool) -> Message:
    """Petrel's message for an OpenWire one sent to `address` (`fault_tolerant`: the producer's
    message id is its duplicate id, as a failover client resends what had no response). Its user
    (JMSXUserID) is the connection's authenticated `user`; without one (security off, anonymous)
    the client's own JMSXUserID, as ActiveMQ keeps it when it does not populate it."""
    props = _plain(m.properties) if m.properties else {}
    try:
        content = inflate(m.kind, m.content) if m.compressed and m.content else m.content
        body = to_petrel_body(m.kind, content, props)
    except BodyError as exc:
        raise Refused(str(exc)) from None
    props[KIND] = int(m.kind)
    if fault_tolerant and m.message_id is not None and DUPLICATE_ID not in props:
        props[DUPLICATE_ID] = str(m.message_id)
    if m.correlation_id is not None:
        props[CORRELATION_ID] = m.correlation_id
    if m.type is not None:
        props[JMS_TYPE] = m.type
    if m.group_id is not None:
        props[GROUP_ID] = m.group_id
        props[GROUP_SEQ] = m.group_sequence
    if m.reply_to is not None and m.reply_to.name:
        props[REPLY_TO] = m.reply_to.name
        if m.reply_to.kind != DataType.ACTIVEMQ_QUEUE:
            props[REPLY_KIND] = int(m.reply_to.kind)
    return Message(id=message_id, address=address, body=body, properties=props,
                   durable=m.persistent, priority=max(0, min(9, m.priority)), expiration=max(0, m.expiration),
                   timestamp=m.timestamp, user_id=user if user is not None else m.user_id)


def _original(address: str, properties: dict) -> Destination:
    """Where a moved message was (ActiveMQ's originalDestination): a queue, or the topic when it
    left a subscription (a queue named otherwise than its address)."""
    queue = properties.get(ORIGINAL_QUEUE)
    kind = DataType.ACTIVEMQ_QUEUE if queue is None or str(queue) == address else DataType.ACTIVEMQ_TOPIC
    return Destination(kind, address)


def with_whole_body(m: Message, large: LargeMessageStore) -> Message:
    """A large message (sent over another protocol, its body in its own file) with its body read
    whole: OpenWire carries a body in one frame."""
    try:
        body = large.read(m.large)
    except LargeBodyMissing as exc:
        log.error("message %s goes out without its body: %s", m.id, exc, extra={"event": "large.missing"})
        body = b""
    return dataclasses.replace(m, body=body, large=None, wire_cache=None)


def _correlation(value: object) -> str | None:
    """A JMSCorrelationID: bytes (AMQP binary, MQTT correlation data, a CORE bytes property) as
    the UTF-8 text they hold, as JMS's setJMSCorrelationIDAsBytes keeps them, or base64 text
    when they are not UTF-8 (as STOMP gets them)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return text(value)
    return str(value)


def to_openwire(m: Message, kind: int, producer: ProducerId, redelivery_counter: int) -> OwMessage:
    """The OpenWire message a consumer of a destination of `kind` receives for `m` (which has
    been delivered `redelivery_counter` times before)."""
    properties = m.properties
    props = dict(public(properties))
    types = properties.get(TYPES)
    if types:
        for item in str(types).split(","):
            code, _, name = item.partition(":")
            if name in props and code in _JAVA:
                try:
                    props[name] = _JAVA[code](props[name])
                except (TypeError, ValueError):
                    pass
    body_kind, content = to_openwire_body(properties, m.body)
    correlation = props.pop(CORRELATION_ID, None)
    jms_type = props.pop(JMS_TYPE, None)
    if jms_type is None:  # an AMQP subject is a JMSType (as Qpid JMS and Artemis map it)
        jms_type = props.pop(SUBJECT, None)
    group = props.pop(GROUP_ID, None)
    group_seq = props.pop(GROUP_SEQ, 0)
    reply_to = props.pop(REPLY_TO, None)
    original = properties.get(ORIGINAL_ADDRESS)  # a dead letter's or an expired message's origin
    return new_message(  # (OwMessage's fields, built faster)
        kind=body_kind, producer_id=producer, destination=_destination(kind, m.address),
        message_id=MessageId(producer_id=producer, producer_sequence_id=m.id, broker_sequence_id=m.id),
        persistent=m.durable, priority=m.priority, expiration=m.expiration, timestamp=m.timestamp,
        content=content, properties=props or None,
        correlation_id=_correlation(correlation),
        type=None if jms_type is None else str(jms_type),
        group_id=None if group is None else str(group), group_sequence=int(group_seq or 0),
        reply_to=None if reply_to is None else Destination(
            int(properties.get(REPLY_KIND, DataType.ACTIVEMQ_QUEUE)), str(reply_to)),
        original_destination=None if original is None else _original(str(original), properties),
        redelivery_counter=redelivery_counter,
        user_id=m.user_id, broker_in_time=m.timestamp, broker_out_time=int(time.time() * 1000))
