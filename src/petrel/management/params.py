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


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty body is ``{}``."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


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
