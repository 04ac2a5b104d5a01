"""Compiled response encoders for the hot APIs (Produce, Fetch). Pure, no I/O.

Why this exists: kio serialises with one small Python function per field and per primitive,
each doing its own `struct.pack` and `buffer.write`, and a `BytesIO` for every flexible
entity's tagged fields. That costs 60-170 µs for a small Produce response, which a broker
pays on every request. Produce and Fetch responses are fixed in layout per version, so this
module turns each kio response type into one straight-line Python function (generated source,
compiled once per type and cached) that appends to a single `bytearray`:

- consecutive fixed-size fields (int8..int64, bool, error codes, timedeltas, timestamps, uuids)
  become one `struct.pack` of a precompiled format;
- strings, bytes and arrays are written with their legacy (int16 / int32 length) or compact
  (uvarint length + 1) prefix, exactly as kio chooses them (compact iff the entity is flexible);
- a flexible entity ends with its tagged fields: those equal to their default are skipped,
  the others written in tag order as uvarint tag, uvarint size, value (KIP-482), as kio does;
- a `records` field holding a `FileRecords` (or large `bytes`) is not copied: its length
  prefix is written and its place noted, so the frame comes out as parts in order, file
  sources kept for sendfile.

The generator reads the same kio metadata kio's own writer is built from
(`kio.serial._introspect`: `classify_field`, `get_schema_field_type`, `is_optional`,
`get_field_tag`; `_implicit_defaults.get_tagged_field_default`), so the two agree field by
field. `tests/property/test_fast_encode.py` checks byte identity against kio for every version
of Produce and Fetch this broker advertises.

Safe to share between tasks: compiled functions are cached per type and hold no state.
"""

from __future__ import annotations

import struct
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, classify_field, get_field_tag, get_schema_field_type, is_optional

from .file_records import FileRecords

# The APIs whose responses take the compiled path (Produce, Fetch); the rest go through kio.
FAST_API_KEYS = frozenset({0, 1})

# `bytes` records at least this long become their own part instead of being copied.
SEPARATE_PART_BYTES = 64 * 1024

_SIZE_AND_CORRELATION = struct.Struct(">ii")
_NULL_INT16 = b"\xff\xff"  # a null legacy string: length -1
_NULL_INT32 = b"\xff\xff\xff\xff"  # a null legacy bytes or array: length -1

# kafka_type -> (struct code, expression template over `{x}`), for fixed-size fields.
_FIXED = {
    "int8": ("b", "{x}"),
    "int16": ("h", "{x}"),
    "int32": ("i", "{x}"),
    "int64": ("q", "{x}"),
    "uint8": ("B", "{x}"),
    "uint16": ("H", "{x}"),
    "uint32": ("I", "{x}"),
    "uint64": ("Q", "{x}"),
    "float64": ("d", "{x}"),
    "bool": ("?", "{x}"),
    "error_code": ("h", "{x}.value"),
    "timedelta_i32": ("i", "_millis_timedelta({x})"),
    "timedelta_i64": ("q", "_millis_timedelta({x})"),
    "datetime_i64": ("q", "_millis_datetime({x})"),
    "uuid": ("16s", "_uuid_bytes({x})"),
}
_NULLABLE_FIXED = {"datetime_i64": ("q", "_millis_nullable_datetime({x})"), "uuid": ("16s", "_uuid_bytes({x})")}


def _millis_timedelta(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _millis_datetime(value: Any) -> int:
    return round(value.timestamp() * 1000)


def _millis_nullable_datetime(value: Any) -> int:
    return -1 if value is None else round(value.timestamp() * 1000)


def _uuid_bytes(value: Any) -> bytes:
    return b"\x00" * 16 if value is None else value.bytes


def _uvarint(buf: bytearray, value: int) -> None:
    while value > 0x7F:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


class _Source:
    """Generated source of one module: a function per entity type, constants by name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "_uvarint": _uvarint,
            "_millis_timedelta": _millis_timedelta,
            "_millis_datetime": _millis_datetime,
            "_millis_nullable_datetime": _millis_nullable_datetime,
            "_uuid_bytes": _uuid_bytes,
            "SEPARATE_PART_BYTES": SEPARATE_PART_BYTES,
        }
        self.functions: dict[type, str] = {}
        self._counter = 0

    def constant(self, prefix: str, value: Any) -> str:
        self._counter += 1
        name = f"_{prefix}{self._counter}"
        self.names[name] = value
        return name

    def entity(self, entity_type: type) -> str:
        """The name of the function writing `entity_type`, generating it on first use."""
        name = self.functions.get(entity_type)
        if name is None:
            self._counter += 1
            name = self.functions[entity_type] = f"write_{entity_type.__name__}_{self._counter}"
            body: list[str] = []
            _entity_body(self, entity_type, body)
            self.lines.append(f"def {name}(b, files, v):")
            self.lines.extend("    " + line for line in body or ["pass"])
            self.lines.append("")
        return name


def _uvarint_line(target: str, expr: str) -> str:
    return f"n = {expr}\nif n < 128: {target}.append(n)\nelse: _uvarint({target}, n)"


def _value_lines(src: _Source, field: Any, flexible: bool, optional: bool, target: str, x: str, files: str) -> list[str]:
    """Lines writing one (non-array) value `x` of `field` to `target`."""
    field_class = classify_field(field)
    if isinstance(field_class, EntityField | EntityTupleField):
        call = f"{src.entity(field_class.type_)}({target}, {files}, {x})"
        if optional and isinstance(field_class, EntityField):  # KIP-893 nullable struct: int8 marker
            return [f"if {x} is None: {target}.append(0xFF)", "else:", f"    {target}.append(1)", f"    {call}"]
        return [call]
    kafka_type = get_schema_field_type(field)
    if kafka_type in ("string", "bytes", "records"):
        lines: list[str] = []
        if optional:
            null = f"{target}.append(0)" if flexible else f"{target} += {src.constant('NULL', _NULL_INT16 if kafka_type == 'string' else _NULL_INT32)}"
            lines += [f"if {x} is None: {null}", "else:"]
            indent = "    "
        else:
            indent = ""
        inner: list[str] = []
        if kafka_type == "string":
            inner.append(f"if type({x}) is not bytes: {x} = {x}.encode()")
        if kafka_type == "string":
            length = src.constant("S", struct.Struct(">h").pack)
        else:
            length = src.constant("S", struct.Struct(">i").pack)
        prefix = _uvarint_line(target, f"len({x}) + 1").split("\n") if flexible else [f"{target} += {length}(len({x}))"]
        inner += prefix
        if kafka_type == "records":
            # FileRecords (and large bytes) stay separate parts: note where they go, copy nothing.
            inner += [
                f"if type({x}) is _FileRecords: {files}.append((len({target}), {x}.source, {x}.length))",
                f"elif len({x}) >= SEPARATE_PART_BYTES: {files}.append((len({target}), {x}, len({x})))",
                f"else: {target} += {x}",
            ]
        else:
            inner.append(f"{target} += {x}")
        return lines + [indent + line for piece in inner for line in piece.split("\n")]
    table = _NULLABLE_FIXED if optional else _FIXED
    if kafka_type not in table:
        raise NotImplementedError(f"no compiled writer for {kafka_type!r} (optional={optional})")
    code, template = table[kafka_type]
    pack = src.constant("S", struct.Struct(">" + code).pack)
    return [f"{target} += {pack}({template.format(x=x)})"]


def _is_fixed(field: Any, optional: bool) -> bool:
    field_class = classify_field(field)
    if not isinstance(field_class, PrimitiveField):
        return False
    return get_schema_field_type(field) in (_NULLABLE_FIXED if optional else _FIXED)


def _field_lines(src: _Source, field: Any, flexible: bool, optional: bool, target: str, x: str, files: str) -> list[str]:
    """Lines writing field value `x` (an array or a single value) to `target`."""
    field_class = classify_field(field)
    if not field_class.is_array:
        return _value_lines(src, field, flexible, optional, target, x, files)
    item = f"{x}_item"
    if isinstance(field_class, EntityTupleField):
        per_item = [f"{src.entity(field_class.type_)}({target}, {files}, {item})"]
    else:
        per_item = _value_lines(src, field, flexible, False, target, item, files)
    if flexible:
        null = f"{target}.append(0)"
        length = _uvarint_line(target, f"len({x}) + 1").split("\n")
    else:
        null = f"{target} += {src.constant('NULL', _NULL_INT32)}"
        length = [f"{target} += {src.constant('S', struct.Struct('>i').pack)}(len({x}))"]
    return [f"if {x} is None: {null}", "else:", *("    " + line for line in length), f"    for {item} in {x}:", *("        " + line for line in per_item)]


def _entity_body(src: _Source, entity_type: type, body: list[str]) -> None:
    flexible = entity_type.__flexible__
    plain = []
    tagged = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append(field)
        else:
            tagged.append((tag, field))
    # Consecutive fixed-size fields: one struct.pack.
    group: list[Any] = []

    def flush() -> None:
        if not group:
            return
        codes, exprs = [], []
        for f in group:
            code, template = (_NULLABLE_FIXED if is_optional(f) else _FIXED)[get_schema_field_type(f)]
            codes.append(code)
            exprs.append(template.format(x=f"v.{f.name}"))
        pack = src.constant("S", struct.Struct(">" + "".join(codes)).pack)
        body.append(f"b += {pack}({', '.join(exprs)})")
        group.clear()

    for field in plain:
        optional = is_optional(field)
        if _is_fixed(field, optional):
            group.append(field)
            continue
        flush()
        body.append(f"x = v.{field.name}")
        body.extend(_field_lines(src, field, flexible, optional, "b", "x", "files"))
    flush()
    if not flexible:
        if tagged:
            raise ValueError(f"tagged fields on non-flexible {entity_type.__name__}")
        return
    if not tagged:
        body.append("b.append(0)  # no tagged fields")
        return
    # Tagged fields in tag order, skipped when equal to their default (as kio's writer).
    body.append("tags = None")
    for tag, field in sorted(tagged, key=lambda pair: pair[0]):
        default = field.default if field.default is not MISSING else get_tagged_field_default(field)
        name = src.constant("DEFAULT", default)
        body.append(f"x = v.{field.name}")
        body.append(f"if x is not {name} and x != {name}:")
        body.append("    if tags is None: tags = []")
        body.append("    t = bytearray()")
        # Tagged fields are never nullable on the wire (kio treats them as not optional).
        body.extend("    " + line for line in _field_lines(src, field, flexible, False, "t", "x", "None"))
        body.append(f"    tags.append(({int(tag)}, t))")
    body.append("if tags is None: b.append(0)")
    body.append("else:")
    body.append("    _uvarint(b, len(tags))")
    body.append("    for tag, t in tags:")
    body.append("        _uvarint(b, tag)")
    body.append("        _uvarint(b, len(t))")
    body.append("        b += t")


@cache
def entity_encoder(entity_type: type) -> Any:
    """A compiled `write(b: bytearray, files: list, entity)` for a kio entity type.

    `files` receives `(position, part, size_bytes)` for each records value kept out of `b`:
    the source of a `FileRecords`, or `bytes` of at least `SEPARATE_PART_BYTES`; its bytes
    belong at `position` of `b`.
    """
    src = _Source()
    src.names["_FileRecords"] = FileRecords
    name = src.entity(entity_type)
    namespace = dict(src.names)
    exec(compile("\n".join(src.lines), f"<fast_encode {entity_type.__module__}.{entity_type.__name__}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


def source_of(entity_type: type) -> str:
    """The generated source for `entity_type` (for reading and debugging)."""
    src = _Source()
    src.entity(entity_type)
    return "\n".join(src.lines)


def encode_response_parts(correlation_id: int, body: Any) -> list[Any]:
    """A response frame, size prefix included, as parts in order: `bytes`, or the `source` of
    a `FileRecords`, or a large records `bytes` value itself (see `framing.encode_response`)."""
    body_type = type(body)
    write = entity_encoder(body_type)
    b = bytearray(8)
    files: list[tuple[int, Any, int]] = []
    if body_type.__header_schema__.__version__ >= 1:
        b.append(0)  # response header v1: no tagged fields
    write(b, files, body)
    if not files:
        _SIZE_AND_CORRELATION.pack_into(b, 0, len(b) - 4, correlation_id)
        return [bytes(b)]
    size = len(b) - 4
    for _position, _part, size_bytes in files:
        size += size_bytes
    _SIZE_AND_CORRELATION.pack_into(b, 0, size, correlation_id)
    view = memoryview(b)
    parts: list[Any] = []
    start = 0
    for position, part, _size_bytes in files:
        parts.append(bytes(view[start:position]))
        parts.append(part)
        start = position
    if start < len(b):
        parts.append(bytes(view[start:]))
    return parts
