"""max.connections.per.ip.overrides and max.connection.creation.rate as settings: the `diskless
serve` flags, variables and TOML keys, and the dynamic broker configs (set per broker or for the
cluster with IncrementalAlterConfigs), with Kafka's defaults and refusals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from diskless.broker import dynamic_broker_configs as dynamic
from diskless.broker.connection_limits import ConnectionLimits
from diskless.broker.dynamic_broker_configs import BrokerConfigRefused
from diskless.broker.topic_configs import AlterOp
from diskless.cli import settings
from diskless.cli.setting_values import SettingsError

INT32_MAX = 2**31 - 1


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(flags))


def test_defaults_are_kafkas() -> None:
    config, _ = settings.resolve(parse(), {})
    assert config.max_connections_per_ip_overrides == "" and config.max_connection_creation_rate == INT32_MAX
    assert config.connection_limits == ConnectionLimits()
    assert dynamic.BROKER_DYNAMIC["max.connections.per.ip.overrides"].default == ""
    assert dynamic.BROKER_DYNAMIC["max.connection.creation.rate"].default == "2147483647"


def test_flags_variables_and_file(tmp_path: Path) -> None:
    toml = tmp_path / "diskless.toml"
    toml.write_text('max_connections_per_ip_overrides = "10.0.0.1:5"\nmax_connection_creation_rate = 7\n')
    config, _ = settings.resolve(parse(), {"DISKLESS_CONFIG": str(toml)})
    assert config.connection_limits.max_connections_per_ip_overrides == {"10.0.0.1": 5}
    assert config.connection_limits.max_connection_creation_rate == 7
    env = {"DISKLESS_CONFIG": str(toml), "DISKLESS_MAX_CONNECTION_CREATION_RATE": "3"}
    config, _ = settings.resolve(parse("--max-connections-per-ip-overrides", "127.0.0.2:4, localhost:3"), env)
    assert config.max_connections_per_ip_overrides == "127.0.0.2:4, localhost:3"
    assert config.connection_limits.max_connections_per_ip_overrides == {"127.0.0.2": 4, "localhost": 3}
    assert config.max_connection_creation_rate == 3


def test_bad_values_are_refused_with_their_source() -> None:
    with pytest.raises(SettingsError, match="--max-connections-per-ip-overrides: expected HOST:COUNT, got 'somehost'"):
        settings.resolve(parse("--max-connections-per-ip-overrides", "somehost"), {})
    with pytest.raises(SettingsError, match="--max-connection-creation-rate: expected at least 0, got -1"):
        settings.resolve(parse("--max-connection-creation-rate", "-1"), {})
    with pytest.raises(SettingsError, match="max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides"):
        settings.resolve(parse("--max-connections-per-ip", "0"), {})
    with pytest.raises(SettingsError, match="--max-connections-per-ip: expected at least 1, got -2"):
        settings.resolve(parse("--max-connections-per-ip", "-2", "--max-connections-per-ip-overrides", "a:1"), {})
    config, _ = settings.resolve(parse("--max-connections-per-ip", "0", "--max-connections-per-ip-overrides", "10.0.0.1:2"), {})
    assert config.max_connections_per_ip == 0  # only the listed address may connect, as Kafka allows
    assert settings.resolve(parse("--max-connection-creation-rate", "0"), {})[0].max_connection_creation_rate == 0


def test_both_are_dynamic_broker_configs() -> None:
    ops = [("max.connections.per.ip.overrides", AlterOp.SET, "127.0.0.2:4,localhost:3"), ("max.connection.creation.rate", AlterOp.SET, "5")]
    assert dynamic.apply({}, ops, None) == {"max.connections.per.ip.overrides": "127.0.0.2:4,localhost:3", "max.connection.creation.rate": "5"}
    values = dynamic.broker_values({"max.connection.creation.rate": "9"}, {"max.connection.creation.rate": "5"}, {"max.connections.per.ip.overrides": "a:1"})
    assert values["max.connection.creation.rate"] == "5" and values["max.connections.per.ip.overrides"] == "a:1"
    assert dynamic.broker_values({}, {}, {})["max.connections.per.ip.overrides"] == ""


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("max.connections.per.ip.overrides", AlterOp.SET, "10.0.0.1")],
         "Invalid value 10.0.0.1 for configuration max.connections.per.ip.overrides: expected HOST:COUNT, got '10.0.0.1'"),
        ([("max.connections.per.ip.overrides", AlterOp.SET, "10.0.0.1:x")],
         "Invalid value 10.0.0.1:x for configuration max.connections.per.ip.overrides: the count of 10.0.0.1 is not an int: 'x'"),
        ([("max.connection.creation.rate", AlterOp.SET, "-1")], "Invalid value -1 for configuration max.connection.creation.rate: Value must be at least 0"),
        ([("max.connection.creation.rate", AlterOp.SET, "fast")], "Invalid value fast for configuration max.connection.creation.rate: Not a number of type INT"),
    ],
)  # fmt: skip
def test_bad_dynamic_values_are_refused_as_kafka_does(ops, message: str) -> None:
    with pytest.raises(BrokerConfigRefused) as refused:
        dynamic.apply({}, ops, None)
    assert str(refused.value) == message and refused.value.names == [ops[0][0]]


def test_per_ip_zero_needs_overrides_in_the_change_or_running() -> None:
    zero = ("max.connections.per.ip", AlterOp.SET, "0")
    refusal = "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
    assert dynamic.apply({}, [zero, ("max.connections.per.ip.overrides", AlterOp.SET, "10.0.0.1:3")], None)["max.connections.per.ip"] == "0"
    assert dynamic.apply({}, [zero], None, running={"max.connections.per.ip.overrides": "10.0.0.1:3"}) == {"max.connections.per.ip": "0"}
    current = {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:3"}
    with pytest.raises(BrokerConfigRefused, match=refusal):  # deleting the overrides the zero relies on
        dynamic.apply(current, [("max.connections.per.ip.overrides", AlterOp.DELETE, None)], None, running=current)
    with pytest.raises(BrokerConfigRefused, match=refusal):
        dynamic.apply({}, [zero, ("max.connections.per.ip.overrides", AlterOp.SET, "")], None, running={"max.connections.per.ip.overrides": "a:1"})
