"""Publishing rows to a broker in chunks, one transaction per chunk, with duplicate IDs.

This is the part of the sink that talks to the broker; it knows nothing of Spark, so it is
tested and used without a SparkSession.

Why a transaction per chunk: the broker drops a message whose duplicate ID (the
``_AMQ_DUPL_ID`` property) it has seen on the address, and inside a transaction it marks the
whole transaction rollback-only instead (Artemis does the same), so COMMIT answers
``TRANSACTION_ROLLED_BACK`` naming the duplicate. A chunk is therefore either published
whole or not at all, and a chunk replayed after a crash (same rows, same IDs) is refused
whole. To count exactly even when a chunk is only partly known to the broker (an ID sent
before by someone else, or a replay cut differently), a refused chunk is sent again one
message per transaction: each commit says published, each refusal says duplicate.

A commit whose answer is lost (the connection failed over) is simply sent again: if it had
committed, the resend is refused as duplicates, so nothing is published twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from petrel.client import ClientError, Connection, Message, RequestFailed, SendFailed, TransactionRolledBack

__all__ = ["Counts", "Publisher", "is_duplicate_refusal"]

log = logging.getLogger("petrel.spark.publish")

#: What the broker says when a transaction held a message it had seen (postoffice.send).
_DUPLICATE_REASON = "duplicate message"
#: What the client says when the broker refused a send of the transaction (session.commit).
_REFUSED_SEND = "a send in the transaction failed"


def is_duplicate_refusal(error: BaseException) -> bool:
    """Whether a rolled-back commit was refused for holding an already-seen duplicate ID."""
    return isinstance(error, TransactionRolledBack) and _DUPLICATE_REASON in str(error)


@dataclass
class Counts:
    """What one writer task (or a whole batch, summed) did on the broker."""

    published: int = 0  # messages the broker took
    duplicates: int = 0  # messages the broker dropped as already seen (duplicate ID)
    chunks: int = 0  # transactions committed or refused
    retries: int = 0  # chunks sent again after a lost connection or a rolled-back commit

    def add(self, other: Counts) -> None:
        self.published += other.published
        self.duplicates += other.duplicates
        self.chunks += other.chunks
        self.retries += other.retries


class Publisher:
    """Sends chunks of ``(destination, Message)`` to ``url`` (a ``tcp://`` or ``failover:`` URL).

    Each message must carry its duplicate ID already. ``attempts``: how often a chunk is
    tried when the connection fails or a commit is rolled back for another reason than a
    duplicate (a failover during the transaction), with ``backoff`` seconds between tries.
    """

    def __init__(self, url: str, *, attempts: int = 5, backoff: float = 1.0, **connect_options) -> None:
        self.url = url
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.connect_options = connect_options
        self.counts = Counts()
        self._conn: Connection | None = None
        self._session = None
        self._producer = None

    # -- connection -------------------------------------------------------------------------

    def _ensure(self):
        if self._producer is None:
            if self._conn is None:
                self._conn = Connection(self.url, **self.connect_options)
            self._session = self._conn.session(transacted=True)
            self._producer = self._session.producer()
        return self._session, self._producer

    def _reset(self) -> None:
        conn, self._conn, self._session, self._producer = self._conn, None, None, None
        if conn is not None:
            try:
                conn.close(timeout=5)
            except Exception:  # it is broken already; we only let go of it
                log.debug("closing a failed connection", exc_info=True)

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- publishing -------------------------------------------------------------------------

    def publish(self, chunk: list[tuple[str, Message]]) -> Counts:
        """Publish one chunk in one transaction; returns (and adds to ``counts``) what happened."""
        done = Counts(chunks=1)
        if not chunk:
            return done
        error: BaseException | None = None
        for attempt in range(self.attempts):
            if attempt:
                done.retries += 1
                time.sleep(self.backoff)
            try:
                self._commit(chunk)
                done.published = len(chunk)
                break
            except TransactionRolledBack as exc:
                if is_duplicate_refusal(exc):
                    one = self._one_by_one(chunk)
                    done.published, done.duplicates = one.published, one.duplicates
                    done.retries += one.retries
                    break
                if _REFUSED_SEND in str(exc):  # the broker refused a message: no retry helps
                    raise
                error = exc  # lost in a failover: the whole chunk again
                log.warning("chunk of %d rolled back (%s); sending it again", len(chunk), exc)
            except ClientError as exc:
                if isinstance(exc, (RequestFailed, SendFailed)):  # refused: no retry helps
                    raise
                error = exc  # the connection failed (or failed over) on the way
                log.warning("chunk of %d: connection to %s failed (%s); sending it again",
                            len(chunk), self.url, exc)
                self._reset()
        else:
            raise ClientError(f"could not publish a chunk of {len(chunk)} messages to {self.url} "
                              f"in {self.attempts} attempts: {error}") from error
        self.counts.add(done)
        return done

    def _commit(self, messages: Iterable[tuple[str, Message]]) -> None:
        session, producer = self._ensure()
        for destination, message in messages:
            producer.send(message, destination=destination)
        session.commit()

    def _one_by_one(self, chunk: list[tuple[str, Message]]) -> Counts:
        """Each message in its own transaction: exact published / duplicate counts."""
        out = Counts()
        for item in chunk:
            for attempt in range(self.attempts):
                try:
                    self._commit((item,))
                    out.published += 1
                    break
                except TransactionRolledBack as exc:
                    if is_duplicate_refusal(exc):
                        out.duplicates += 1
                        break
                    if _REFUSED_SEND in str(exc):
                        raise
                    error: BaseException = exc
                except ClientError as exc:
                    if isinstance(exc, (RequestFailed, SendFailed)):
                        raise
                    error = exc
                    self._reset()
                out.retries += 1
                time.sleep(self.backoff)
            else:
                raise ClientError(f"could not publish a message to {self.url} in {self.attempts} "
                                  f"attempts: {error}") from error
        return out
