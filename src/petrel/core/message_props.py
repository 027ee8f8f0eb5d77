"""Message properties as every protocol adapter reads them: one place for the shared names,
for which properties are a protocol's internal ones, and for how a typed value becomes text.

Protocol-neutral names. What a protocol carries as a field of its own is kept in the message
under one name, whichever protocol it came from, and each adapter maps that name to its field
on the way in and out:

===================  ===================  ======================================================
property             name                 STOMP / CORE / MQTT 5 / AMQP 1.0
===================  ===================  ======================================================
content type         ``content-type``     header / property / content type / content-type
correlation id       ``correlation-id``   header / property / correlation data / correlation-id
reply-to             ``reply-to``         header / property / response topic / reply-to
subject              ``subject``          header / property / user property / subject
group id, sequence   ``JMSXGroupID``,     headers / properties / user properties / group-id,
                     ``JMSXGroupSeq``     group-sequence
duplicate id         ``_AMQ_DUPL_ID``     as Artemis names it, on every protocol
user id              `Message.user_id`    (a field of the message, not a property)
===================  ===================  ======================================================

A reply-to holds a Petrel address (``a.b``): MQTT's response topic ``a/b`` is turned into one on
the way in and back on the way out, as topics are (`petrel.server.adapters.mqtt_topics`).

Internal properties. A protocol keeps what only it can say under its own prefix
(``_MQTT_``: QoS, retain, the publisher's client id, the payload format indicator...;
``_AMQP_``: the body's kind, the typed message id and correlation id, message annotations;
``_OW_``: the JMS message kind an OpenWire producer sent).
They are the adapter's own notes: no client sees them, not even one of the same protocol;
the adapter of that protocol reads them when it converts the message on the way out (AMQP
restoring its message id's type, MQTT its retain flag). `public` gives the properties a client
of any protocol may see, and is also what a client's send keeps: no client sets them (a STOMP
header ``_AMQP_BODY`` would otherwise make AMQP receivers parse a body as encoded sections).

Text. STOMP headers and MQTT user properties are strings; a typed value (CORE's, AMQP's)
reaches them as `text`: a string as it is, a boolean as ``true``/``false`` (as JMS writes it),
a number in decimal, and bytes as standard base64 (RFC 4648, with padding), so a bytes value is
always carried and never shown as Python's ``b'...'``.
"""

from __future__ import annotations

import base64

from petrel.core.message import DUPLICATE_ID, GROUP_ID

__all__ = ["CONTENT_TYPE", "CORRELATION_ID", "REPLY_TO", "SUBJECT", "GROUP_ID", "GROUP_SEQ", "DUPLICATE_ID",
           "MQTT_PREFIX", "AMQP_PREFIX", "OPENWIRE_PREFIX", "INTERNAL_PREFIXES", "is_internal", "public", "text"]

CONTENT_TYPE = "content-type"
CORRELATION_ID = "correlation-id"
REPLY_TO = "reply-to"
SUBJECT = "subject"
GROUP_SEQ = "JMSXGroupSeq"

MQTT_PREFIX = "_MQTT_"
AMQP_PREFIX = "_AMQP_"
OPENWIRE_PREFIX = "_OW_"
#: Prefixes of the protocols' internal properties (str.startswith takes the tuple).
INTERNAL_PREFIXES = (MQTT_PREFIX, AMQP_PREFIX, OPENWIRE_PREFIX)


def is_internal(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIXES)


def public(props: dict) -> dict:
    """`props` without the protocols' internal properties (`props` itself when it has none)."""
    for k in props:
        if k.startswith(INTERNAL_PREFIXES):
            break
    else:
        return props
    return {k: v for k, v in props.items() if not k.startswith(INTERNAL_PREFIXES)}


def text(value: object) -> str:
    """A property's value where only text is carried (STOMP headers, MQTT user properties)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    return str(value)
