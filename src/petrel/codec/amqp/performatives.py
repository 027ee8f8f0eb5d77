"""The AMQP 1.0 composite types, by descriptor: performatives (part 2.7), SASL (5.3), error,
delivery states and terminus (2.8, 3.4, 3.5), transactions (4.5) and message sections (3.2).

Each is a frozen dataclass made by :func:`~.composite.composite`; field names follow the
specification with ``_`` for ``-``.
"""

from __future__ import annotations

from .composite import composite

__all__ = [
    "Open", "Begin", "Attach", "Flow", "Transfer", "Disposition", "Detach", "End", "Close",
    "Error", "SaslMechanisms", "SaslInit", "SaslChallenge", "SaslResponse", "SaslOutcome",
    "Received", "Accepted", "Rejected", "Released", "Modified", "Source", "Target",
    "DeleteOnClose", "DeleteOnNoLinks", "DeleteOnNoMessages", "DeleteOnNoLinksOrMessages",
    "Coordinator", "Declare", "Discharge", "Declared", "TransactionalState",
    "Header", "DeliveryAnnotations", "MessageAnnotations", "Properties", "ApplicationProperties",
    "Data", "AmqpSequence", "AmqpValue", "Footer",
    "PERFORMATIVES", "SASL_FRAMES", "ROLE_SENDER", "ROLE_RECEIVER",
    "SND_UNSETTLED", "SND_SETTLED", "SND_MIXED", "RCV_FIRST", "RCV_SECOND", "SASL_OK", "SASL_AUTH",
]

# Link roles (attach.role, disposition.role) and settle modes (2.8.2, 2.8.3).
ROLE_SENDER, ROLE_RECEIVER = False, True
SND_UNSETTLED, SND_SETTLED, SND_MIXED = 0, 1, 2
RCV_FIRST, RCV_SECOND = 0, 1
# SASL outcome codes (5.3.3.6)
SASL_OK, SASL_AUTH, SASL_SYS, SASL_SYS_PERM, SASL_SYS_TEMP = 0, 1, 2, 3, 4

Error = composite("Error", 0x1d, "amqp:error:list", [
    ("condition", "symbol!", None), ("description", "string", None), ("info", "fields", None)])

# -- performatives -----------------------------------------------------------------------------

Open = composite("Open", 0x10, "amqp:open:list", [
    ("container_id", "string!", None), ("hostname", "string", None),
    ("max_frame_size", "uint", 0xFFFFFFFF), ("channel_max", "ushort", 0xFFFF),
    ("idle_time_out", "uint", None), ("outgoing_locales", "symbols", None),
    ("incoming_locales", "symbols", None), ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None), ("properties", "fields", None)])

Begin = composite("Begin", 0x11, "amqp:begin:list", [
    ("remote_channel", "ushort", None), ("next_outgoing_id", "uint!", None),
    ("incoming_window", "uint!", None), ("outgoing_window", "uint!", None),
    ("handle_max", "uint", 0xFFFFFFFF), ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None), ("properties", "fields", None)])

Attach = composite("Attach", 0x12, "amqp:attach:list", [
    ("name", "string!", None), ("handle", "uint!", None), ("role", "bool!", None),
    ("snd_settle_mode", "ubyte", SND_MIXED), ("rcv_settle_mode", "ubyte", RCV_FIRST),
    ("source", "*", None), ("target", "*", None), ("unsettled", "map", None),
    ("incomplete_unsettled", "bool", False), ("initial_delivery_count", "uint", None),
    ("max_message_size", "ulong", None), ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None), ("properties", "fields", None)])

Flow = composite("Flow", 0x13, "amqp:flow:list", [
    ("next_incoming_id", "uint", None), ("incoming_window", "uint!", None),
    ("next_outgoing_id", "uint!", None), ("outgoing_window", "uint!", None),
    ("handle", "uint", None), ("delivery_count", "uint", None), ("link_credit", "uint", None),
    ("available", "uint", None), ("drain", "bool", False), ("echo", "bool", False),
    ("properties", "fields", None)])

Transfer = composite("Transfer", 0x14, "amqp:transfer:list", [
    ("handle", "uint!", None), ("delivery_id", "uint", None), ("delivery_tag", "binary", None),
    ("message_format", "uint", None), ("settled", "bool", None), ("more", "bool", False),
    ("rcv_settle_mode", "ubyte", None), ("state", "*", None), ("resume", "bool", False),
    ("aborted", "bool", False), ("batchable", "bool", False)])

Disposition = composite("Disposition", 0x15, "amqp:disposition:list", [
    ("role", "bool!", None), ("first", "uint!", None), ("last", "uint", None),
    ("settled", "bool", False), ("state", "*", None), ("batchable", "bool", False)])

Detach = composite("Detach", 0x16, "amqp:detach:list", [
    ("handle", "uint!", None), ("closed", "bool", False), ("error", "*", None)])

End = composite("End", 0x17, "amqp:end:list", [("error", "*", None)])

Close = composite("Close", 0x18, "amqp:close:list", [("error", "*", None)])

PERFORMATIVES = (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)

# -- SASL --------------------------------------------------------------------------------------

SaslMechanisms = composite("SaslMechanisms", 0x40, "amqp:sasl-mechanisms:list", [
    ("sasl_server_mechanisms", "symbols!", None)])
SaslInit = composite("SaslInit", 0x41, "amqp:sasl-init:list", [
    ("mechanism", "symbol!", None), ("initial_response", "binary", None), ("hostname", "string", None)])
SaslChallenge = composite("SaslChallenge", 0x42, "amqp:sasl-challenge:list", [("challenge", "binary!", None)])
SaslResponse = composite("SaslResponse", 0x43, "amqp:sasl-response:list", [("response", "binary!", None)])
SaslOutcome = composite("SaslOutcome", 0x44, "amqp:sasl-outcome:list", [
    ("code", "ubyte!", None), ("additional_data", "binary", None)])

SASL_FRAMES = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)

# -- delivery states ---------------------------------------------------------------------------

Received = composite("Received", 0x23, "amqp:received:list", [
    ("section_number", "uint!", None), ("section_offset", "ulong!", None)])
Accepted = composite("Accepted", 0x24, "amqp:accepted:list", [])
Rejected = composite("Rejected", 0x25, "amqp:rejected:list", [("error", "*", None)])
Released = composite("Released", 0x26, "amqp:released:list", [])
Modified = composite("Modified", 0x27, "amqp:modified:list", [
    ("delivery_failed", "bool", None), ("undeliverable_here", "bool", None),
    ("message_annotations", "fields", None)])

# -- terminus ----------------------------------------------------------------------------------

Source = composite("Source", 0x28, "amqp:source:list", [
    ("address", "string", None), ("durable", "uint", 0), ("expiry_policy", "symbol", "session-end"),
    ("timeout", "uint", 0), ("dynamic", "bool", False), ("dynamic_node_properties", "fields", None),
    ("distribution_mode", "symbol", None), ("filter", "fields", None), ("default_outcome", "*", None),
    ("outcomes", "symbols", None), ("capabilities", "symbols", None)])

Target = composite("Target", 0x29, "amqp:target:list", [
    ("address", "string", None), ("durable", "uint", 0), ("expiry_policy", "symbol", "session-end"),
    ("timeout", "uint", 0), ("dynamic", "bool", False), ("dynamic_node_properties", "fields", None),
    ("capabilities", "symbols", None)])

DeleteOnClose = composite("DeleteOnClose", 0x2b, "amqp:delete-on-close:list", [])
DeleteOnNoLinks = composite("DeleteOnNoLinks", 0x2c, "amqp:delete-on-no-links:list", [])
DeleteOnNoMessages = composite("DeleteOnNoMessages", 0x2d, "amqp:delete-on-no-messages:list", [])
DeleteOnNoLinksOrMessages = composite(
    "DeleteOnNoLinksOrMessages", 0x2e, "amqp:delete-on-no-links-or-messages:list", [])

# -- transactions ------------------------------------------------------------------------------

Coordinator = composite("Coordinator", 0x30, "amqp:coordinator:list", [("capabilities", "symbols", None)])
Declare = composite("Declare", 0x31, "amqp:declare:list", [("global_id", "*", None)])
Discharge = composite("Discharge", 0x32, "amqp:discharge:list", [
    ("txn_id", "binary!", None), ("fail", "bool", None)])
Declared = composite("Declared", 0x33, "amqp:declared:list", [("txn_id", "binary!", None)])
TransactionalState = composite("TransactionalState", 0x34, "amqp:transactional-state:list", [
    ("txn_id", "binary!", None), ("outcome", "*", None)])

# -- message sections --------------------------------------------------------------------------
# Header and Properties are lists; the others wrap one value (see message.py).

Header = composite("Header", 0x70, "amqp:header:list", [
    ("durable", "bool", None), ("priority", "ubyte", None), ("ttl", "uint", None),
    ("first_acquirer", "bool", None), ("delivery_count", "uint", None)])

Properties = composite("Properties", 0x73, "amqp:properties:list", [
    ("message_id", "*", None), ("user_id", "binary", None), ("to", "string", None),
    ("subject", "string", None), ("reply_to", "string", None), ("correlation_id", "*", None),
    ("content_type", "symbol", None), ("content_encoding", "symbol", None),
    ("absolute_expiry_time", "timestamp", None), ("creation_time", "timestamp", None),
    ("group_id", "string", None), ("group_sequence", "uint", None), ("reply_to_group_id", "string", None)])

# Sections that are not lists: their descriptor codes.
DeliveryAnnotations = 0x71
MessageAnnotations = 0x72
ApplicationProperties = 0x74
Data = 0x75
AmqpSequence = 0x76
AmqpValue = 0x77
Footer = 0x78
