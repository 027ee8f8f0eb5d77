"""What a queue or address name may be.

A name is checked where it is created (the post office's `create_address` and
`create_queue`, whichever path led there: a client's auto-create, a CORE or management
request, broker.toml), never where it is only looked up, so data written before these
rules still loads. Refused:

- the wildcard characters ``#`` and ``*`` (a name that is also a pattern would match
  other addresses in `address_settings` and in queue queries);
- empty words: a leading or trailing ``.``, or ``..`` (``a..b`` is three words, one empty);
- control characters (U+0000 to U+001F and U+007F), NUL included;
- more than `MAX_NAME_BYTES` bytes of UTF-8 (a temporary queue: twice that, room for the
  subscription id the broker appends to its topic's name).
"""

from __future__ import annotations

import re

from petrel.core.errors import RoutingError

__all__ = ["MAX_NAME_BYTES", "InvalidName", "check_name", "name_problem"]

MAX_NAME_BYTES = 255

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidName(RoutingError):
    """A name that may not be created; the message says which rule it breaks."""


def name_problem(name: str, *, limit: int = MAX_NAME_BYTES) -> str | None:
    """Why ``name`` may not be created, or None when it may."""
    if not name:
        return "it is empty"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > limit:
        return f"it is {size} bytes long, over the {limit}-byte limit"
    control = _CONTROL.search(name)
    if control is not None:
        return f"it holds the control character {control.group()!r}"
    for char in "#*":
        if char in name:
            return f"it holds the wildcard character {char!r} (wildcards are for patterns, not names)"
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return "it has an empty word (a leading or trailing '.', or '..')"
    return None


def check_name(kind: str, name: str, *, temporary: bool = False) -> None:
    """Raise `InvalidName` unless ``name`` may be created as a ``kind`` ("queue", "address")."""
    if not name:
        raise InvalidName(f"an {kind} needs a name" if kind[0] in "aeiou" else f"a {kind} needs a name")
    problem = name_problem(name, limit=MAX_NAME_BYTES * 2 if temporary else MAX_NAME_BYTES)
    if problem is not None:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidName(f"invalid {kind} name {shown!r}: {problem}")
