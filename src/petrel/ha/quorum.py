"""Quorum votes: a backup that lost its live asks the other lives whether the live is gone.

A voter says "gone" when the node is absent from its own view (no cluster link to it or
from it is up). A live that lost its backup asks the same about itself, naming its process:
then only a link to that process counts, not one to its backup that took over under the same
node ID. The backup takes over only on a majority of the largest cluster seen
(Artemis's rule: 2 of 3, 3 of 4 or 5); with no other lives to ask it cannot tell a dead live
from a cut link, and says so.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from petrel.client.link import PeerLink, open_link
from petrel.codec.core import Connected, Error
from petrel.codec.core.replication import ReplicaVote, ReplicaVoteAnswer

__all__ = ["Ballot", "votes_needed", "ask"]

log = logging.getLogger("petrel.ha.quorum")


def votes_needed(size: int) -> int:
    """"Gone" votes a backup needs from the other lives when the largest cluster seen has ``size``
    lives (its own live included): Artemis's rule, 1 of 2, 2 of 3, 3 of 4, 3 of 5."""
    return size // 2 + 1 if size > 2 else size // 2


@dataclass
class Ballot:
    connector: str
    gone: bool | None  # None: no answer
    cluster_size: int = 0
    error: str = ""


class _Voter:
    def __init__(self, node_id: str, user: str, password: str, unique_id: str = "") -> None:
        self.node_id = node_id
        self.unique_id = unique_id
        self.user = user
        self.password = password
        self.answer: asyncio.Future = asyncio.get_running_loop().create_future()

    def link_event(self, link: PeerLink, event: object) -> None:
        kind = type(event)
        if kind is Connected:
            link.send(ReplicaVote(1, self.node_id, self.user, self.password, self.unique_id))
        elif kind is ReplicaVoteAnswer and not self.answer.done():
            self.answer.set_result(event)
        elif kind is Error and not self.answer.done():
            self.answer.set_exception(RuntimeError(event.message))

    def link_lost(self, link: PeerLink, reason: str) -> None:
        if not self.answer.done():
            self.answer.set_exception(ConnectionError(reason))

    def link_writable(self, link: PeerLink, writable: bool) -> None:
        pass


async def _ask_one(connector: str, node_id: str, user: str, password: str, timeout: float,
                   unique_id: str = "", tls=None) -> Ballot:
    voter = _Voter(node_id, user, password, unique_id)
    link = None
    try:
        link = await open_link(voter, connector, user=user, password=password, ttl_ms=int(timeout * 1000),
                               client="petrel-vote", max_frame_size=1 << 20, timeout=timeout, tls=tls)
        answer = await asyncio.wait_for(voter.answer, timeout)
        return Ballot(connector, answer.gone, answer.cluster_size)
    except (OSError, asyncio.TimeoutError, ValueError, RuntimeError, ConnectionError) as exc:
        return Ballot(connector, None, 0, str(exc) or type(exc).__name__)
    finally:
        if link is not None:
            link.close("vote done")


async def ask(connectors: list[str], node_id: str, user: str, password: str, timeout: float,
              *, unique_id: str = "", tls=None) -> list[Ballot]:
    """Ask every connector at once; one ballot each (``gone`` None when it did not answer).
    ``unique_id``: about that process of ``node_id`` only (a live asking about itself); ``tls``:
    the broker's `link_context`, for ssl:// connectors."""
    if not connectors:
        return []
    return list(await asyncio.gather(*(_ask_one(c, node_id, user, password, timeout, unique_id, tls)
                                       for c in connectors)))
