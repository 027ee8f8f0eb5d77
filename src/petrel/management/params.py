"""Reading what a request carries: JSON bodies and query parameters, checked, with 400s."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from petrel.core.message import RoutingType
from petrel.core.selector import SelectorError, compile_selector
from petrel.management.errors import bad_request

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


#: Deepest nesting of arrays and objects a body may have (the API's bodies need 3).
MAX_DEPTH = 32


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty body is ``{}``. Malformed or too deeply nested: 400."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        raise bad_request(f"request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    if _depth_over(body, MAX_DEPTH):
        raise bad_request(f"request body is nested too deeply (at most {MAX_DEPTH} levels)")
    return body


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays and objects deeper than `limit` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False


def text_field(body: dict[str, Any], name: str, *, required: bool = False, default: str | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"{name!r} is required")
        return default
    if not isinstance(value, str):
        raise bad_request(f"{name!r} must be a string")
    if required and not value:
        raise bad_request(f"{name!r} must not be empty")
    return value


def bool_field(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{name!r} must be true or false")
    return value


def routing_type(text: object, field: str = "routing_type") -> RoutingType:
    if not isinstance(text, str):
        raise bad_request(f"{field!r} must be ANYCAST or MULTICAST")
    try:
        return RoutingType.parse(text)
    except ValueError as exc:
        raise bad_request(f"{field}: {exc}") from None


def selector_text(text: str | None) -> str | None:
    """A filter, compiled once here so a bad one is a 400 naming the column."""
    if not text:
        return None
    try:
        compile_selector(text)
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    return text


def query_bool(request: web.Request, name: str, default: bool = False) -> bool:
    value = request.query.get(name)
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise bad_request(f"query parameter {name!r} must be true or false, not {value!r}")


def query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    value = request.query.get(name)
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise bad_request(f"query parameter {name!r} must be an integer, not {value!r}") from None
    if not low <= n <= high:
        raise bad_request(f"query parameter {name!r} must be between {low} and {high}")
    return n


def query_choice(request: web.Request, name: str, choices: tuple[str, ...]) -> str:
    value = request.query.get(name) or choices[0]
    if value not in choices:
        raise bad_request(f"query parameter {name!r} must be one of {', '.join(choices)}, not {value!r}")
    return value
