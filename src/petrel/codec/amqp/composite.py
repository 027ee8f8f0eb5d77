"""Composite types: a described list whose fields have names and types (the performatives,
SASL frames, delivery states, terminus, transaction and message-section types).

``composite(name, code, symbol, fields)`` makes a frozen dataclass whose instances encode as
``Described(ULong(code), [fields...])`` (trailing nulls left off) and decode from either
descriptor. Each field is ``(name, kind, default)``; a kind ending in ``!`` is mandatory. The
kind says how a Python value is typed on the wire and what a decoded value must be:
``uint``, ``ushort``, ``ubyte``, ``ulong``, ``bool``, ``string``, ``symbol``, ``symbols``
(one symbol or an array of them, read as a tuple), ``binary``, ``fields`` (a map with symbol
keys), ``timestamp``, ``map``, ``list``, and ``*`` (any value; a described value of a known
composite is decoded to it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .errors import DECODE_ERROR, INVALID_FIELD, AmqpError
from .types import Array, Described, Symbol, Timestamp, UByte, UInt, ULong, UShort

__all__ = ["composite", "from_described", "REGISTRY", "Composite"]

#: descriptor (ULong code or Symbol) -> composite class
REGISTRY: dict[object, type] = {}


class Composite:
    """Base of the generated composite classes."""

    CODE: int = 0
    SYMBOL: str = ""
    SPEC: tuple = ()

    def to_described(self) -> Described:
        values = []
        for name, kind, _ in self.SPEC:
            values.append(_to_wire(kind, getattr(self, name), name, type(self).__name__))
        while values and values[-1] is None:
            values.pop()
        return Described(ULong(self.CODE), values)


def composite(name: str, code: int, symbol: str, fields: list[tuple[str, str, Any]]) -> type:
    spec = tuple(fields)
    cls = dataclasses.make_dataclass(
        name,
        [(f, Any, dataclasses.field(default=d)) for f, _, d in spec],
        bases=(Composite,),
        frozen=True,
        slots=True,
        namespace={"CODE": code, "SYMBOL": symbol, "SPEC": spec, "__module__": "petrel.codec.amqp"},
    )
    REGISTRY[ULong(code)] = cls
    REGISTRY[Symbol(symbol)] = cls
    return cls


def _to_wire(kind: str, v: Any, field: str, owner: str) -> Any:  # noqa: C901 - one table of kinds
    if v is None:
        if kind.endswith("!"):
            raise ValueError(f"{owner}.{field} is mandatory")
        return None
    kind = kind.rstrip("!")
    if kind == "uint":
        return UInt(v)
    if kind == "ushort":
        return UShort(v)
    if kind == "ubyte":
        return UByte(v)
    if kind == "ulong":
        return ULong(v)
    if kind == "bool":
        return bool(v)
    if kind == "symbol":
        return Symbol(v)
    if kind == "symbols":
        if isinstance(v, str):
            return Symbol(v)
        return Array.of(Symbol, v)
    if kind == "binary":
        return bytes(v)
    if kind == "string":
        return str(v)
    if kind == "timestamp":
        return Timestamp(v)
    if kind == "fields":
        return {Symbol(k) if type(k) is str else k: _value(x) for k, x in v.items()}
    return _value(v)


def _value(v: Any) -> Any:
    if isinstance(v, Composite):
        return v.to_described()
    if type(v) is list:
        return [_value(x) for x in v]
    return v


def _bad(owner: str, field: str, kind: str, v: Any) -> AmqpError:
    return AmqpError(DECODE_ERROR, f"{owner}.{field} must be a {kind}, not {type(v).__name__}")


def _from_wire(kind: str, v: Any, field: str, owner: str) -> Any:  # noqa: C901 - one table of kinds
    mandatory = kind.endswith("!")
    kind = kind.rstrip("!")
    if v is None:
        if mandatory:
            raise AmqpError(INVALID_FIELD, f"{owner}.{field} is mandatory")
        return None
    if kind in ("uint", "ushort", "ubyte", "ulong", "timestamp"):
        if type(v) is bool or not isinstance(v, int) or v < 0 and kind != "timestamp":
            raise _bad(owner, field, kind, v)
        return v
    if kind == "bool":
        if type(v) is not bool:
            raise _bad(owner, field, kind, v)
        return v
    if kind in ("string", "symbol"):
        if not isinstance(v, str):
            raise _bad(owner, field, kind, v)
        return v
    if kind == "symbols":
        if isinstance(v, str):
            return (v,)
        if isinstance(v, Array) and all(isinstance(x, str) for x in v.items):
            return tuple(v.items)
        raise _bad(owner, field, kind, v)
    if kind == "binary":
        if not isinstance(v, bytes):
            raise _bad(owner, field, kind, v)
        return v
    if kind in ("fields", "map"):
        if not isinstance(v, dict):
            raise _bad(owner, field, kind, v)
        return {k: from_value(x) for k, x in v.items()}
    if kind == "list":
        if not isinstance(v, list):
            raise _bad(owner, field, kind, v)
        return v
    return from_value(v)


def from_value(v: Any) -> Any:
    """A decoded value with every described value of a known composite made into it."""
    if type(v) is Described:
        cls = REGISTRY.get(v.descriptor)
        if cls is not None:
            return from_described(v)
    return v


def from_described(d: Described) -> Any:
    """The composite a described value stands for; raises `AmqpError` if it is malformed."""
    cls = REGISTRY.get(d.descriptor)
    if cls is None:
        raise AmqpError(DECODE_ERROR, f"unknown descriptor {d.descriptor!r}")
    value = d.value
    if not isinstance(value, list):
        raise AmqpError(DECODE_ERROR, f"{cls.__name__} must be a described list")
    spec = cls.SPEC
    kwargs = {}
    for i, (name, kind, default) in enumerate(spec):
        raw = value[i] if i < len(value) else None
        got = _from_wire(kind, raw, name, cls.__name__)
        kwargs[name] = default if got is None else got
    return cls(**kwargs)
