"""`diskless consume --format`: kcat's format strings (diskless/cli/record_format.py)."""

from __future__ import annotations

import pytest

from diskless.cli.record_format import DEFAULT_FORMAT, FormatError, compile_format, legacy_format
from diskless.client.structs import ConsumerRecord

RECORDS = [
    ConsumerRecord("orders", 1, 7, 1700000000000, 0, b"k", b"hello", (("h1", b"a"), ("h2", None))),
    ConsumerRecord("orders", 0, 8, 5, 0, None, None),
]


def test_default_is_value_and_newline():
    assert compile_format(DEFAULT_FORMAT)(RECORDS) == b"hello\n\n"


def test_every_field_and_escape():
    render = compile_format(r"%t|%p|%o|%T|%k|%s|%K|%S|%h|%%|\t|\\|\n")
    assert render(RECORDS) == (b"orders|1|7|1700000000000|k|hello|1|5|h1=a,h2=|%|\t|\\|\n"
                               b"orders|0|8|5|||-1|-1||%|\t|\\|\n")


def test_legacy_flags():
    assert compile_format(legacy_format(print_offset=True, print_key=True))(RECORDS[:1]) == b"1:7\tk\thello\n"


@pytest.mark.parametrize(("fmt", "reason"), [
    ("%x", "unknown field %x; known: %t %p %o %T %k %s %K %S %h %%"),
    ("abc%", "it ends with a lone '%'"),
    (r"\q", "unknown escape \\q; known: \\n \\t \\r \\\\"),
])
def test_bad_formats(fmt, reason):
    with pytest.raises(FormatError) as error:
        compile_format(fmt)
    assert error.value.reason == reason
