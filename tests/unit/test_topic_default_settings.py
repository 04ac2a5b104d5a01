"""--topic-default and the [topic_defaults] table: the broker's defaults of topic configs,
checked once at start-up; a refusal names the config in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from diskless.cli import settings


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(flags))


def refusal(args: argparse.Namespace, env: dict[str, str] | None = None) -> str:
    with pytest.raises(settings.SettingsError) as refused:
        settings.resolve(args, env or {})
    return str(refused.value)


def test_defaults_are_taken_from_flags_and_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "diskless.toml"
    toml.write_text('[topic_defaults]\n"retention.ms" = 3600000\n"segment.bytes" = 1048576\n')
    config, _ = settings.resolve(parse("--topic-default", "retention.ms=60000"), {"DISKLESS_CONFIG": str(toml)})
    assert config.topic_defaults == {"retention.ms": "60000", "segment.bytes": "1048576"}


def test_an_unknown_config_is_named_with_the_closest_known_one(tmp_path: Path) -> None:
    assert refusal(parse("--topic-default", "retention.mss=5")) == "topic default retention.mss=5: no such topic config; did you mean retention.ms?"
    assert refusal(parse("--topic-default", "zzz=1")) == "topic default zzz=1: no such topic config"
    toml = tmp_path / "diskless.toml"
    toml.write_text('[topic_defaults]\n"segment.byte" = 1024\n')
    assert refusal(parse(), {"DISKLESS_CONFIG": str(toml)}) == "topic default segment.byte=1024: no such topic config; did you mean segment.bytes?"


def test_a_bad_value_is_named_with_its_config() -> None:
    assert refusal(parse("--topic-default", "segment.bytes=1")) == (
        "topic default: invalid value '1' for configuration segment.bytes: must be between 14 and 2147483647"
    )
