"""How many queues and addresses clients may make the broker create without asking.

`AutoCreateQuota` (the post office's ``quota``) caps the queues that are auto-created or
temporary (a STOMP topic subscriber's, a CORE client's temporary queue) at ``max_queues``, and the
auto-created addresses at ``max_addresses`` (-1: no cap). Queues and addresses created on purpose
(broker.toml, the management API, a CORE create that is neither) are not capped. The counts are
taken from the post office the first time they are needed (after recovery), then kept as
queues and addresses come and go.

It also caps the queues each user's connections made the broker create, whatever the kind, at
``max_per_user`` (Artemis's resource-limit ``max-queues``): a queue remembers who created it
(`Queue.created_by`, kept in its journal record), the post office's `creator` while a
connection's frames are handled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.errors import RoutingError

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue

__all__ = ["AutoCreateQuota", "QuotaExceeded"]


class QuotaExceeded(RoutingError):
    """One auto-created queue or address too many; the message names the setting."""


def _counted(thing: Queue | Address) -> bool:
    return bool(thing.auto_created or getattr(thing, "temporary", False))


class AutoCreateQuota:
    def __init__(self, max_queues: int = -1, max_addresses: int = -1, max_per_user: int = -1) -> None:
        self.max_queues = max_queues
        self.max_addresses = max_addresses
        self.max_per_user = max_per_user
        self.queues: int | None = None  # None: not counted yet
        self.addresses: int | None = None
        self.by_user: dict[str, int] | None = None  # queues each user created that are still here

    def check_user(self, office: PostOffice, name: str, user: str | None) -> None:
        """Raise `QuotaExceeded` if `user` may not have one more queue created (max_per_user)."""
        if user is None or self.max_per_user < 0:
            return
        if self.by_user is None:
            self.by_user = {}
            for queue in office.queues.values():
                if queue.created_by is not None:
                    self.by_user[queue.created_by] = self.by_user.get(queue.created_by, 0) + 1
        held = self.by_user.get(user, 0)
        if held >= self.max_per_user:
            raise QuotaExceeded(
                f"cannot create queue {name[:60]!r}: user {user!r} already made the broker create {held} queues, "
                f"its max_queues_per_user; delete some of them first")

    def check_queue(self, office: PostOffice, name: str, counted: bool) -> None:
        """Raise `QuotaExceeded` if creating a queue (auto-created or temporary when `counted`) is over."""
        if not counted or self.max_queues < 0:
            return
        if self.queues is None:
            self.queues = sum(1 for q in office.queues.values() if _counted(q))
        if self.queues >= self.max_queues:
            raise QuotaExceeded(
                f"cannot create queue {name[:60]!r}: the broker holds {self.queues} auto-created and temporary "
                f"queues, its max_auto_created_queues; delete some, or create the queue on purpose")

    def check_address(self, office: PostOffice, name: str, counted: bool) -> None:
        """Raise `QuotaExceeded` if auto-creating an address is over ``max_addresses``."""
        if not counted or self.max_addresses < 0:
            return
        if self.addresses is None:
            self.addresses = sum(1 for a in office.addresses.values() if a.auto_created)
        if self.addresses >= self.max_addresses:
            raise QuotaExceeded(
                f"cannot create address {name[:60]!r}: the broker holds {self.addresses} auto-created "
                f"addresses, its max_auto_created_addresses; delete some, or create the address on purpose")

    def added(self, thing: Queue | Address) -> None:
        self._count(thing, 1)

    def removed(self, thing: Queue | Address) -> None:
        self._count(thing, -1)

    def _count(self, thing: Queue | Address, step: int) -> None:
        owner = getattr(thing, "created_by", None)
        if owner is not None and self.by_user is not None:
            self.by_user[owner] = self.by_user.get(owner, 0) + step
        if not _counted(thing):
            return
        if hasattr(thing, "routing_type"):  # a queue
            if self.queues is not None:
                self.queues += step
        elif self.addresses is not None:
            self.addresses += step
