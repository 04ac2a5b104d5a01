"""`diskless consume --format`: kcat's output format strings, compiled once into a function.

    %t topic        %p partition     %o offset       %T timestamp (ms)
    %k key          %s value         %K key length   %S value length (-1 for null)
    %h headers as name=value,name=value              %% a percent sign
    \\n newline  \\t tab  \\r carriage return  \\\\ backslash

Keys and values are written as their bytes (a null one as nothing), so binary data passes
through unchanged. Pure: no I/O; the consume loop writes what `render` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_FORMAT = "%s\\n"

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def _headers(record: Any) -> bytes:
    return b",".join(name.encode() + b"=" + (value or b"") for name, value in record.headers)


_FIELDS: dict[str, Callable[[Any], bytes]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: b"%d" % r.partition,
    "o": lambda r: b"%d" % r.offset,
    "T": lambda r: b"%d" % r.timestamp,
    "k": lambda r: r.key or b"",
    "s": lambda r: r.value or b"",
    "K": lambda r: b"%d" % (len(r.key) if r.key is not None else -1),
    "S": lambda r: b"%d" % (len(r.value) if r.value is not None else -1),
    "h": _headers,
}


class FormatError(ValueError):
    def __init__(self, fmt: str, reason: str) -> None:
        super().__init__(f"bad --format {fmt!r}: {reason}")
        self.fmt = fmt
        self.reason = reason


def compile_format(fmt: str) -> Callable[[Sequence[Any]], bytes]:
    """A function from a list of records to the bytes to write for them."""
    parts: list[bytes | Callable[[Any], bytes]] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char in "%\\" and i + 1 == len(fmt):
            raise FormatError(fmt, f"it ends with a lone {char!r}")
        if char == "%":
            code = fmt[i + 1]
            if code == "%":
                literal.append("%")
            elif code in _FIELDS:
                if literal:
                    parts.append("".join(literal).encode())
                    literal = []
                parts.append(_FIELDS[code])
            else:
                raise FormatError(fmt, f"unknown field %{code}; known: %t %p %o %T %k %s %K %S %h %%")
            i += 2
        elif char == "\\":
            code = fmt[i + 1]
            if code not in _ESCAPES:
                raise FormatError(fmt, f"unknown escape \\{code}; known: \\n \\t \\r \\\\")
            literal.append(_ESCAPES[code])
            i += 2
        else:
            literal.append(char)
            i += 1
    if literal:
        parts.append("".join(literal).encode())
    if parts == [_FIELDS["s"], b"\n"]:  # the default: one join for the whole batch
        return lambda records: b"".join([(r.value or b"") + b"\n" for r in records])
    fixed = tuple(parts)

    def render(records: Sequence[Any]) -> bytes:
        return b"".join([part if isinstance(part, bytes) else part(r) for r in records for part in fixed])

    return render


def legacy_format(print_offset: bool, print_key: bool) -> str:
    """The format --print-offset and --print-key stand for."""
    return ("%p:%o\\t" if print_offset else "") + ("%k\\t" if print_key else "") + "%s\\n"
