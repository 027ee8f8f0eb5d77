"""Address and queue requests of the asyncio client (a mixin of `AsyncConnection`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from petrel.client.message import Message, parse_destination
from petrel.codec.core import Browse, CreateAddress, CreateQueue, DeleteAddress, DeleteQueue, Query

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection

__all__ = ["AdminRequests"]

_ROUTING_NAMES = {"ANYCAST": 0, "MULTICAST": 1}


class AdminRequests:
    """Create and delete addresses and queues, ask about them, browse queues."""


    async def create_address(
        self: AsyncConnection, name: str, routing_types: tuple[str, ...] = ("MULTICAST",)
    ) -> None:
        types = [_routing(t) for t in routing_types]
        await self._request(lambda corr: CreateAddress(corr, name, types))

    async def delete_address(self, name: str) -> None:
        await self._request(lambda corr: DeleteAddress(corr, name))

    async def create_queue(
        self,
        name: str,
        address: str | None = None,
        routing_type: str = "ANYCAST",
        *,
        durable: bool = True,
        filter: str | None = None,
        temporary: bool = False,
        exists_ok: bool = False,
        **attributes: Any,
    ) -> dict[str, Any]:
        """Create a queue (on ``address``, default: an address named like the queue).

        ``attributes``: exclusive, last_value_key, non_destructive, ring_size, group_rebalance,
        group_buckets (unset ones come from the address settings)."""
        rt = _routing(routing_type)
        return await self._request(
            lambda corr: CreateQueue(corr, name, address or name, rt, durable, filter, temporary, exists_ok,
                                     attributes))

    async def delete_queue(self, name: str) -> None:
        await self._request(lambda corr: DeleteQueue(corr, name))

    async def queue_info(self, name: str) -> dict[str, Any] | None:
        """The queue's attributes and counters, or None if it does not exist; ``migrating_from``:
        the nodes moving their messages to this broker now (a scale-down or a drain)."""
        return await self._request(lambda corr: Query(corr, "queue", name), retry=True)

    async def queue_names(self, pattern: str = "#") -> list[str]:
        """The names of this broker's queues (not temporary ones) matching ``pattern``, a queue
        name or an Artemis wildcard (``orders.*``, ``orders.#``; ``#`` is every queue), sorted."""
        return await self._request(lambda corr: Query(corr, "queues", pattern), retry=True)

    async def address_info(self, name: str) -> dict[str, Any] | None:
        return await self._request(lambda corr: Query(corr, "address", name), retry=True)

    async def browse(
        self, queue: str, *, filter: str | None = None, offset: int = 0, limit: int = 100
    ) -> tuple[list[Message], bool]:
        """One page of waiting messages (not consumed) and whether more follow."""
        name = parse_destination(queue)[0]
        result = await self._request(lambda corr: Browse(corr, name, filter, offset, limit), retry=True)
        return [Message._browsed(b) for b in result.messages], result.more


def _routing(name: str | int) -> int:
    if isinstance(name, int):
        return name
    try:
        return _ROUTING_NAMES[name.upper()]
    except KeyError:
        raise ValueError(f"routing type must be ANYCAST or MULTICAST, not {name!r}") from None
