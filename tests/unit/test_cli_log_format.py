"""The JSON log formatter of `diskless serve --log-format json`: one object per line with time,
level, logger and message, and the traceback as "exception" when the record carries one."""

from __future__ import annotations

import json
import logging

from diskless.cli.log_format import JsonFormatter


def record(message: str, *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("diskless.broker", logging.WARNING, __file__, 1, message, args, exc_info)


def test_plain_record() -> None:
    entry = record("closing %s\nnext line", "x")
    entry.created = 1_795_558_662.1234
    line = JsonFormatter().format(entry)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-11-24T22:17:42.123Z",
        "level": "WARNING",
        "logger": "diskless.broker",
        "message": "closing x\nnext line",
    }


def test_record_with_exception() -> None:
    try:
        raise ValueError("bad segment")
    except ValueError:
        import sys

        entry = record("upload failed", exc_info=sys.exc_info())
    parsed = json.loads(JsonFormatter().format(entry))
    assert parsed["message"] == "upload failed"
    assert parsed["exception"].startswith("Traceback (most recent call last):")
    assert parsed["exception"].endswith("ValueError: bad segment")
