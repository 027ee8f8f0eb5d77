"""One family of refusals for every protocol.

The server session (`petrel.server.session`) raises these when it refuses a request; each
protocol adapter maps them to its own codes (a STOMP ERROR frame, a CORE result or
SEND_FAILED code, an MQTT reason code, an AMQP error condition). `Refused.kind` names the
family member in one word, so an adapter can map with a dict instead of an ``isinstance``
chain; the message is one line for the client, saying why and what to do.

`refusal_of` turns the domain's own errors (`RoutingError`, `SelectorError`, `AddressFull`,
`TransactionRolledBack`, the security checks' `NotAuthorized`) into the family member.
"""

from __future__ import annotations

from petrel.core.errors import RoutingError
from petrel.core.limits import AddressFull as _CoreAddressFull
from petrel.core.selector import SelectorError
from petrel.core.transaction import TransactionRolledBack as _CoreRolledBack
from petrel.security.errors import NotAuthorized as _SecurityNotAuthorized

__all__ = [
    "AddressFull",
    "InvalidRequest",
    "NotAuthorized",
    "NotDurable",
    "NotFound",
    "Refused",
    "RoutingRefused",
    "SelectorRefused",
    "TransactionRolledBack",
    "TransactionUnknown",
    "refusal_of",
]


class Refused(Exception):
    """A request the broker refuses; `kind` says which family member, str() why."""

    kind = "refused"


class NotAuthorized(Refused):
    """The user lacks a permission, or the name is internal to the cluster (``$.petrel.*``)."""

    kind = "not-authorized"


class AddressFull(Refused):
    """FAIL policy: the address is full and the message was not stored."""

    kind = "address-full"


class RoutingRefused(Refused):
    """The message or subscription cannot be routed (no such address or queue, wrong routing
    type, a grouping decision nobody can make, ...)."""

    kind = "routing"


class SelectorRefused(Refused):
    """A selector (filter) that does not parse."""

    kind = "selector"


class TransactionRolledBack(Refused):
    """COMMIT refused: the transaction rolled back instead (`reason`: the cause alone)."""

    kind = "rolled-back"
    reason = ""


class TransactionUnknown(Refused):
    """A transaction name that is not open (or one already open, for BEGIN)."""

    kind = "no-transaction"


class NotFound(Refused):
    """A consumer, subscription or queue the request names does not exist."""

    kind = "not-found"


class InvalidRequest(Refused):
    """A request whose fields are out of range or contradict each other."""

    kind = "invalid"


class NotDurable(Refused):
    """The store could not make what was confirmed durable: nothing later is confirmed."""

    kind = "not-durable"


def refusal_of(exc: BaseException) -> Refused:
    """The family member for one of the domain's own errors (a `Refused` is returned as is)."""
    if isinstance(exc, Refused):
        return exc
    if isinstance(exc, _SecurityNotAuthorized):
        return NotAuthorized(str(exc))
    if isinstance(exc, _CoreAddressFull):
        return AddressFull(str(exc))
    if isinstance(exc, SelectorError):
        return SelectorRefused(str(exc))
    if isinstance(exc, _CoreRolledBack):
        return TransactionRolledBack(str(exc))
    if isinstance(exc, (RoutingError, ValueError)):
        return RoutingRefused(str(exc))
    return Refused(str(exc))
