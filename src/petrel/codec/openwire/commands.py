"""OpenWire's commands and data structures as frozen dataclasses, fields in wire order.

Each class names its data structure type (`TYPE`) and the kinds of its fields in the order
the loose encoding writes them (`WIRE`, one letter a field, see `marshal`). A command's
first two fields are BaseCommand's ``command_id`` and ``response_required``. Only what a JMS
1.1 client needs for connections, sessions, producers, consumers, sends, receipts and acks
(and a few commands it may send besides) is here; other types are a protocol error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

__all__ = [
    "DataType", "AckType", "DataStructure", "Command", "BrokerId", "ConnectionId", "SessionId", "ProducerId",
    "ConsumerId", "MessageId", "LocalTransactionId", "XATransactionId", "Destination", "WireFormatInfo",
    "BrokerInfo", "ConnectionInfo", "SessionInfo", "ConsumerInfo", "ProducerInfo", "TransactionInfo",
    "DestinationInfo", "RemoveSubscriptionInfo", "KeepAliveInfo", "ShutdownInfo", "RemoveInfo",
    "ControlCommand", "FlushCommand", "ConnectionError", "ConsumerControl", "ConnectionControl",
    "ProducerAck", "MessagePull", "MessageDispatch", "MessageAck", "Message", "Response",
    "ExceptionResponse", "DataArrayResponse", "IntegerResponse", "JavaThrowable", "BY_TYPE", "MESSAGE_TYPES", "DESTINATION_TYPES",
]


class DataType(IntEnum):
    """The data structure types (CommandTypes in the reference client)."""

    WIREFORMAT_INFO = 1
    BROKER_INFO = 2
    CONNECTION_INFO = 3
    SESSION_INFO = 4
    CONSUMER_INFO = 5
    PRODUCER_INFO = 6
    TRANSACTION_INFO = 7
    DESTINATION_INFO = 8
    REMOVE_SUBSCRIPTION_INFO = 9
    KEEP_ALIVE_INFO = 10
    SHUTDOWN_INFO = 11
    REMOVE_INFO = 12
    CONTROL_COMMAND = 14
    FLUSH_COMMAND = 15
    CONNECTION_ERROR = 16
    CONSUMER_CONTROL = 17
    CONNECTION_CONTROL = 18
    PRODUCER_ACK = 19
    MESSAGE_PULL = 20
    MESSAGE_DISPATCH = 21
    MESSAGE_ACK = 22
    ACTIVEMQ_MESSAGE = 23
    ACTIVEMQ_BYTES_MESSAGE = 24
    ACTIVEMQ_MAP_MESSAGE = 25
    ACTIVEMQ_OBJECT_MESSAGE = 26
    ACTIVEMQ_STREAM_MESSAGE = 27
    ACTIVEMQ_TEXT_MESSAGE = 28
    RESPONSE = 30
    EXCEPTION_RESPONSE = 31
    DATA_ARRAY_RESPONSE = 33
    INTEGER_RESPONSE = 34
    ACTIVEMQ_QUEUE = 100
    ACTIVEMQ_TOPIC = 101
    ACTIVEMQ_TEMP_QUEUE = 102
    ACTIVEMQ_TEMP_TOPIC = 103
    MESSAGE_ID = 110
    LOCAL_TRANSACTION_ID = 111
    XA_TRANSACTION_ID = 112
    CONNECTION_ID = 120
    SESSION_ID = 121
    CONSUMER_ID = 122
    PRODUCER_ID = 123
    BROKER_ID = 124


class AckType(IntEnum):
    """MessageAck.ack_type."""

    DELIVERED = 0
    POISON = 1
    STANDARD = 2
    REDELIVERED = 3
    INDIVIDUAL = 4
    UNMATCHED = 5
    EXPIRED = 6


# Field kinds (see `marshal`): b boolean, y byte, i int, q long, s string (modified UTF-8),
# B byte array or sequence, o a nested (or cached: the cache is never on) data structure,
# O an array of them, T a throwable, P a byte sequence holding a primitive map.


@dataclass(frozen=True, slots=True)
class DataStructure:
    TYPE: ClassVar[int] = 0
    WIRE: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class Command(DataStructure):
    command_id: int = 0
    response_required: bool = False


# -- identities ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BrokerId(DataStructure):
    TYPE = DataType.BROKER_ID
    WIRE = "s"
    value: str | None = None


@dataclass(frozen=True, slots=True)
class ConnectionId(DataStructure):
    TYPE = DataType.CONNECTION_ID
    WIRE = "s"
    value: str | None = None


@dataclass(frozen=True, slots=True)
class SessionId(DataStructure):
    TYPE = DataType.SESSION_ID
    WIRE = "sq"
    connection_id: str | None = None
    value: int = 0


@dataclass(frozen=True, slots=True)
class ProducerId(DataStructure):
    TYPE = DataType.PRODUCER_ID
    WIRE = "sqq"
    connection_id: str | None = None
    value: int = 0
    session_id: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerId(DataStructure):
    TYPE = DataType.CONSUMER_ID
    WIRE = "sqq"
    connection_id: str | None = None
    session_id: int = 0
    value: int = 0


@dataclass(frozen=True, slots=True)
class MessageId(DataStructure):
    TYPE = DataType.MESSAGE_ID
    WIRE = "soqq"
    text_view: str | None = None
    producer_id: ProducerId | None = None
    producer_sequence_id: int = 0
    broker_sequence_id: int = 0

    def __str__(self) -> str:
        if self.text_view:
            return self.text_view
        p = self.producer_id
        return f"{p.connection_id}:{p.session_id}:{p.value}:{self.producer_sequence_id}" if p else "?"


@dataclass(frozen=True, slots=True)
class LocalTransactionId(DataStructure):
    TYPE = DataType.LOCAL_TRANSACTION_ID
    WIRE = "qo"
    value: int = 0
    connection_id: ConnectionId | None = None


@dataclass(frozen=True, slots=True)
class XATransactionId(DataStructure):
    TYPE = DataType.XA_TRANSACTION_ID
    WIRE = "iBB"
    format_id: int = 0
    global_transaction_id: bytes | None = None
    branch_qualifier: bytes | None = None


@dataclass(frozen=True, slots=True)
class Destination(DataStructure):
    """ActiveMQQueue, ActiveMQTopic, ActiveMQTempQueue or ActiveMQTempTopic: `kind` is the
    type, `name` the physical name."""

    WIRE = "s"
    kind: int = DataType.ACTIVEMQ_QUEUE
    name: str | None = None

    @property
    def is_topic(self) -> bool:
        return self.kind in (DataType.ACTIVEMQ_TOPIC, DataType.ACTIVEMQ_TEMP_TOPIC)

    @property
    def is_temporary(self) -> bool:
        return self.kind in (DataType.ACTIVEMQ_TEMP_QUEUE, DataType.ACTIVEMQ_TEMP_TOPIC)


@dataclass(frozen=True, slots=True)
class JavaThrowable:
    """An exception as OpenWire carries it: class name and message (stack traces are never
    negotiated here)."""

    class_name: str | None = None
    message: str | None = None


# -- commands ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WireFormatInfo(DataStructure):
    """The first command each way: magic "ActiveMQ", version and the options map
    (TightEncodingEnabled, SizePrefixDisabled, CacheEnabled, MaxInactivityDuration...)."""

    TYPE = DataType.WIREFORMAT_INFO
    version: int = 12
    properties: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BrokerInfo(Command):
    TYPE = DataType.BROKER_INFO
    WIRE = "ibosOsbbbbbqss"
    broker_id: BrokerId | None = None
    broker_url: str | None = None
    peer_broker_infos: tuple | None = None
    broker_name: str | None = None
    slave_broker: bool = False
    master_broker: bool = False
    fault_tolerant_configuration: bool = False
    duplex_connection: bool = False
    network_connection: bool = False
    connection_id: int = 0
    broker_upload_url: str | None = None
    network_properties: str | None = None


@dataclass(frozen=True, slots=True)
class ConnectionInfo(Command):
    TYPE = DataType.CONNECTION_INFO
    WIRE = "ibosssObbbbbs"
    connection_id: ConnectionId | None = None
    client_id: str | None = None
    password: str | None = None
    user_name: str | None = None
    broker_path: tuple | None = None
    broker_master_connector: bool = False
    manageable: bool = False
    client_master: bool = False
    fault_tolerant: bool = False
    failover_reconnect: bool = False
    client_ip: str | None = None

    def __repr__(self) -> str:  # no password in logs
        return f"ConnectionInfo(connection_id={self.connection_id!r}, client_id={self.client_id!r}, " \
               f"user_name={self.user_name!r})"


@dataclass(frozen=True, slots=True)
class SessionInfo(Command):
    TYPE = DataType.SESSION_INFO
    WIRE = "ibo"
    session_id: SessionId | None = None


@dataclass(frozen=True, slots=True)
class ConsumerInfo(Command):
    TYPE = DataType.CONSUMER_INFO
    WIRE = "iboboiibsssbbbyOobbbO"
    consumer_id: ConsumerId | None = None
    browser: bool = False
    destination: Destination | None = None
    prefetch_size: int = 0
    maximum_pending_message_limit: int = 0
    dispatch_async: bool = False
    selector: str | None = None
    client_id: str | None = None
    subscription_name: str | None = None
    no_local: bool = False
    exclusive: bool = False
    retroactive: bool = False
    priority: int = 0
    broker_path: tuple | None = None
    additional_predicate: Any = None
    network_subscription: bool = False
    optimized_acknowledge: bool = False
    no_range_acks: bool = False
    network_consumer_path: tuple | None = None


@dataclass(frozen=True, slots=True)
class ProducerInfo(Command):
    TYPE = DataType.PRODUCER_INFO
    WIRE = "ibooObi"
    producer_id: ProducerId | None = None
    destination: Destination | None = None
    broker_path: tuple | None = None
    dispatch_async: bool = False
    window_size: int = 0


@dataclass(frozen=True, slots=True)
class TransactionInfo(Command):
    TYPE = DataType.TRANSACTION_INFO
    WIRE = "ibooy"
    connection_id: ConnectionId | None = None
    transaction_id: Any = None
    type: int = 0


@dataclass(frozen=True, slots=True)
class DestinationInfo(Command):
    TYPE = DataType.DESTINATION_INFO
    WIRE = "ibooyqO"
    connection_id: ConnectionId | None = None
    destination: Destination | None = None
    operation_type: int = 0  # 0 add, 1 remove
    timeout: int = 0
    broker_path: tuple | None = None


@dataclass(frozen=True, slots=True)
class RemoveSubscriptionInfo(Command):
    TYPE = DataType.REMOVE_SUBSCRIPTION_INFO
    WIRE = "iboss"
    connection_id: ConnectionId | None = None
    subscription_name: str | None = None
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class KeepAliveInfo(Command):
    TYPE = DataType.KEEP_ALIVE_INFO
    WIRE = "ib"


@dataclass(frozen=True, slots=True)
class ShutdownInfo(Command):
    TYPE = DataType.SHUTDOWN_INFO
    WIRE = "ib"


@dataclass(frozen=True, slots=True)
class RemoveInfo(Command):
    TYPE = DataType.REMOVE_INFO
    WIRE = "iboq"
    object_id: Any = None  # a ConnectionId, SessionId, ConsumerId or ProducerId
    last_delivered_sequence_id: int = 0


@dataclass(frozen=True, slots=True)
class ControlCommand(Command):
    TYPE = DataType.CONTROL_COMMAND
    WIRE = "ibs"
    command: str | None = None


@dataclass(frozen=True, slots=True)
class FlushCommand(Command):
    TYPE = DataType.FLUSH_COMMAND
    WIRE = "ib"


@dataclass(frozen=True, slots=True)
class ConnectionError(Command):  # noqa: A001 (OpenWire's name)
    TYPE = DataType.CONNECTION_ERROR
    WIRE = "ibTo"
    exception: JavaThrowable | None = None
    connection_id: ConnectionId | None = None


@dataclass(frozen=True, slots=True)
class ConsumerControl(Command):
    TYPE = DataType.CONSUMER_CONTROL
    WIRE = "iboboibbb"
    destination: Destination | None = None
    close: bool = False
    consumer_id: ConsumerId | None = None
    prefetch: int = 0
    flush: bool = False
    start: bool = False
    stop: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionControl(Command):
    TYPE = DataType.CONNECTION_CONTROL
    WIRE = "ibbbbbbssbB"
    close: bool = False
    exit: bool = False
    fault_tolerant: bool = False
    resume: bool = False
    suspend: bool = False
    connected_brokers: str | None = None
    reconnect_to: str | None = None
    rebalance_connection: bool = False
    token: bytes | None = None


@dataclass(frozen=True, slots=True)
class ProducerAck(Command):
    TYPE = DataType.PRODUCER_ACK
    WIRE = "iboi"
    producer_id: ProducerId | None = None
    size: int = 0


@dataclass(frozen=True, slots=True)
class MessagePull(Command):
    TYPE = DataType.MESSAGE_PULL
    WIRE = "ibooqso"
    consumer_id: ConsumerId | None = None
    destination: Destination | None = None
    timeout: int = 0
    correlation_id: str | None = None
    message_id: MessageId | None = None


@dataclass(frozen=True, slots=True)
class Message(Command):
    """ActiveMQMessage and its kinds: `TYPE` is per instance (`kind`), the body is `content`
    (as the client encodes it: see `openwire.body`), `properties` the decoded map."""

    WIRE = "iboooooosisbqyoqsBPoobiOqsbbOqqb"
    kind: int = DataType.ACTIVEMQ_MESSAGE
    producer_id: ProducerId | None = None
    destination: Destination | None = None
    transaction_id: Any = None
    original_destination: Destination | None = None
    message_id: MessageId | None = None
    original_transaction_id: Any = None
    group_id: str | None = None
    group_sequence: int = 0
    correlation_id: str | None = None
    persistent: bool = False
    expiration: int = 0
    priority: int = 4
    reply_to: Destination | None = None
    timestamp: int = 0
    type: str | None = None
    content: bytes | None = None
    properties: dict[str, Any] | None = None
    data_structure: Any = None
    target_consumer_id: ConsumerId | None = None
    compressed: bool = False
    redelivery_counter: int = 0
    broker_path: tuple | None = None
    arrival: int = 0
    user_id: str | None = None
    recieved_by_df_bridge: bool = False
    droppable: bool = False
    cluster: tuple | None = None
    broker_in_time: int = 0
    broker_out_time: int = 0
    jmsx_group_first_for_consumer: bool = False


@dataclass(frozen=True, slots=True)
class MessageDispatch(Command):
    TYPE = DataType.MESSAGE_DISPATCH
    WIRE = "iboooi"
    consumer_id: ConsumerId | None = None
    destination: Destination | None = None
    message: Message | None = None
    redelivery_counter: int = 0


@dataclass(frozen=True, slots=True)
class MessageAck(Command):
    TYPE = DataType.MESSAGE_ACK
    WIRE = "iboooyooiT"
    destination: Destination | None = None
    transaction_id: Any = None
    consumer_id: ConsumerId | None = None
    ack_type: int = AckType.STANDARD
    first_message_id: MessageId | None = None
    last_message_id: MessageId | None = None
    message_count: int = 0
    poison_cause: JavaThrowable | None = None


@dataclass(frozen=True, slots=True)
class Response(Command):
    TYPE = DataType.RESPONSE
    WIRE = "ibi"
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class ExceptionResponse(Command):
    TYPE = DataType.EXCEPTION_RESPONSE
    WIRE = "ibiT"
    correlation_id: int = 0
    exception: JavaThrowable | None = None


@dataclass(frozen=True, slots=True)
class DataArrayResponse(Command):
    """A response carrying data structures (the XA ids a TransactionInfo RECOVER asks for)."""

    TYPE = DataType.DATA_ARRAY_RESPONSE
    WIRE = "ibiO"
    correlation_id: int = 0
    data: tuple | None = None


@dataclass(frozen=True, slots=True)
class IntegerResponse(Command):
    """A response carrying an int (an XA prepare's vote: XA_OK 0, XA_RDONLY 3)."""

    TYPE = DataType.INTEGER_RESPONSE
    WIRE = "ibii"
    correlation_id: int = 0
    result: int = 0


MESSAGE_TYPES = frozenset({DataType.ACTIVEMQ_MESSAGE, DataType.ACTIVEMQ_BYTES_MESSAGE, DataType.ACTIVEMQ_MAP_MESSAGE,
                           DataType.ACTIVEMQ_OBJECT_MESSAGE, DataType.ACTIVEMQ_STREAM_MESSAGE,
                           DataType.ACTIVEMQ_TEXT_MESSAGE})
DESTINATION_TYPES = frozenset({DataType.ACTIVEMQ_QUEUE, DataType.ACTIVEMQ_TOPIC, DataType.ACTIVEMQ_TEMP_QUEUE,
                               DataType.ACTIVEMQ_TEMP_TOPIC})

#: type -> class, for the types whose class has a fixed TYPE (messages and destinations aside)
BY_TYPE: dict[int, type] = {
    cls.TYPE: cls for cls in (
        BrokerId, ConnectionId, SessionId, ProducerId, ConsumerId, MessageId, LocalTransactionId, XATransactionId,
        BrokerInfo, ConnectionInfo, SessionInfo, ConsumerInfo, ProducerInfo, TransactionInfo, DestinationInfo,
        RemoveSubscriptionInfo, KeepAliveInfo, ShutdownInfo, RemoveInfo, ControlCommand, FlushCommand,
        ConnectionError, ConsumerControl, ConnectionControl, ProducerAck, MessagePull, MessageDispatch, MessageAck,
        Response, ExceptionResponse, DataArrayResponse, IntegerResponse)
}
