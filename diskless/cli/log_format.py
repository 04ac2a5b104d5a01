"""How `diskless serve` writes its log: Python's logging to stderr, as text lines or, with
`--log-format json`, one JSON object per line for log shippers (Loki, Vector, Fluent Bit):

    {"time": "2026-11-24T22:16:52.123Z", "level": "INFO", "logger": "diskless", "message": "..."}

plus "exception" (the formatted traceback) when the record carries one, and "stack" when it
carries stack_info. A message never spans lines: newlines inside it are escaped by JSON.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: str, log_format: str) -> None:
    """Install the one stderr handler on the root logger; Python warnings go through it too."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)
