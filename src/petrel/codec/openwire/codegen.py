"""Making the per-type readers and writers of `loose` and `tight` from the classes' `WIRE`.

An encoding gives the lines that read or write one field of a kind; this module wraps them
into one function a type (compiled once, at import: the source is made here from `WIRE`,
never from input), builds the value through its slots' setters (a frozen dataclass's
`__init__` costs twice as much), fills the type tables, and puts the identities (ids and
destinations: one string and fixed-size fields, repeated command after command) behind
caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

from .commands import BY_TYPE, DESTINATION_TYPES, MESSAGE_TYPES, DataType, Destination, Message, WireFormatInfo
from .errors import OpenWireLocalError, OpenWireProtocolError

__all__ = ["CACHE_SIZE", "CACHE_BYTES", "FIXED", "is_identity", "compile_reader", "compile_writer", "reader_lines", "writer_lines", "fail", "cached_writer", "fill_tables",
           "local_error", "fast_constructor", "new_message"]

FIXED = {"b": 1, "y": 1, "i": 4, "q": 8}  # (loose sizes)
CACHE_SIZE = 4096  # identities per type remembered before a cache starts afresh
CACHE_BYTES = 256  # ...each of at most this many bytes (a client's long names are not kept)


def is_identity(wire: str) -> bool:
    """An identity or a destination: one string and fixed-size fields, so the same bytes (and
    bits) always read as the same value."""
    return wire.count("s") == 1 and all(k == "s" or k in FIXED for k in wire)


def _indent(lines: Iterable[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


def _values(cls: type, kind: int | None) -> list[str]:
    """The values of the fields in declaration order: the locals read, a message's or a
    destination's `kind` the type byte."""
    out, i = [], 0
    for f in fields(cls):
        if f.name == "kind":
            out.append(str(int(kind)))
        else:
            out.append(f"f{i}")
            i += 1
    return out


def _run(lines: list[str], namespace: dict[str, Any], name: str) -> Callable:
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    return namespace[name]


def compile_reader(cls: type, kind: int | None, params: str, returns: str, field_lines: Callable,
                   namespace: dict[str, Any]) -> Callable:
    """`def read(<params>)`: each field by `field_lines(kind, var)` into f0, f1..., then the
    value built, returned with `returns`."""
    lines = [f"def read({params}):", "    end = len(data)"]
    for i, k in enumerate(cls.WIRE):
        lines += _indent(field_lines(k, f"f{i}"))
    lines.append("    o = _new(CLS)")
    setters = {}
    for i, (name, value) in enumerate(zip((f.name for f in fields(cls)), _values(cls, kind))):
        setters[f"S{i}"] = getattr(cls, name).__set__
        lines.append(f"    S{i}(o, {value})")
    lines.append(f"    return o, {returns}")
    return _run(lines, {**namespace, **setters, "CLS": cls, "_new": object.__new__}, "read")


def compile_writer(cls: type, params: str, field_lines: Callable, namespace: dict[str, Any]) -> Callable:
    """`def write(obj, <params>)`: the type byte to `out`, then each field by `field_lines`."""
    names = [f.name for f in fields(cls) if f.name != "kind"]
    if len(names) != len(cls.WIRE):
        raise AssertionError(f"{cls.__name__}: {len(names)} fields, WIRE has {len(cls.WIRE)}")
    type_byte = "obj.kind" if cls is Message or cls is Destination else str(int(cls.TYPE))
    lines = [f"def write(obj, {params}):", f"    out.append({type_byte})"]
    for i, (k, name) in enumerate(zip(cls.WIRE, names)):
        lines.append(f"    f{i} = obj.{name}")
        lines += _indent(field_lines(k, f"f{i}"))
    return _run(lines, namespace, "write")


def reader_lines(kind: str, var: str, present: Callable, read_string: Callable, read_blob: Callable,
                 read_nested: Callable) -> list[str]:
    """The lines reading a field of the kinds both encodings read alike but for how presence
    is told (`present(var, lines)`: a flag byte in loose encoding, a bit in tight): bytes and
    ints, strings, byte arrays and maps, nested structures and their arrays."""
    if kind == "y":
        return [f"{var} = data[p]", "p += 1", f"if {var} > 127: {var} -= 256"]
    if kind == "i":
        return [f"{var}, = _I.unpack_from(data, p)", "p += 4"]
    if kind == "s":
        return present(var, read_string(var))
    if kind == "B":
        return present(var, read_blob(var))
    if kind == "P":
        return present(var, [*read_blob(var), f"{var} = decode_map({var}, d)"])
    if kind == "o":
        return present(var, read_nested(var))
    if kind == "O":
        return present(var, [
            "n, = _H.unpack_from(data, p)",
            "if n < 0: _fail(f'an array of {n} structures')",
            "p += 2",
            "items = []",
            "for _ in range(n):",
            *_indent(present("v", read_nested("v"))),
            "    items.append(v)",
            f"{var} = tuple(items)",
        ])
    raise AssertionError(f"unknown field kind {kind!r}")


def fail(why: str) -> None:
    raise OpenWireProtocolError(why)


def writer_lines(kind: str, var: str, flags: str, write_string: Callable, write_nested: Callable) -> list[str]:
    """The lines writing a field of the kinds both encodings write alike but for the buffer a
    presence flag goes to (`flags`: "out", the bytes, in loose encoding; "bs", the bits, in
    tight): bytes and ints, strings, byte arrays and maps, nested structures, their arrays,
    throwables."""
    if kind == "y":
        return [f"out += _B.pack({var})"]
    if kind == "i":
        return [f"out += _I.pack({var})"]
    if kind == "s":
        return write_string(var)
    absent = [f"if {var} is None:", f"    {flags}.append(0)", "else:", f"    {flags}.append(1)"]
    if kind in "BP":
        return [*absent, f"    raw = {var if kind == 'B' else f'encode_map({var})'}", "    out += _I.pack(len(raw))",
                "    out += raw"]
    if kind == "o":
        return write_nested(var)
    if kind == "O":
        return [*absent, f"    out += _H.pack(len({var}))", f"    for v in {var}:",
                *_indent(write_nested("v"), "        ")]
    if kind == "T":
        return [*absent, *_indent(write_string(f"{var}.class_name")), *_indent(write_string(f"{var}.message"))]
    raise AssertionError(f"unknown field kind {kind!r}")


def cached_writer(write: Callable) -> Callable:
    """`write` behind a cache of what it wrote for each object, by identity (the adapter sends
    the same consumer id, destination and producer id objects again and again): the bytes, and
    in tight encoding the bits too (`bs`)."""
    cache: dict[int, tuple] = {}

    def cached(obj: Any, out: bytearray, bs: bytearray | None = None) -> None:
        hit = cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            out += hit[1]
            if bs is not None:
                bs += hit[2]
            return
        start = len(out)
        if bs is None:
            write(obj, out)
            kept = (obj, bytes(out[start:]), b"")
        else:
            bstart = len(bs)
            write(obj, out, bs)
            kept = (obj, bytes(out[start:]), bytes(bs[bstart:]))
        if len(kept[1]) <= CACHE_BYTES:
            if len(cache) >= CACHE_SIZE:
                cache.clear()
            cache[id(obj)] = kept  # (the object kept: its id stays its own meanwhile)

    return cached


def fill_tables(readers: list[Callable], writers: dict[type, Callable], make_reader: Callable,
                make_writer: Callable, read_wire_format_info: Callable, write_wire_format_info: Callable) -> None:
    """The readers by type byte (all 256: unknown types raise a protocol error) and the writers
    by class, into the encoding's tables (which its compiled code names), identities behind
    their caches (`make_reader(cls, kind)` caches its own)."""
    readers[:] = [_unknown(t) for t in range(256)]
    writers[WireFormatInfo] = write_wire_format_info
    readers[DataType.WIREFORMAT_INFO] = read_wire_format_info
    for type_, cls in BY_TYPE.items():
        readers[type_] = make_reader(cls, None)
    for type_ in DESTINATION_TYPES:
        readers[type_] = make_reader(Destination, type_)
    for type_ in MESSAGE_TYPES:
        readers[type_] = make_reader(Message, type_)
    for cls in (*BY_TYPE.values(), Destination, Message):
        write = make_writer(cls)
        writers[cls] = cached_writer(write) if is_identity(cls.WIRE) else write


def _unknown(type_: int) -> Callable:
    def read(*_: Any) -> Any:
        raise OpenWireProtocolError(f"unknown or unsupported data structure type {type_}")
    return read


def fast_constructor(cls: type) -> Callable:
    """A constructor taking the same keywords as `cls` (all with their defaults) that sets the
    fields through their slots (twice as fast as a frozen dataclass's own, for what is built
    per message)."""
    fs = fields(cls)
    params = ", ".join(f"{f.name}=D{i}" for i, f in enumerate(fs))
    lines = [f"def make(*, {params}):", "    o = _new(CLS)", *(f"    S{i}(o, {f.name})" for i, f in enumerate(fs)),
             "    return o"]
    namespace = {"_new": object.__new__, "CLS": cls, **{f"D{i}": f.default for i, f in enumerate(fs)},
                 **{f"S{i}": getattr(cls, f.name).__set__ for i, f in enumerate(fs)}}
    return _run(lines, namespace, "make")


#: Message(...) for the broker's dispatches
new_message = fast_constructor(Message)


def local_error(command: Any, exc: Exception) -> OpenWireLocalError:
    """What an encoding's failure says: a type with no writer at any depth (a KeyError of the
    writers), or a field of the wrong type or range."""
    if isinstance(exc, KeyError):
        return OpenWireLocalError(f"cannot encode a {getattr(exc.args[0], '__name__', exc.args[0])}")
    return OpenWireLocalError(f"cannot encode {type(command).__name__}: {exc}")
