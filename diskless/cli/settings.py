"""`diskless serve` settings: one table, read from flags, DISKLESS_* variables and a TOML file.

Precedence: a flag beats its environment variable, which beats the TOML file, which beats the
default. This module and the rest of the CLI are the only code that reads the environment.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diskless.broker.config import BrokerConfig


class SettingsError(Exception):
    pass


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise SettingsError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def boolean(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class Setting:
    name: str  # flag without dashes, TOML key with underscores, env var DISKLESS_<NAME>
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "DISKLESS_" + self.name.upper()


SETTINGS = [
    Setting("listen", host_port, "127.0.0.1:9092", "address the Kafka listener binds to", "HOST:PORT"),
    Setting("advertised_listener", host_port, None, "address clients are told to connect to (default: --listen)", "HOST:PORT"),
    Setting("data_dir", Path, "./diskless-data", "directory for the hot tier (active segments), meta.properties and the embedded defaults", "DIR"),
    Setting("metadata", str, None, "metadata store URL: sqlite:///PATH (default sqlite:///<data-dir>/metadata.db)", "URL"),
    Setting("object_store", str, None, "object store URL: s3://BUCKET[/PREFIX][?endpoint_url=...&region=...] or file:///PATH (default file://<data-dir>/bucket)", "URL"),
    Setting("http", host_port, None, "address of the admin HTTP endpoint (default: off)", "HOST:PORT"),
    Setting("node_id", int, 1, "this broker's node.id"),
    Setting("num_partitions", int, 1, "num.partitions: partitions of auto-created topics and of CreateTopics with -1"),
    Setting("auto_create_topics", boolean, False, "auto.create.topics.enable: create unknown topics on Metadata requests", "BOOL"),
    Setting("socket_request_max_bytes", int, 104857600, "socket.request.max.bytes: largest request frame accepted"),
    Setting("log_retention_check_interval_ms", int, 300000, "log.retention.check.interval.ms: how often retention runs"),
    Setting("group_initial_rebalance_delay_ms", int, 3000, "group.initial.rebalance.delay.ms: wait for more members before the first rebalance"),
    Setting("upload_concurrency", int, 4, "segment uploads to the object store in flight at once, across partitions"),
    Setting("local_disk_limit_bytes", int, 10 * 2**30, "bytes of rolled segments allowed to wait for the object store; past this, "
            "produce to tiered topics fails with KAFKA_STORAGE_ERROR instead of filling the disk (-1: no limit)"),
    Setting("log_level", str, "INFO", "DEBUG, INFO, WARNING or ERROR"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML file with any of the settings below (keys with underscores), "
                        "and a [topic_defaults] table of Kafka topic configs; env DISKLESS_CONFIG")
    for s in SETTINGS:
        default = "" if s.default is None else f" (default {s.default})"
        parser.add_argument(s.flag, dest=s.name, metavar=s.metavar, default=None, help=f"{s.help}{default}; env {s.env}")
    parser.add_argument("--topic-default", action="append", default=[], metavar="NAME=VALUE",
                        help="broker-wide default for a topic config, e.g. retention.ms=3600000 (repeatable)")


def resolve(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[BrokerConfig, str]:
    """Merge flags, environment and TOML into a BrokerConfig (and the log level)."""
    config_path = args.config or (Path(env["DISKLESS_CONFIG"]) if env.get("DISKLESS_CONFIG") else None)
    file_values: dict[str, Any] = {}
    if config_path is not None:
        try:
            file_values = tomllib.loads(config_path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {config_path}: {exc}") from exc
    known = {s.name for s in SETTINGS} | {"topic_defaults"}
    unknown = set(file_values) - known
    if unknown:
        raise SettingsError(f"unknown settings in {config_path}: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for s in SETTINGS:
        raw = getattr(args, s.name)
        if raw is None:
            raw = env.get(s.env)
        if raw is None:
            raw = file_values.get(s.name)
        if raw is None:
            raw = s.default
        try:
            values[s.name] = None if raw is None else s.parse(raw)
        except (SettingsError, ValueError, TypeError) as exc:
            raise SettingsError(f"{s.flag} / {s.env}: {exc}") from exc
    topic_defaults = {str(k): str(v) for k, v in file_values.get("topic_defaults", {}).items()}
    for item in args.topic_default:
        name, sep, value = item.partition("=")
        if not sep:
            raise SettingsError(f"--topic-default expects NAME=VALUE, got {item!r}")
        topic_defaults[name.strip()] = value.strip()
    from diskless.broker.topic_configs import InvalidConfig, validate

    try:
        validate(topic_defaults)
    except InvalidConfig as exc:
        raise SettingsError(f"topic default: {exc}") from exc
    listen_host, listen_port = values["listen"]
    advertised = values["advertised_listener"] or (None, None)
    http = values["http"] or (None, None)
    config = BrokerConfig(
        data_dir=values["data_dir"],
        listen_host=listen_host,
        listen_port=listen_port,
        advertised_host=advertised[0],
        advertised_port=advertised[1],
        metadata_url=values["metadata"],
        object_store_url=values["object_store"],
        http_host=http[0],
        http_port=http[1],
        node_id=values["node_id"],
        num_partitions=values["num_partitions"],
        auto_create_topics_enable=values["auto_create_topics"],
        socket_request_max_bytes=values["socket_request_max_bytes"],
        log_retention_check_interval_ms=values["log_retention_check_interval_ms"],
        group_initial_rebalance_delay_ms=values["group_initial_rebalance_delay_ms"],
        upload_concurrency=values["upload_concurrency"],
        local_disk_limit_bytes=values["local_disk_limit_bytes"],
        object_store_env={k: v for k, v in env.items() if k.startswith("AWS_")},
        topic_defaults=topic_defaults,
    )
    return config, values["log_level"].upper()


def environment() -> Mapping[str, str]:
    return os.environ
