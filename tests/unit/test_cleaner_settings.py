"""log.cleaner.* settings: flags beat DISKLESS_* variables beat the TOML file beat Kafka's defaults,
and DescribeConfigs reports them as Kafka prints them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from diskless.broker.compaction.config import CleanerConfig, CompactionRules
from diskless.cli import settings


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(flags))


def test_defaults_are_kafkas() -> None:
    config, _ = settings.resolve(parse(), {})
    assert config.cleaner == CleanerConfig()
    assert config.cleaner.broker_configs() == {
        "log.cleaner.enable": "true",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": "134217728",
        "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
        "log.cleaner.backoff.ms": "15000",
    }
    # Kafka's SkimpyOffsetMap: 128 MiB * 0.9 load factor / 24 bytes an entry
    assert config.cleaner.map_entries == int(128 * 2**20 * 0.9) // 24


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    toml = tmp_path / "diskless.toml"
    toml.write_text("log_cleaner_threads = 3\nlog_cleaner_backoff_ms = 100\nlog_cleaner_enable = false\n"
                    "log_cleaner_io_max_bytes_per_second = 1048576\n")
    env = {"DISKLESS_CONFIG": str(toml), "DISKLESS_LOG_CLEANER_THREADS": "2", "DISKLESS_LOG_CLEANER_DEDUPE_BUFFER_SIZE": "1048576"}
    config, _ = settings.resolve(parse("--log-cleaner-threads", "4"), env)
    assert config.cleaner == CleanerConfig(enable=False, threads=4, dedupe_buffer_size=1048576, io_max_bytes_per_second=1048576.0, backoff_ms=100)
    assert config.cleaner.broker_configs()["log.cleaner.io.max.bytes.per.second"] == "1048576.0"
    assert config.cleaner.map_entries == int(1048576 // 4 * 0.9) // 24


@pytest.mark.parametrize(("flag", "value"), [("--log-cleaner-threads", "-1"), ("--log-cleaner-backoff-ms", "-5"),
                                             ("--log-cleaner-io-max-bytes-per-second", "0"), ("--log-cleaner-dedupe-buffer-size", "10"),
                                             ("--log-cleaner-enable", "maybe")])
def test_bad_values_are_refused_with_their_source(flag: str, value: str) -> None:
    with pytest.raises(settings.SettingsError) as refused:
        settings.resolve(parse(flag, value), {})
    assert flag in str(refused.value)


def test_compaction_rules_of_a_topic() -> None:
    assert CompactionRules.from_configs({"cleanup.policy": "delete"}) is None
    assert CompactionRules.from_configs({"cleanup.policy": "compact"}) == CompactionRules(delete=False)
    rules = CompactionRules.from_configs({"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.1",
                                          "min.compaction.lag.ms": "5", "max.compaction.lag.ms": "60000", "delete.retention.ms": "7"})
    assert rules == CompactionRules(True, 0.1, 5, 60000, 7)
