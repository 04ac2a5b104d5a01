"""`diskless serve` log cleaner settings (Kafka's log.cleaner.*), for compacted topics.

Entries of CLEANER_SETTINGS are (name, parse, default, help, metavar) for settings.Setting, so
they come from flags (--log-cleaner-threads), DISKLESS_* variables (DISKLESS_LOG_CLEANER_THREADS)
and the TOML file (log_cleaner_threads = 2) like every other setting. Errors are ValueError,
which settings.resolve reports with the setting's source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diskless.broker.compaction.config import DOUBLE_MAX, CleanerConfig, InvalidCleanerConfig

from .setting_values import boolean, integer, number


CLEANER_SETTINGS: list[tuple[str, Any, Any, str, str | None]] = [
    ("log_cleaner_enable", boolean, True, "log.cleaner.enable: run the log cleaner of compacted topics", "BOOL"),
    ("log_cleaner_threads", integer, 1, "log.cleaner.threads: partitions cleaned at the same time", None),
    ("log_cleaner_dedupe_buffer_size", integer, 128 * 2**20, "log.cleaner.dedupe.buffer.size: bytes of key -> offset map "
     "shared by the cleaner threads; a pass cleans as far as its share of keys covers", None),
    ("log_cleaner_io_max_bytes_per_second", number, DOUBLE_MAX, "log.cleaner.io.max.bytes.per.second: bytes read and written "
     "per second by the cleaner", "BYTES"),
    ("log_cleaner_backoff_ms", integer, 15000, "log.cleaner.backoff.ms: how long the cleaner sleeps when nothing needs cleaning", None),
]


def cleaner_config(values: Mapping[str, Any], sources: Mapping[str, str]) -> CleanerConfig:
    try:
        return CleanerConfig(
            enable=values["log_cleaner_enable"],
            threads=values["log_cleaner_threads"],
            dedupe_buffer_size=values["log_cleaner_dedupe_buffer_size"],
            io_max_bytes_per_second=values["log_cleaner_io_max_bytes_per_second"],
            backoff_ms=values["log_cleaner_backoff_ms"],
        )
    except InvalidCleanerConfig as exc:
        setting = "log_" + exc.name.removeprefix("log.").replace(".", "_")
        raise ValueError(f"{sources.get(setting, exc.name)}: {exc}") from None
