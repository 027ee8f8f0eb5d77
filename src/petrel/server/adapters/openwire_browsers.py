"""OpenWire queue browsers (a JMS QueueBrowser: ConsumerInfo with browser=true). A mixin of
`OpenWireAdapter`.

A browser sees what its queue holds when it opens (the messages waiting in memory, in
dispatch order, then those paged to disk, in the order they were paged, read a chunk at a
time: `petrel.core.browsing.QueueBrowse`; not those out with consumers), the ones its
selector matches, dispatched without being consumed, then a MessageDispatch without a message
that ends the browse. Its prefetch bounds what is dispatched and not yet acknowledged (the client
acknowledges what it browsed; an ack only frees room here); a prefetch 0 browser gets one
message, or the end, for each MessagePull. Browsing needs the ``browse`` permission.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from petrel.codec.openwire import (
    AckType,
    ConsumerInfo,
    MessageAck,
    MessageDispatch,
    MessagePull,
    OpenWireLocalError,
)
from petrel.core.browsing import QueueBrowse
from petrel.core.selector import SelectorError
from petrel.security.errors import NotAuthorized as SecurityNotAuthorized
from petrel.server.adapters.openwire_messages import to_openwire, with_whole_body
from petrel.server.refusals import NotAuthorized, Refused, SelectorRefused

if TYPE_CHECKING:
    from petrel.codec.openwire import ConsumerId
    from petrel.core.message import Message
    from petrel.server.adapters.openwire import OpenWireAdapter

#: Messages taken from the queue's browse at a time (the page files are read in chunks anyway).
BATCH = 256
RETRY_MS = 20  # how soon to look again for paged records on their way to disk


class Browse:
    __slots__ = ("info", "source", "waiting", "out", "pulls", "done", "retry")

    def __init__(self, info: ConsumerInfo, source: QueueBrowse | None) -> None:
        self.info = info
        self.source = source  # what is still to browse (None: nothing)
        self.waiting: deque[tuple[Message, int]] = deque()  # (message, delivery count) taken, not dispatched
        self.out: dict[int, None] = {}  # message ids dispatched and not yet acknowledged, in order
        self.pulls = 0  # MessagePulls not yet answered (a prefetch 0 browser)
        self.done = False  # the end of the browse sent
        self.retry = None  # a timer to look again while the source waits for page writes


class OpenWireBrowsers:
    def init_browsers(self: OpenWireAdapter) -> None:
        self.browsers: dict[ConsumerId, Browse] = {}

    def on_browser(self: OpenWireAdapter, c: ConsumerInfo) -> None:
        dest = c.destination
        if dest.is_topic:
            raise Refused("a browser browses a queue, not a topic")
        queue = self.office.queues.get(dest.name)
        try:
            self.access.check("browse", queue.address if queue is not None else dest.name)
        except SecurityNotAuthorized as exc:
            raise NotAuthorized(str(exc)) from None
        try:
            source = None if queue is None else QueueBrowse(self.office, queue, c.selector or None)
        except SelectorError as exc:
            raise SelectorRefused(str(exc)) from None
        browse = Browse(c, source)
        self.browsers[c.consumer_id] = browse
        self.respond(c)
        self.session.confirm(lambda: self.pump_browser(browse))  # after the response

    def pump_browser(self: OpenWireAdapter, browse: Browse) -> None:
        """Dispatch what the browser has room for, then the end."""
        if browse.done or getattr(self.conn, "writing_paused", False):
            return
        info = browse.info
        prefetch = info.prefetch_size
        waiting, out = browse.waiting, browse.out
        while len(out) < prefetch or browse.pulls > 0:
            if not waiting:
                source = browse.source
                if source is None:
                    break
                waiting.extend((h.message, h.delivery_count) for h in source.next(BATCH))
                if source.finished:
                    browse.source = None
                if not waiting:
                    if source.stalled and browse.retry is None:
                        browse.retry = self.office.scheduler.call_at_ms(self.office.now() + RETRY_MS,
                                                                        lambda: self._browse_again(browse))
                    break
            message, count = waiting.popleft()
            if browse.pulls > 0:
                browse.pulls -= 1
            out[message.id] = None
            if message.large is not None:
                message = with_whole_body(message, self.broker.large)
            try:
                self.write(MessageDispatch(consumer_id=info.consumer_id, destination=info.destination,
                                           message=to_openwire(message, info.destination.kind, self.producer, count),
                                           redelivery_counter=count))
            except OpenWireLocalError as exc:
                self.fail(f"message {message.id} cannot be browsed: {exc}")
                return
        if not waiting and browse.source is None and (prefetch > 0 or browse.pulls > 0):
            browse.done = True
            self.write(MessageDispatch(consumer_id=info.consumer_id, destination=info.destination))

    def _browse_again(self: OpenWireAdapter, browse: Browse) -> None:
        browse.retry = None
        if self.browsers.get(browse.info.consumer_id) is browse:
            self.pump_browser(browse)

    def browser_ack(self: OpenWireAdapter, browse: Browse, a: MessageAck) -> None:
        """An ack of browsed messages frees room for more (nothing is consumed)."""
        last = a.last_message_id
        if a.ack_type not in (AckType.REDELIVERED, AckType.UNMATCHED) and last is not None:
            out = browse.out
            last_id = last.producer_sequence_id
            if last_id in out:
                if a.ack_type == AckType.INDIVIDUAL:
                    del out[last_id]
                else:
                    for mid in list(out):
                        del out[mid]
                        if mid == last_id:
                            break
        self.respond(a)
        self.pump_browser(browse)

    def browser_pull(self: OpenWireAdapter, browse: Browse, p: MessagePull) -> None:
        if browse.info.prefetch_size == 0:
            browse.pulls += 1
            self.pump_browser(browse)
        self.respond(p)

    def resume_browsers(self: OpenWireAdapter) -> None:
        for browse in list(self.browsers.values()):
            self.pump_browser(browse)
