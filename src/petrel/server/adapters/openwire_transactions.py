"""OpenWire transactions: local ones (a transacted JMS session) and XA (`XASession.getXAResource()`).

A TransactionInfo names its transaction by a LocalTransactionId or an XATransactionId (format
id, global transaction id, branch qualifier) and says what to do (its type):

* BEGIN opens it in the connection's server session (an XA branch joined or resumed again is
  the one already open); sends and acks naming it wait in it.
* COMMIT_ONE_PHASE commits it (the acks it holds settle then); ROLLBACK of an open one rolls it
  back, its acks left with the client, which redelivers those messages itself.
* PREPARE (XA): its work is made durable under its xid (`petrel.core.prepared`; the key is
  `xid_bytes`) and the reply, once durable, votes XA_OK (an IntegerResponse), or XA_RDONLY for
  a branch that did nothing (nothing is kept). From then on the branch belongs to the broker,
  not the connection: it survives the connection and a restart, and COMMIT_TWO_PHASE or
  ROLLBACK from any connection finishes it (a rollback's acknowledged messages go back to their
  consumer when it is still open, else to their queue, redelivered).
* RECOVER lists the prepared xids (a DataArrayResponse of XATransactionIds); END and FORGET
  need nothing here (no heuristic outcomes are kept).

An XA refusal is an ExceptionResponse carrying a javax.transaction.xa.XAException. PREPARE and
COMMIT_ONE_PHASE come on the connection that did the branch's work (the XAResource of its
XASession, as a transaction manager uses it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from petrel.codec.openwire import (
    DataArrayResponse,
    ExceptionResponse,
    IntegerResponse,
    Response,
    TransactionInfo,
    XATransactionId,
)
from petrel.codec.openwire.commands import JavaThrowable, LocalTransactionId
from petrel.core.prepared import UnknownXid, xid_bytes, xid_parts
from petrel.core.transaction import TransactionRolledBack as CoreRolledBack
from petrel.server.refusals import Refused

if TYPE_CHECKING:
    from petrel.server.adapters.openwire import OpenWireAdapter

BEGIN, PREPARE, COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK, RECOVER, FORGET, END = range(8)
XA_OK, XA_RDONLY = 0, 3
XA_EXCEPTION = "javax.transaction.xa.XAException"


class XaRefused(Refused):
    """An XA request refused: the client gets an XAException."""

    kind = "xa"


def xa_key(tid: XATransactionId) -> bytes:
    return xid_bytes(tid.format_id, tid.global_transaction_id or b"", tid.branch_qualifier or b"")


class OpenWireTransactions:
    """OpenWireAdapter mixin: TransactionInfo, local and XA."""

    @staticmethod
    def tx_name(tid: Any) -> str | None:
        """The server session's name of a transaction (None: no transaction)."""
        if tid is None:
            return None
        if isinstance(tid, LocalTransactionId):
            conn = tid.connection_id.value if tid.connection_id is not None else ""
            return f"{conn}:{tid.value}"
        if isinstance(tid, XATransactionId):
            return "xa:" + xa_key(tid).hex()
        raise Refused(f"unknown transaction id {tid!r}")

    def on_transaction(self: OpenWireAdapter, c: TransactionInfo) -> None:
        try:
            self._transaction(c)
        except XaRefused as exc:
            self._xa_refuse(c, str(exc))
        except Refused as exc:
            if isinstance(c.transaction_id, XATransactionId):
                self._xa_refuse(c, str(exc))
            else:
                raise

    def _transaction(self: OpenWireAdapter, c: TransactionInfo) -> None:
        kind = c.type
        if kind == RECOVER:
            xids = []
            for key in self.office.prepared:
                parts = xid_parts(key)
                if parts is not None:
                    xids.append(XATransactionId(*parts))
            self.answer(c, DataArrayResponse(correlation_id=c.command_id, data=tuple(xids)))
            return
        tid = c.transaction_id
        name = self.tx_name(tid)
        if name is None:
            raise Refused("a TransactionInfo without a transaction id")
        xa = xa_key(tid) if isinstance(tid, XATransactionId) else None
        if xa is not None:
            self.xa_used = True  # its branches' outcomes come here: never asked to move (openwire_cluster)
        session = self.session
        if kind == BEGIN:
            if xa is not None and xa in self.office.prepared:
                raise XaRefused("XAER_DUPID: this xid is prepared already")
            if xa is None or name not in session.transactions:  # (an XA join or resume: open already)
                session.begin(name)
            self.respond(c)
        elif kind == COMMIT_ONE_PHASE:
            self._settle_acks(name)
            session.commit(name)
            self._durable_reply(c, Response(correlation_id=c.command_id))
        elif kind == PREPARE:
            if xa is None:
                raise Refused("PREPARE of a local transaction")
            self._settle_acks(name)
            tx = session.transactions.pop(name, None)
            if tx is None:
                raise XaRefused("XAER_NOTA: no such branch open on this connection")
            try:
                voted = self.office.prepare(tx, xa)
            except CoreRolledBack as exc:
                raise XaRefused(f"XA_RBROLLBACK: {exc}") from None
            self._durable_reply(c, IntegerResponse(correlation_id=c.command_id, result=XA_OK if voted else XA_RDONLY))
        elif kind == COMMIT_TWO_PHASE:
            if xa is None:
                raise Refused("a two-phase commit of a local transaction")
            try:
                self.office.commit_prepared(xa)
            except UnknownXid:
                raise XaRefused("XAER_NOTA: no transaction is prepared under this xid") from None
            self._durable_reply(c, Response(correlation_id=c.command_id))
        elif kind == ROLLBACK:
            self.tx_acks.pop(name, None)
            if name in session.transactions:
                session.rollback(name)
                self.respond(c)
            elif xa is not None and xa in self.office.prepared:
                self.office.rollback_prepared(xa, to_consumer=True)
                self._durable_reply(c, Response(correlation_id=c.command_id))
            else:
                self.respond(c)
        elif kind in (END, FORGET):
            self.respond(c)
        else:
            raise Refused(f"unknown transaction operation {kind}")

    def _settle_acks(self: OpenWireAdapter, name: str) -> None:
        """The acks sent in transaction `name` join it (those its consumers still hold, once each)."""
        seen: set[tuple[int, int]] = set()
        for consumer, refs in self.tx_acks.pop(name, ()):
            live = []
            for ref in refs:
                key = (consumer.id, ref.seq)
                if key not in seen and consumer.delivering.get(ref.seq) is ref:
                    seen.add(key)
                    live.append(ref)
            if live:
                self.session.acknowledge(consumer, live, name)

    def _durable_reply(self: OpenWireAdapter, c: TransactionInfo, reply: Any) -> None:
        """`reply` once what the transaction wrote is durable (a sync in any case)."""
        if c.response_required:
            self.session.confirm(self.codec.send(reply), durable=True, transactional=True)
        else:
            self.session.need_sync(transactional=True)

    def answer(self: OpenWireAdapter, c: TransactionInfo, reply: Any) -> None:
        if c.response_required:
            self.session.confirm(self.codec.send(reply))

    def _xa_refuse(self: OpenWireAdapter, c: TransactionInfo, why: str) -> None:
        if c.response_required:
            self.session.confirm(self.codec.send(ExceptionResponse(
                correlation_id=c.command_id, exception=JavaThrowable(XA_EXCEPTION, why))))
        else:
            self.fail(why)
