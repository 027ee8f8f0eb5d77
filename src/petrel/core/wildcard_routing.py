"""Addresses named by a pattern (`news.*`, `news.#`): a message sent to any address the
pattern matches reaches their multicast queues too, as Artemis's wildcard addresses do.

A mixin of `PostOffice`. Such an address is made by a subscriber (MQTT's `+` and `#` topic
filters become `*` and `#` words); it holds no messages of its own. Which patterns match an
address is cached per address name; the cache is dropped whenever a pattern address comes or
goes. A broker without pattern addresses pays one dict check per send. As in MQTT, a pattern
that starts with a wildcard does not match an address that starts with ``$``.

In a cluster, another node's multicast queue on a pattern address (its remote binding) gets,
from this node, what is sent to every address the pattern matches, as a local one would: the
message goes to that node as for a remote binding on its own address, naming the queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.message import Message, RoutingType
from petrel.core.wildcard import is_wildcard, matches

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.queue import Queue
    from petrel.core.remote import RemoteBinding

__all__ = ["WildcardRouting"]

_CACHE_LIMIT = 10_000


class WildcardRouting:
    addresses: dict[str, Address]

    def init_wildcards(self) -> None:
        self.wildcard_addresses: dict[str, Address] = {}
        self._wildcard_cache: dict[str, list[Address]] = {}
        self.remote_wildcards: dict[str, list[RemoteBinding]] = {}  # pattern -> other nodes' bindings
        self._remote_wildcard_cache: dict[str, list[RemoteBinding]] = {}

    def remote_wildcard_changed(self, binding: RemoteBinding, added: bool) -> None:
        """A remote binding came or went (`Clustering`): indexed when its address is a pattern."""
        if not is_wildcard(binding.address):
            return
        group = self.remote_wildcards.setdefault(binding.address, [])
        if added:
            group.append(binding)
        elif binding in group:
            group.remove(binding)
        if not group:
            del self.remote_wildcards[binding.address]
        self._remote_wildcard_cache.clear()

    def wildcard_remote(self, message: Message, routing_type: RoutingType | None,
                        remote: list[RemoteBinding] | None) -> list[RemoteBinding] | None:
        """`remote` and the other nodes' multicast bindings on pattern addresses matching the
        message's address."""
        if routing_type is RoutingType.ANYCAST:
            return remote
        name = message.address
        cache = self._remote_wildcard_cache
        found = cache.get(name)
        if found is None:
            dollar = name.startswith("$")
            found = [b for pattern, group in self.remote_wildcards.items()
                     if pattern != name and not (dollar and pattern[:1] in ("*", "#")) and matches(pattern, name)
                     for b in group if b.routing_type == RoutingType.MULTICAST]
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[name] = found
        extra = [b for b in found if b.accepts(message) and (remote is None or b not in remote)]
        if not extra:
            return remote
        return (remote or []) + extra

    def wildcard_address_added(self, address: Address) -> None:
        if is_wildcard(address.name):
            self.wildcard_addresses[address.name] = address
            self._wildcard_cache.clear()

    def wildcard_targets(self, message: Message, routing_type: RoutingType | None,
                         targets: list[Queue]) -> list[Queue]:
        """`targets` and the multicast queues of every pattern address matching the message's."""
        if routing_type is RoutingType.ANYCAST:
            return targets
        name = message.address
        cache = self._wildcard_cache
        found = cache.get(name)
        if found is None:
            found = self._matching(name)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[name] = found
        if not found:
            return targets
        out = list(targets)
        for address in found:
            if self.addresses.get(address.name) is not address:  # deleted since
                self.wildcard_addresses.pop(address.name, None)
                cache.clear()
                continue
            for queue in address.targets(message, RoutingType.MULTICAST):
                if queue not in out:
                    out.append(queue)
        return out

    def _matching(self, name: str) -> list[Address]:
        # As MQTT says of its topics: a pattern starting with a wildcard does not match an address
        # starting with "$" (the broker's own, `$.petrel.*`, and MQTT's `$SYS`-like topics).
        dollar = name.startswith("$")
        return [a for pattern, a in self.wildcard_addresses.items() if pattern != name
                and not (dollar and pattern[:1] in ("*", "#")) and matches(pattern, name)]
