"""Large-message bodies in the post office: which references hold a body's file, and when it goes.

A file is deleted only once the store has made the journal records that let go of it
durable, so a crash never leaves a live message without its body.
"""

from __future__ import annotations

import logging

from petrel.core.errors import RoutingError
from petrel.core.message import LargeBody, Message

log = logging.getLogger("petrel.core.large")


class LargeBodies:
    """A mixin of `PostOffice`."""

    # -- large messages -----------------------------------------------------------------

    def link_large(self, copy: Message, original: Message) -> None:
        """Give a copy of a large message (its own id) its own name for the body's file."""
        if original.large is None or self.large is None:
            return
        try:
            copy.large = self.large.link(original.large, copy.id, durable=copy.durable)
        except OSError as exc:
            log.error("cannot copy the body of large message %s: %s", original.id, exc)
            raise RoutingError(f"the body of large message {original.id} cannot be copied: {exc}") from None
        except Exception as exc:  # LargeBodyMissing
            log.error("cannot copy the body of large message %s: %s", original.id, exc)
            raise RoutingError(str(exc)) from None

    def hold_large(self, body: LargeBody, n: int = 1) -> None:
        """`n` more references (routed, recovered or paged) hold the file."""
        self.large_holders[body.name] = self.large_holders.get(body.name, 0) + n

    def release_large(self, body: LargeBody, tx_id: int = 0) -> None:
        """One reference let go of the file; the last one deletes it (see `_drop_large`)."""
        n = self.large_holders.get(body.name)
        if n is None:  # not counted here (e.g. read back from a page): keep it, start-up cleans up
            log.debug("large-message file %s released but not held; kept", body.name)
            return
        if n > 1:
            self.large_holders[body.name] = n - 1
            return
        del self.large_holders[body.name]
        self._drop_large(body, tx_id)

    def discard(self, message: Message) -> None:
        """A message the office will not keep (unrouted, duplicate, dropped, rolled back or
        refused): its large-message file goes."""
        if message.large is not None and message.large.name not in self.large_holders:
            self._drop_large(message.large, 0)

    def _drop_large(self, body: LargeBody, tx_id: int) -> None:
        """Delete the file once the store has made durable everything appended so far (the
        journal's delete record among it), and for `tx_id` only after that commits."""
        large = self.large
        if large is None:
            return
        if tx_id:
            self._large_in_tx.setdefault(tx_id, []).append(body)
            return
        self.store.sync(lambda: large.delete(body))

    def commit_store(self, tx_id: int) -> None:
        """Commit a store transaction, admit the references routed in it to their queues, then
        release the large files it let go of."""
        self.store.commit(tx_id)
        self.admit_held(tx_id)
        bodies = self._large_in_tx.pop(tx_id, None)
        if bodies:
            large = self.large

            def delete() -> None:
                for body in bodies:
                    large.delete(body)

            self.store.sync(delete, transactional=True)

