"""Paging in the post office: which references go to page files, and reading them back.

The page files themselves are the store's (`storage/paging.py`); this decides, per queue,
when to page (its address is full and the queue holds the backlog) and moves paged messages
back into the queue, and into the journal, in one store transaction per batch as the queue
drains.
"""

from __future__ import annotations

import logging

from petrel.core.address import Address
from petrel.core.message import Message
from petrel.core.queue import MessageReference, Queue

log = logging.getLogger("petrel.core.paging")

DEPAGE_BACKLOG = 4 * 1024 * 1024  # journal bytes not yet written above which depaging waits


class Paging:
    """A mixin of `PostOffice`."""

    # -- paging -----------------------------------------------------------------------------

    def _pages(self, queue: Queue, address: Address | None) -> bool:
        if queue.paging:
            return True
        if address is None or queue.non_destructive:
            return False
        settings = self.settings_for(address.name)
        return settings.address_full_policy == "PAGE" and self.limits.should_page(queue, address, settings)

    def _page(self, queue: Queue, seq: int, message: Message, *, home: bool = False) -> None:
        """`home`: this page record is the send's only durable home (see `PageStore.append`)."""
        if not queue.paging:
            queue.paging = True
            log.info("queue %s is paging (address %s is full)", queue.name, queue.address,
                     extra={"event": "paging.start"})
        if not queue.page_cursor_record:
            from petrel.storage.paging import PagePosition

            queue.page_cursor_record = self.store.create_page_cursor(queue.id)
            queue.page_cursor = PagePosition(0, 0)
        self.store.page(queue.id, seq, message, home=home)
        queue.page_backlog += 1
        queue.messages_added += 1

    def depage(self, queue: Queue) -> None:
        """Read back a batch of paged messages when the queue's memory has drained."""
        if not queue.paging or queue.deleted:
            return
        settings = self.settings_for(queue.address)
        limit = settings.max_size_bytes if settings.max_size_bytes > 0 else 8 * 1024 * 1024
        batch = max(min(limit // 4, 1024 * 1024), 16 * 1024)
        if queue.memory_bytes - queue.delivering_bytes > batch:
            return  # enough waits for consumers; what they hold unacknowledged their credit bounds
        store = self.store
        if store.pending_bytes() > DEPAGE_BACKLOG:
            # The journal writer is behind (nothing waits for the disk while a queue drains):
            # read more only once it has caught up, so memory stays bounded.
            if not queue.depage_waiting:
                queue.depage_waiting = True

                def caught_up() -> None:
                    queue.depage_waiting = False
                    self.depage(queue)

                store.after_written(caught_up)
            return
        # Asked before reading: a record written between the read and the question would be
        # neither read nor in flight, and ending the paging would drop it.
        in_flight = store.pages_in_flight(queue.id)
        paged = store.read_pages(queue.id, queue.page_cursor, batch)
        if not paged:
            if not in_flight:
                self._end_paging(queue)  # everything paged was written, and has been read back
            elif queue.depage_retry is None:
                # records still on their way to disk: look again shortly
                def retry() -> None:
                    queue.depage_retry = None
                    self.depage(queue)

                queue.depage_retry = self.scheduler.call_at_ms(self.now() + 20, retry)
            return
        tx_id = store.begin()
        refs = []
        for item in paged:
            message = item.message
            message.id = store.next_id()  # a journal identity of its own, per queue
            message.ref_count = 0
            if message.durable and queue.durable:
                message.ref_count = 1
                store.add_message(tx_id, message, [(queue.id, item.seq)])
            refs.append(MessageReference(message, queue, item.seq))
        queue.page_cursor = paged[-1].position
        queue.page_cursor_record = store.update_page_cursor(
            tx_id, queue.page_cursor_record, queue.id, queue.page_cursor)
        store.commit(tx_id)
        store.release_pages(queue.id, queue.page_cursor)
        queue.page_backlog = max(queue.page_backlog - len(refs), 0)
        now = self.now()
        for ref in refs:
            queue._admit(ref, now, head=False)
        queue.deliver()

    def _end_paging(self, queue: Queue) -> None:
        queue.paging = False
        queue.page_backlog = 0
        self.store.release_pages(queue.id, None)
        log.info("queue %s stopped paging", queue.name, extra={"event": "paging.stop"})

