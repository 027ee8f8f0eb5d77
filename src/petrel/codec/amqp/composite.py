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
from .types import Array, Described, Symbol, Timestamp, UByte, UInt, ULong, UShort, read_value

__all__ = ["composite", "from_described", "decode_composite", "REGISTRY", "Composite"]

#: descriptor (ULong code or Symbol) -> composite class
REGISTRY: dict[object, type] = {}
#: small-ulong descriptor code -> composite class (`decode_composite`)
_BY_CODE: dict[int, type] = {}


class Composite:
    """Base of the generated composite classes."""

    CODE: int = 0
    SYMBOL: str = ""
    SPEC: tuple = ()
    DESCRIPTOR: ULong = ULong(0)
    ENCODERS: tuple = ()  # (field name, value -> wire value or None, mandatory)
    DECODERS: tuple = ()  # (field name, wire value -> value, mandatory, default)

    def to_described(self) -> Described:
        values = []
        for name, encode_field, mandatory in self.ENCODERS:
            v = getattr(self, name)
            if v is None:
                if mandatory:
                    raise ValueError(f"{type(self).__name__}.{name} is mandatory")
                values.append(None)
            else:
                values.append(encode_field(v))
        while values and values[-1] is None:
            values.pop()
        return Described(self.DESCRIPTOR, values)


def composite(name: str, code: int, symbol: str, fields: list[tuple[str, str, Any]]) -> type:
    spec = tuple(fields)
    encoders = tuple((f, _ENCODE.get(kind.rstrip("!"), _value), kind.endswith("!")) for f, kind, _ in spec)
    decoders = tuple((f, _decoder(kind.rstrip("!"), f, name), kind.endswith("!"), d) for f, kind, d in spec)
    cls = dataclasses.make_dataclass(
        name,
        [(f, Any, dataclasses.field(default=d)) for f, _, d in spec],
        bases=(Composite,),
        frozen=True,
        slots=True,
        namespace={"CODE": code, "SYMBOL": symbol, "SPEC": spec, "DESCRIPTOR": ULong(code),
                   "ENCODERS": encoders, "DECODERS": decoders, "__module__": "petrel.codec.amqp"},
    )
    REGISTRY[ULong(code)] = cls
    REGISTRY[Symbol(symbol)] = cls
    if code < 256:
        _BY_CODE[code] = cls
    cls.FAST = tuple((_FAST_KINDS.get(kind.rstrip("!"), _NOTHING), d, kind.endswith("!"),
                      decoder) for (_, kind, d), (_, decoder, _, _) in zip(spec, decoders))
    # the defaults of the fields after the first n (None when one of them is mandatory)
    cls.TAILS = tuple(None if any(k.endswith("!") for _, k, _ in spec[n:]) else tuple(d for _, _, d in spec[n:])
                      for n in range(len(spec) + 1))
    return cls


def _value(v: Any) -> Any:
    if isinstance(v, Composite):
        return v.to_described()
    if type(v) is list:
        return [_value(x) for x in v]
    return v


def _symbols(v: Any) -> Any:
    return Symbol(v) if isinstance(v, str) else Array.of(Symbol, v)


def _fields(v: dict) -> dict:
    return {Symbol(k) if type(k) is str else k: _value(x) for k, x in v.items()}


_ENCODE = {
    "uint": UInt, "ushort": UShort, "ubyte": UByte, "ulong": ULong, "bool": bool, "symbol": Symbol,
    "symbols": _symbols, "binary": bytes, "string": str, "timestamp": Timestamp, "fields": _fields,
}


def _decoder(kind: str, field: str, owner: str):  # noqa: C901 - one table of kinds
    def bad(v: Any) -> AmqpError:
        return AmqpError(DECODE_ERROR, f"{owner}.{field} must be a {kind}, not {type(v).__name__}")

    if kind in ("uint", "ushort", "ubyte", "ulong"):
        def unsigned(v: Any) -> Any:
            if type(v) is bool or not isinstance(v, int) or v < 0:
                raise bad(v)
            return v
        return unsigned
    if kind == "timestamp":
        def timestamp(v: Any) -> Any:
            if type(v) is bool or not isinstance(v, int):
                raise bad(v)
            return v
        return timestamp
    if kind == "bool":
        def boolean(v: Any) -> Any:
            if type(v) is not bool:
                raise bad(v)
            return v
        return boolean
    if kind in ("string", "symbol"):
        def text(v: Any) -> Any:
            if not isinstance(v, str):
                raise bad(v)
            return v
        return text
    if kind == "symbols":
        def symbols(v: Any) -> Any:
            if isinstance(v, str):
                return (v,)
            if isinstance(v, Array) and all(isinstance(x, str) for x in v.items):
                return tuple(v.items)
            raise bad(v)
        return symbols
    if kind == "binary":
        def binary(v: Any) -> Any:
            if not isinstance(v, bytes):
                raise bad(v)
            return v
        return binary
    if kind in ("fields", "map"):
        def mapping(v: Any) -> Any:
            if not isinstance(v, dict):
                raise bad(v)
            return {k: from_value(x) for k, x in v.items()}
        return mapping
    if kind == "list":
        def sequence(v: Any) -> Any:
            if not isinstance(v, list):
                raise bad(v)
            return v
        return sequence
    return from_value


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
    n = len(value)
    kwargs = {}
    for i, (name, decode_field, mandatory, default) in enumerate(cls.DECODERS):
        raw = value[i] if i < n else None
        if raw is None:
            if mandatory:
                raise AmqpError(INVALID_FIELD, f"{cls.__name__}.{name} is mandatory")
            kwargs[name] = default
        else:
            kwargs[name] = decode_field(raw)
    return cls(**kwargs)


# -- the common form, decoded in one pass -------------------------------------------------------

_UINTS = frozenset((0x43, 0x52, 0x70, 0x50, 0x60, 0x44, 0x53, 0x80))
_BOOLS = frozenset((0x41, 0x42, 0x56))
_NOTHING: frozenset = frozenset()
#: field kind -> the format codes `decode_composite` reads itself (each a value the kind's decoder takes)
_FAST_KINDS = {"uint": _UINTS, "ushort": _UINTS, "ubyte": _UINTS, "ulong": _UINTS, "bool": _BOOLS,
               "binary": frozenset((0xa0,))}
_UNSIGNED = {0x52: UInt, 0x50: UByte, 0x53: ULong}


def decode_composite(data: bytes, pos: int, end: int) -> tuple[Any, int] | None:
    """The composite at ``pos`` and the position after it, read in one pass when it has the form
    peers send (a small-ulong descriptor of a known composite and a list whose fields are each
    readable or null); None for any other form, and for anything malformed, so that the caller
    decodes it with `decode_one` and `from_described`, which say what is wrong."""
    try:
        if data[pos] != 0 or data[pos + 1] != 0x53:
            return None
        cls = _BY_CODE.get(data[pos + 2])
        if cls is None:
            return None
        pos += 3
        code = data[pos]
        if code == 0xc0:
            count = data[pos + 2]
            stop = pos + 2 + data[pos + 1]
            pos += 3
        elif code == 0x45:
            count, stop = 0, pos + 1
            pos = stop
        elif code == 0xd0:
            size, count = int.from_bytes(data[pos + 1:pos + 5], "big"), int.from_bytes(data[pos + 5:pos + 9], "big")
            stop = pos + 5 + size
            pos += 9
        else:
            return None
        fast = cls.FAST
        if stop > end or count > len(fast):
            return None
        args = []
        for i in range(count):
            if pos >= stop:
                return None
            codes, default, mandatory, decode_field = fast[i]
            code = data[pos]
            if code == 0x40:
                if mandatory:
                    return None
                args.append(default)
                pos += 1
            elif code in codes:
                if code == 0x43:
                    value, pos = UInt(0), pos + 1
                elif code == 0x41 or code == 0x42:
                    value, pos = code == 0x41, pos + 1
                elif code == 0x52 or code == 0x50 or code == 0x53:
                    value, pos = _UNSIGNED[code](data[pos + 1]), pos + 2
                elif code == 0x70:
                    value, pos = UInt(int.from_bytes(data[pos + 1:pos + 5], "big")), pos + 5
                elif code == 0xa0:
                    n = data[pos + 1]
                    value, pos = bytes(data[pos + 2:pos + 2 + n]), pos + 2 + n
                else:  # the others: the general reader
                    value, pos = read_value(data, pos, stop, 2)
                    value = decode_field(value)
                if pos > stop:
                    return None
                args.append(value)
            else:
                value, pos = read_value(data, pos, stop, 2)
                args.append(decode_field(value))
        tail = cls.TAILS[count]
        if pos != stop or tail is None:
            return None
        return cls(*args, *tail), stop
    except (AmqpError, IndexError, ValueError, TypeError):
        return None
