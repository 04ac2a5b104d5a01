"""Bounds of a request body, checked against its frame before kio parses it. Pure, no I/O.

Why this exists: kio's native reader trusts declared lengths. For an array it calls
`Vec::with_capacity(count)` before reading a single element, so a 25-byte Metadata v12 request
whose compact array length is the varint `ff ff ff ff 0f` (2^32 - 2 entries) asks for 32 GiB
and the whole process aborts (SIGABRT, not an exception: nothing in Python can catch it). Null
arrays are returned as None whatever the schema says, so a handler that needs a list crashes.

Why a walker driven by kio's schema, and not something else:
- A cap on array counts alone is not exact: a count of 10^6 in a 1 MiB frame is within any
  sane cap yet impossible, and a cap low enough to be safe would refuse real requests.
- Our own parser for every message would duplicate kio. Walking is much smaller: it reads only
  lengths, counts, null markers and tags, and skips every other byte.
- The walker is compiled from the same metadata kio's native reader compiles its own schema
  from (`kio.serial._introspect`: `classify_field`, `get_schema_field_type`, `is_optional`,
  `get_field_tag`), with the same wire rules (compact forms iff the entity is flexible, tagged
  fields only in flexible entities and never nullable). So the two agree on where every field
  starts and ends, and a body the walker accepts is one in which every length kio will read fits
  in the bytes that remain. kio never sees a length it would have to allocate for blindly.

What the walker checks, for every field of the body, nested entities and tagged fields included
(Kafka's generated readers do the same: "Tried to allocate a collection of size N, but there
are only M bytes remaining"):
- an array count (int32, or uvarint - 1 when compact) times the smallest encoding of one
  element (at least one byte) fits in the bytes that remain; then each element is walked;
- a string or bytes length (int16 / int32, or uvarint - 1 when compact) fits in the bytes that
  remain; negative lengths other than -1 are refused;
- null (-1, or 0 when compact) only where the schema allows null: Kafka refuses a non-nullable
  field "serialized as null" as a request it cannot parse, and so do we;
- a tagged field's size fits in the bytes that remain, and a known tag's value fills exactly its
  size. Unknown tags are legal in Kafka (forward compatibility) but make kio raise KeyError: the
  walker reports their byte ranges, and `strip_unknown_tags` cuts them out (fixing the count)
  so the request parses as Kafka would parse it.

A refused body raises `MalformedRequest(api_key, api_version, reason)`, a `ProtocolError`: the
server closes the connection, as Kafka closes a connection whose request it cannot parse
(`RequestContext.parseRequest` -> InvalidRequestException -> `Processor.close`).

Cost: one pass over the fields, never over record bytes (a Produce body is a handful of steps
whatever its size). Compiled plans are cached per kio entity type. Safe to share between tasks:
the plans are immutable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache

from kio.serial._introspect import classify_field, get_field_tag, get_schema_field_type, is_optional

from .errors import MalformedRequest

__all__ = ["check_request_body", "strip_unknown_tags", "TagSpan"]

# A step walks one field: (frame, position, end, unknown tags found) -> position after the field.
Step = Callable[[bytes, int, int, list], int]

_FIXED_BYTES = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float64": 8, "bool": 1, "uuid": 16, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8,
    "datetime_i64": 8,
}  # fmt: skip
_LENGTH_PREFIXED = {"string", "bytes", "records"}


@dataclasses.dataclass(frozen=True, slots=True)
class TagSpan:
    """An unknown tagged field inside an entity's tagged-field section.

    `count_start`/`count_end` are the bytes of that section's uvarint count, `count` its value;
    `start`/`end` the bytes of the field (tag, size and value).
    """

    count_start: int
    count_end: int
    count: int
    start: int
    end: int


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _uvarint(frame: bytes, position: int, end: int) -> tuple[int, int]:
    """Kafka's unsigned varint (at most 5 bytes), as kio and ByteUtils.readUnsignedVarint read it."""
    value = shift = 0
    for _ in range(5):
        if position >= end:
            raise _Refused(f"truncated varint at byte {position}")
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
    raise _Refused(f"varint longer than 5 bytes at byte {position - 5}")


def _int(frame: bytes, position: int, end: int, size: int) -> tuple[int, int]:
    if position + size > end:
        raise _Refused(f"truncated int{size * 8} at byte {position}")
    return int.from_bytes(frame[position : position + size], "big", signed=True), position + size


def _skip(size: int) -> Step:
    def step(frame: bytes, position: int, end: int, unknown: list) -> int:
        position += size
        if position > end:
            raise _Refused(f"{size} bytes of fixed-size fields run past the end (byte {end})")
        return position

    return step


def _length_prefixed(name: str, flexible: bool, nullable: bool, length_bytes: int) -> Step:
    """A string (int16 length) or bytes (int32 length); compact: uvarint length + 1."""

    def step(frame: bytes, position: int, end: int, unknown: list) -> int:
        if flexible:
            encoded, position = _uvarint(frame, position, end)
            length = encoded - 1
        else:
            length, position = _int(frame, position, end, length_bytes)
        if length == -1:
            if not nullable:
                raise _Refused(f"non-nullable field {name} was serialized as null")
            return position
        if length < -1:
            raise _Refused(f"field {name} has negative length {length}")
        if length > end - position:
            raise _Refused(f"field {name} claims {length} bytes, {end - position} remain")
        return position + length

    return step


def _array(name: str, flexible: bool, nullable: bool, item: Step, item_min_bytes: int, item_fixed: bool = False) -> Step:
    def step(frame: bytes, position: int, end: int, unknown: list) -> int:
        if flexible:
            encoded, position = _uvarint(frame, position, end)
            count = encoded - 1
        else:
            count, position = _int(frame, position, end, 4)
        if count == -1:
            if not nullable:
                raise _Refused(f"non-nullable array {name} was serialized as null")
            return position
        if count < -1:
            raise _Refused(f"array {name} has negative length {count}")
        if count * item_min_bytes > end - position:
            raise _Refused(f"array {name} claims {count} entries of at least {item_min_bytes} bytes, {end - position} bytes remain")
        if item_fixed:  # every entry is item_min_bytes long, and they fit: nothing to walk
            return position + count * item_min_bytes
        for _ in range(count):
            position = item(frame, position, end, unknown)
        return position

    return step


def _nullable_entity(name: str, walk: Step) -> Step:
    """KIP-893: a nullable struct is an int8 marker (-1 null), then the struct."""

    def step(frame: bytes, position: int, end: int, unknown: list) -> int:
        marker, position = _int(frame, position, end, 1)
        return position if marker == -1 else walk(frame, position, end, unknown)

    return step


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    walk: Step
    min_bytes: int
    fixed: bool = False  # always exactly min_bytes: merged with its neighbours into one skip


def _field_plan(entity_type: type, field: dataclasses.Field, tagged: bool) -> _Plan:
    flexible = entity_type.__flexible__
    name = f"{entity_type.__name__}.{field.name}"
    shape = classify_field(field)
    # As kio: tagged fields are never nullable on the wire (absence is their null); array items
    # are never nullable; the array itself is when its annotation admits None.
    nullable = False if tagged else is_optional(field)
    if type(shape).__name__ in ("EntityField", "EntityTupleField"):
        inner = _entity_plan(shape.type_)
        if shape.is_array:
            return _Plan(_array(name, flexible, nullable, inner.walk, max(inner.min_bytes, 1), inner.fixed and inner.min_bytes > 0), 1 if flexible else 4)
        if nullable:
            return _Plan(_nullable_entity(name, inner.walk), 1)
        return inner
    kafka_type = get_schema_field_type(field)
    if kafka_type in _LENGTH_PREFIXED:
        item = _Plan(_length_prefixed(name, flexible, nullable and not shape.is_array, 2 if kafka_type == "string" else 4), 1 if flexible else (2 if kafka_type == "string" else 4))
    elif kafka_type in _FIXED_BYTES:
        item = _Plan(_skip(_FIXED_BYTES[kafka_type]), _FIXED_BYTES[kafka_type], fixed=True)
    else:
        raise TypeError(f"no bounds rule for kafka_type {kafka_type!r} of {name}")  # a kio upgrade added a type
    if shape.is_array:
        return _Plan(_array(name, flexible, nullable, item.walk, max(item.min_bytes, 1), item.fixed), 1 if flexible else 4)
    return item


@cache
def _entity_plan(entity_type: type) -> _Plan:
    steps: list[Step] = []
    min_bytes = 0
    fixed_run = 0
    variable = False  # a field whose size depends on the bytes (or tagged fields) follows
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        plan = _field_plan(entity_type, field, tag is not None)
        if tag is not None:
            tagged[int(tag)] = plan.walk
            continue
        if plan.fixed:
            fixed_run += plan.min_bytes
            continue
        if fixed_run:
            steps.append(_skip(fixed_run))
            min_bytes += fixed_run
            fixed_run = 0
        variable = True
        steps.append(plan.walk)
        min_bytes += plan.min_bytes
    if fixed_run:
        steps.append(_skip(fixed_run))
        min_bytes += fixed_run
    if entity_type.__flexible__:
        steps.append(_tagged_fields(entity_type.__name__, tagged))
        min_bytes += 1
    fields_steps = tuple(steps)
    if len(fields_steps) == 1:  # only fixed-size fields, or only tagged fields, or one field
        return _Plan(fields_steps[0], min_bytes, fixed=not (variable or entity_type.__flexible__))

    def walk(frame: bytes, position: int, end: int, unknown: list) -> int:
        for step in fields_steps:
            position = step(frame, position, end, unknown)
        return position

    return _Plan(walk, min_bytes)


def _tagged_fields(entity_name: str, known: dict[int, Step]) -> Step:
    def step(frame: bytes, position: int, end: int, unknown: list) -> int:
        if position < end and frame[position] == 0:  # no tagged fields: by far the usual case
            return position + 1
        count_start = position
        count, position = _uvarint(frame, position, end)
        count_end = position
        if count * 2 > end - position:  # a tag and a size are at least a byte each
            raise _Refused(f"{entity_name} claims {count} tagged fields, {end - position} bytes remain")
        for _ in range(count):
            field_start = position
            tag, position = _uvarint(frame, position, end)
            size, position = _uvarint(frame, position, end)
            if size > end - position:
                raise _Refused(f"tagged field {tag} of {entity_name} claims {size} bytes, {end - position} remain")
            value_end = position + size
            walk = known.get(tag)
            if walk is None:
                unknown.append(TagSpan(count_start, count_end, count, field_start, value_end))
            elif walk(frame, position, value_end, unknown) != value_end:
                raise _Refused(f"tagged field {tag} of {entity_name} does not fill its {size} bytes")
            position = value_end
        return position

    return step


def check_request_body(frame: bytes, position: int, body_type: type) -> list[TagSpan]:
    """Walk the body of `body_type` that starts at `position` in `frame`.

    Returns the unknown tagged fields found (usually none). Raises `MalformedRequest` when a
    length, count or null marker does not fit the frame or the schema; nothing is allocated
    in proportion to a declared length before that.
    """
    unknown: list[TagSpan] = []
    try:
        _entity_plan(body_type).walk(frame, position, len(frame), unknown)
    except _Refused as refused:
        raise MalformedRequest(int(body_type.__api_key__), int(body_type.__version__), body_type.__name__, refused.reason) from None
    return unknown


def strip_unknown_tags(frame: bytes, spans: list[TagSpan]) -> bytes:
    """`frame` without the unknown tagged fields `spans`, each section's count lowered to match."""
    removed_per_section: dict[int, int] = {}
    for span in spans:
        removed_per_section[span.count_start] = removed_per_section.get(span.count_start, 0) + 1
    edits: list[tuple[int, int, bytes]] = []
    for span in spans:
        edits.append((span.start, span.end, b""))
    for span in {s.count_start: s for s in spans}.values():
        edits.append((span.count_start, span.count_end, _encode_uvarint(span.count - removed_per_section[span.count_start])))
    edits.sort()
    out = bytearray()
    cursor = 0
    for start, end, replacement in edits:
        out += frame[cursor:start]
        out += replacement
        cursor = end
    out += frame[cursor:]
    return bytes(out)


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
