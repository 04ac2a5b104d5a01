"""The admin HTTP endpoint's address: off unless asked for, and on 127.0.0.1 when the address
names no host; another interface only when named (issue N)."""

from __future__ import annotations

import argparse

import pytest

from diskless.cli import settings
from diskless.cli.setting_values import SettingsError


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(flags))


@pytest.mark.parametrize(
    ("flag", "expected"),
    [(":8080", ("127.0.0.1", 8080)), ("127.0.0.1:8081", ("127.0.0.1", 8081)), ("0.0.0.0:8082", ("0.0.0.0", 8082)),
     ("[::1]:8083", ("::1", 8083)), ("admin.example.com:8084", ("admin.example.com", 8084))],
)  # fmt: skip
def test_an_address_without_a_host_is_loopback(flag: str, expected: tuple[str, int]) -> None:
    config, _ = settings.resolve(parse("--http", flag), {})
    assert (config.http_host, config.http_port) == expected


def test_off_by_default_and_from_the_environment() -> None:
    config, _ = settings.resolve(parse(), {})
    assert (config.http_host, config.http_port) == (None, None)
    config, _ = settings.resolve(parse(), {"DISKLESS_HTTP": ":9000"})
    assert (config.http_host, config.http_port) == ("127.0.0.1", 9000)


def test_a_listener_without_a_host_still_means_every_interface() -> None:
    config, _ = settings.resolve(parse("--listen", ":9092"), {})
    assert config.listen_host == "0.0.0.0"


def test_a_bad_address_is_refused() -> None:
    with pytest.raises(SettingsError):
        settings.resolve(parse("--http", "8080"), {})
