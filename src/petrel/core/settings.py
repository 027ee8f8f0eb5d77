"""Address settings and the repository that resolves them by wildcard match.

``AddressSettings`` is the resolved, per-address view the domain reads on its
hot paths (plain frozen dataclass, no validation cost).  Users configure partial
settings per wildcard pattern; :class:`AddressSettingsRepository` merges every
pattern that matches an address field by field, most specific pattern first,
over the built-in defaults (Artemis ``HierarchicalObjectRepository`` with
mergeable ``AddressSettings``).

A *partial* is a plain ``dict`` of field name -> value holding only the keys the
user set; a ``None`` value counts as unset.  An empty string for
``dead_letter_address`` or ``expiry_address`` means "none": such messages are
dropped, as in Artemis when no address is configured.

Defaults follow Artemis (``address-settings.adoc``, ``AddressSettings.java``):
DLQ and ExpiryQueue (which Artemis's broker.xml template sets on ``#``), 10
delivery attempts, no redelivery delay, everything auto-created and deleted,
MULTICAST routing, the broker-wide duplicate-ID cache size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from petrel.core.wildcard import compile_pattern, is_wildcard, specificity

__all__ = [
    "ANYCAST",
    "MULTICAST",
    "ROUTING_TYPES",
    "AddressSettings",
    "AddressSettingsRepository",
    "validate_partial",
]

ANYCAST = "ANYCAST"
MULTICAST = "MULTICAST"
ROUTING_TYPES = (ANYCAST, MULTICAST)

_DEFAULT_ID_CACHE_SIZE = 20000  # Artemis id-cache-size


@dataclass(frozen=True, slots=True)
class AddressSettings:
    """Settings for one address.

    To add a setting: add a field with its default here, the same field (all
    optional) to ``petrel.config.AddressSettingsModel``, and, if it needs one, a
    rule in :meth:`resolved`.
    """

    dead_letter_address: str | None = "DLQ"
    expiry_address: str | None = "ExpiryQueue"
    expiry_delay: int = -1  # ms; -1 keeps the message's own expiration
    max_delivery_attempts: int = 10  # -1 = infinite
    redelivery_delay: int = 0  # ms
    redelivery_multiplier: float = 1.0
    max_redelivery_delay: int | None = None  # None -> redelivery_delay * 10
    auto_create_addresses: bool = True
    auto_create_queues: bool = True
    auto_delete_addresses: bool = True
    auto_delete_queues: bool = True
    auto_delete_queues_delay: int = 0  # ms
    default_address_routing_type: str = MULTICAST
    default_queue_routing_type: str = MULTICAST
    id_cache_size: int | None = None  # None -> the broker-wide id_cache_size
    send_to_dla_on_no_route: bool = False
    # queue attributes given to auto-created queues
    default_exclusive_queue: bool = False
    default_last_value_key: str | None = None
    default_non_destructive: bool = False
    default_ring_size: int = -1  # -1 = unbounded
    default_group_rebalance: bool = False
    default_group_buckets: int = -1  # -1 = one bucket per group
    # memory limits and what happens when they are reached
    max_size_bytes: int = -1  # -1 = only the global limit applies
    max_size_messages: int = -1
    address_full_policy: str = "PAGE"  # PAGE | BLOCK | FAIL | DROP
    page_size_bytes: int = 10 * 1024 * 1024
    redistribution_delay: int = -1  # ms; -1 = no redistribution, 0 = at once

    def resolved(self, *, id_cache_size: int = _DEFAULT_ID_CACHE_SIZE) -> AddressSettings:
        """A copy with every derived field filled in."""
        changes: dict[str, Any] = {}
        if self.max_redelivery_delay is None:
            changes["max_redelivery_delay"] = self.redelivery_delay * 10
        if self.id_cache_size is None:
            changes["id_cache_size"] = id_cache_size
        if self.dead_letter_address == "":
            changes["dead_letter_address"] = None
        if self.expiry_address == "":
            changes["expiry_address"] = None
        return dataclasses.replace(self, **changes) if changes else self

    def redelivery_delay_for(self, delivery_count: int) -> int:
        """Delay (ms) before redelivering a message delivered ``delivery_count`` times.

        ``redelivery_delay * multiplier ** (delivery_count - 1)``, capped at
        ``max_redelivery_delay`` (Artemis ``QueueImpl.calculateRedeliveryDelay``).
        """
        delay = self.redelivery_delay
        if delay <= 0:
            return 0
        if delivery_count > 1 and self.redelivery_multiplier != 1.0:
            delay = int(delay * self.redelivery_multiplier ** (delivery_count - 1))
        cap = self.max_redelivery_delay
        if cap is None:
            cap = self.redelivery_delay * 10
        return min(delay, cap)


_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(AddressSettings)}

# Accepted Python types per field (bool is kept apart from int on purpose).
_TYPES: dict[str, tuple[type, ...]] = {
    "dead_letter_address": (str,),
    "expiry_address": (str,),
    "expiry_delay": (int,),
    "max_delivery_attempts": (int,),
    "redelivery_delay": (int,),
    "redelivery_multiplier": (int, float),
    "max_redelivery_delay": (int,),
    "auto_create_addresses": (bool,),
    "auto_create_queues": (bool,),
    "auto_delete_addresses": (bool,),
    "auto_delete_queues": (bool,),
    "auto_delete_queues_delay": (int,),
    "default_address_routing_type": (str,),
    "default_queue_routing_type": (str,),
    "id_cache_size": (int,),
    "send_to_dla_on_no_route": (bool,),
    "default_exclusive_queue": (bool,),
    "default_last_value_key": (str,),
    "default_non_destructive": (bool,),
    "default_ring_size": (int,),
    "default_group_rebalance": (bool,),
    "default_group_buckets": (int,),
    "max_size_bytes": (int,),
    "max_size_messages": (int,),
    "address_full_policy": (str,),
    "page_size_bytes": (int,),
    "redistribution_delay": (int,),
}
assert _TYPES.keys() == _FIELDS.keys(), "keep _TYPES in step with AddressSettings"


def validate_partial(partial: Mapping[str, Any]) -> dict[str, Any]:
    """Check a partial settings mapping; return it without ``None`` values.

    Raises ``ValueError`` naming the offending key.  Routing types are
    upper-cased.  (Range checks live in ``petrel.config``; this is the cheap
    guard for settings changed at run time.)
    """
    clean: dict[str, Any] = {}
    for key, value in partial.items():
        types = _TYPES.get(key)
        if types is None:
            raise ValueError(f"{key}: unknown address setting")
        if value is None:
            continue
        if isinstance(value, bool) and bool not in types:
            raise ValueError(f"{key}: expected {types[0].__name__}, got {value!r}")
        if not isinstance(value, types):
            raise ValueError(f"{key}: expected {types[0].__name__}, got {value!r}")
        if key.endswith("_routing_type"):
            value = value.upper()
            if value not in ROUTING_TYPES:
                raise ValueError(f"{key}: expected ANYCAST or MULTICAST, got {partial[key]!r}")
        if key == "redelivery_multiplier":
            value = float(value)
        clean[key] = value
    return clean


class AddressSettingsRepository:
    """Partial settings per wildcard pattern, resolved per address with a cache."""

    __slots__ = ("_defaults", "_id_cache_size", "_entries", "_exact", "_wild", "_cache",
                 "_cache_size", "_listeners")

    def __init__(
        self,
        entries: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        defaults: AddressSettings = AddressSettings(),
        id_cache_size: int = _DEFAULT_ID_CACHE_SIZE,
        cache_size: int = 10000,
    ) -> None:
        self._defaults = defaults
        self._id_cache_size = id_cache_size
        self._entries: dict[str, dict[str, Any]] = {}
        self._exact: dict[str, dict[str, Any]] = {}
        # wildcard patterns, most specific first: (pattern, predicate, partial)
        self._wild: list[tuple[str, Callable[[str], bool], dict[str, Any]]] = []
        self._cache: dict[str, AddressSettings] = {}
        self._cache_size = max(1, cache_size)
        self._listeners: list[Callable[[], None]] = []
        for pattern, partial in (entries or {}).items():
            self._entries[pattern] = validate_partial(partial)
        self._rebuild()

    # -- reading ---------------------------------------------------------

    def match(self, address: str) -> AddressSettings:
        """The resolved settings for ``address``."""
        settings = self._cache.get(address)
        if settings is not None:
            return settings
        merged: dict[str, Any] = {}
        exact = self._exact.get(address)
        if exact:
            merged.update(exact)
        for _pattern, predicate, partial in self._wild:
            if predicate(address):
                for key, value in partial.items():
                    if key not in merged:
                        merged[key] = value
        settings = dataclasses.replace(self._defaults, **merged) if merged else self._defaults
        settings = settings.resolved(id_cache_size=self._id_cache_size)
        cache = self._cache
        if len(cache) >= self._cache_size:
            del cache[next(iter(cache))]  # drop the oldest entry
        cache[address] = settings
        return settings

    def matching_patterns(self, address: str) -> list[str]:
        """Patterns that apply to ``address``, most specific first."""
        found = [address] if address in self._exact else []
        found.extend(p for p, predicate, _ in self._wild if predicate(address))
        return found

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        """A copy of pattern -> partial settings."""
        return {pattern: dict(partial) for pattern, partial in self._entries.items()}

    @property
    def defaults(self) -> AddressSettings:
        return self._defaults

    def __contains__(self, pattern: object) -> bool:
        return pattern in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    # -- changing --------------------------------------------------------

    def set(self, pattern: str, partial: Mapping[str, Any]) -> None:
        """Add or replace the partial settings for ``pattern``."""
        self._entries[pattern] = validate_partial(partial)
        self._rebuild()
        self._changed()

    def remove(self, pattern: str) -> bool:
        """Drop ``pattern``; False if it was not there."""
        if self._entries.pop(pattern, None) is None:
            return False
        self._rebuild()
        self._changed()
        return True

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change (to re-read cached settings)."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.remove(callback)

    def _rebuild(self) -> None:
        self._cache.clear()
        self._exact = {}
        wild = []
        for pattern, partial in self._entries.items():
            if is_wildcard(pattern):
                wild.append(pattern)
            else:
                self._exact[pattern] = partial
        wild.sort(key=specificity)
        self._wild = [(p, compile_pattern(p), self._entries[p]) for p in wild]

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback()
