"""`diskless serve` settings: one table, read from flags, DISKLESS_* variables and a TOML file.

Precedence: a flag beats its environment variable, which beats the TOML file, which beats the
default. This module and the rest of the CLI are the only code that reads the environment.
"""

from __future__ import annotations

import argparse
import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from diskless.broker.config import BrokerConfig, Listener
from diskless.broker.connection_limits import InvalidPerIpOverrides, parse_per_ip_overrides
from diskless.broker.quotas.client_quotas import QuotaWindows

from .cleaner_settings import CLEANER_SETTINGS, cleaner_config
from .security_settings import SECURITY_SETTINGS, named_listeners, security_config
from .setting_values import SettingsError, boolean, integer


def host_port(text: str) -> tuple[str, int]:
    if not isinstance(text, str):
        raise SettingsError(f"expected \"HOST:PORT\", got {text!r}")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise SettingsError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def local_host_port(text: str) -> tuple[str, int]:
    """HOST:PORT where an empty host means 127.0.0.1, not every interface: the admin HTTP
    endpoint is reachable from elsewhere only when told so (0.0.0.0:PORT)."""
    host, port = host_port(text)
    return ("127.0.0.1" if not text.rpartition(":")[0].strip("[]") else host), port


def host_ports(text: str) -> list[tuple[str, int]]:
    """One or more HOST:PORT, comma-separated (Kafka's listeners list, without names)."""
    if not isinstance(text, str):
        raise SettingsError(f"expected \"HOST:PORT[,HOST:PORT...]\", got {text!r}")
    return [host_port(item.strip()) for item in text.split(",")]


def directory(value: str) -> Path:
    if not isinstance(value, str) or not value:
        raise SettingsError(f"expected a directory path, got {value!r}")
    return Path(value).absolute()


def text(value: str) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"expected a string, got {value!r}")
    return value


def per_ip_overrides(value: str) -> str:
    """max.connections.per.ip.overrides, checked as Kafka parses it; kept as its text."""
    try:
        parse_per_ip_overrides(text(value))
    except InvalidPerIpOverrides as exc:
        raise SettingsError(exc.reason) from None
    return value


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def replica_selector(value: str) -> str | None:
    """replica.selector.class: Kafka's RackAwareReplicaSelector (or `rack`), or none."""
    name = text(value).strip()
    if name in ("", "none"):
        return None
    if name in (RACK_AWARE_REPLICA_SELECTOR, "RackAwareReplicaSelector", "rack"):
        return RACK_AWARE_REPLICA_SELECTOR
    raise SettingsError(f"expected {RACK_AWARE_REPLICA_SELECTOR} (or rack) or none, got {value!r}")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_level(value: str) -> str:
    if not isinstance(value, str) or value.strip().upper() not in LOG_LEVELS:
        raise SettingsError(f"expected {', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}, got {value!r}")
    return value.strip().upper()


def log_format(value: str) -> str:
    from .log_format import LOG_FORMATS

    if not isinstance(value, str) or value.strip().lower() not in LOG_FORMATS:
        raise SettingsError(f"expected {' or '.join(LOG_FORMATS)}, got {value!r}")
    return value.strip().lower()


@dataclass(frozen=True, slots=True)
class LogSettings:
    level: str
    format: str


def metadata_url(value: str) -> str:
    from metadata.errors import MetadataBackendNotAvailable, UnsupportedMetadataUrl
    from metadata.url import parse_metadata_url

    try:
        parse_metadata_url(text(value))
    except (UnsupportedMetadataUrl, MetadataBackendNotAvailable) as exc:
        raise SettingsError(str(exc)) from None
    return value


def object_store_url(value: str) -> str:
    from cold_tier.errors import InvalidObjectStoreUrl
    from cold_tier.url import parse_object_store_url

    try:
        parse_object_store_url(text(value))  # the AWS_* environment is checked with the rest, in resolve()
    except InvalidObjectStoreUrl as exc:
        raise SettingsError(str(exc)) from None
    return value


def resolved_object_store_url(url: str | None, data_dir: Path, env: Mapping[str, str]) -> str:
    """The absolute URL the broker will use: the default file:// bucket under the data
    directory, or `url` with the endpoint and region it takes from the AWS_* environment
    written into it, so the ready line shows where records really go."""
    from cold_tier.config import LocalStoreConfig
    from cold_tier.errors import InvalidObjectStoreUrl
    from cold_tier.url import parse_object_store_url

    if url is None:
        return f"file://{quote(str(data_dir.absolute() / 'bucket'))}"
    try:
        config = parse_object_store_url(url, env=env)
    except InvalidObjectStoreUrl as exc:
        raise SettingsError(str(exc)) from None
    if isinstance(config, LocalStoreConfig):
        return url
    query = {"endpoint_url": config.endpoint_url} if config.endpoint_url else {}
    query["region"] = config.region
    prefix = quote(config.prefix.rstrip("/"))
    query_text = urlencode(query, safe=":/")
    return f"s3://{config.bucket}/{prefix}?{query_text}" if prefix else f"s3://{config.bucket}?{query_text}"


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
    Setting("listen", host_ports, "127.0.0.1:9092", "address the Kafka listener binds to; several, comma-separated, "
            "for several networks (listeners)", "HOST:PORT[,...]"),
    Setting("advertised_listener", host_ports, None, "address clients are told to connect to, one per --listen address "
            "(advertised.listeners; default: the --listen address)", "HOST:PORT[,...]"),
    Setting("data_dir", directory, "./diskless-data", "directory for the hot tier (active segments), meta.properties and the embedded defaults", "DIR"),
    Setting("metadata", metadata_url, None, "metadata store URL: sqlite:///PATH (default sqlite:///<data-dir>/metadata.db)", "URL"),
    Setting("object_store", object_store_url, None, "object store URL: s3://BUCKET[/PREFIX][?endpoint_url=...&region=...] or file:///PATH (default file://<data-dir>/bucket)", "URL"),
    Setting("http", local_host_port, None, "address of the admin HTTP endpoint (default: off; ':PORT' is 127.0.0.1:PORT)", "HOST:PORT"),
    Setting("node_id", integer, 1, "this broker's node.id"),
    Setting("num_partitions", integer, 1, "num.partitions: partitions of auto-created topics and of CreateTopics with -1"),
    Setting("auto_create_topics", boolean, True, "auto.create.topics.enable: create a topic when a producer or consumer names one that does not exist, with --num-partitions partitions (Kafka's default, true)", "BOOL"),
    Setting("socket_request_max_bytes", integer, 104857600, "socket.request.max.bytes: largest request frame accepted"),
    Setting("max_connections", integer, 2**31 - 1, "max.connections: connections open at once; at the limit the broker "
            "stops accepting until one closes (it is also kept below the open file limit)"),
    Setting("max_connections_per_ip", integer, 2**31 - 1, "max.connections.per.ip: connections from one address; "
            "one more is closed at once (0: only the addresses in the overrides may connect)"),
    Setting("max_connections_per_ip_overrides", per_ip_overrides, None, "max.connections.per.ip.overrides: per-address "
            "limits that replace --max-connections-per-ip, e.g. \"127.0.0.1:200,hostName:100\" (host names resolved "
            "when applied; default none)", "HOST:COUNT[,...]"),
    Setting("max_connection_creation_rate", integer, 2**31 - 1, "max.connection.creation.rate: connections accepted "
            "per second, across listeners; past it the broker delays accepting (KIP-612), it refuses none"),
    Setting("connections_max_idle_ms", integer, 600000, "connections.max.idle.ms: close a connection idle for this long"),
    Setting("queued_max_request_bytes", integer, 256 * 2**20, "queued.max.request.bytes: bytes of requests read and not "
            "yet answered, across connections; reading pauses past it (-1: no bound, Kafka's default)"),
    Setting("request_arrival_timeout_ms", integer, 30000, "once a request's first byte has arrived, the rest must arrive "
            "within this time or the connection is closed (slow senders; no Kafka name, like request.timeout.ms)"),
    Setting("max_partitions_per_request", integer, 10000, "max.partitions.per.request: partitions one CreateTopics topic, "
            "CreatePartitions or auto-creation may add (Kafka's fixed MAX_PARTITIONS_PER_BATCH, 10000); more is refused"),
    Setting("max_partitions", integer, 2**31 - 1, "max.partitions: partitions this broker may hold in all; a creation past it is refused"),
    Setting("log_retention_check_interval_ms", integer, 300000, "log.retention.check.interval.ms: how often retention runs"),
    Setting("group_initial_rebalance_delay_ms", integer, 3000, "group.initial.rebalance.delay.ms: wait for more members before the first rebalance"),
    Setting("offsets_topic_num_partitions", integer, 50, "offsets.topic.num.partitions: coordinator slots; each group and "
            "transactional id hashes to one, coordinated by the broker holding it (fixed by the cluster's first controller)"),
    Setting("upload_concurrency", integer, 4, "segment uploads to the object store in flight at once, across partitions"),
    Setting("remote_log_manager_fetch_max_bytes_per_second", integer, 2**63 - 1, "remote.log.manager.fetch.max.bytes.per.second: "
            "bytes per second all fetches may read from the bucket (KIP-956); past it a fetch reads no history until the rate "
            "falls, so a backfill leaves the hot tail its share (default: no bound; dynamic)"),
    Setting("remote_log_manager_fetch_quota_window_num", integer, 11, "remote.log.manager.fetch.quota.window.num: windows "
            "the fetch quota's rate is measured over"),
    Setting("remote_log_manager_fetch_quota_window_size_seconds", integer, 1, "remote.log.manager.fetch.quota.window.size.seconds: "
            "length of each of those windows"),
    Setting("max_incremental_fetch_session_cache_slots", integer, 1000, "max.incremental.fetch.session.cache.slots: incremental "
            "fetch sessions (KIP-227) kept; when full, a new session takes an idle or smaller one's slot, else fetches go without one"),
    Setting("quota_window_num", integer, 11, "quota.window.num: windows a client's rate is measured over against its "
            "client quotas (producer_byte_rate, consumer_byte_rate, request_percentage; set with AlterClientQuotas)"),
    Setting("quota_window_size_seconds", integer, 1, "quota.window.size.seconds: length of each of those windows"),
    Setting("controller_quota_window_num", integer, 11, "controller.quota.window.num: windows of controller_mutation_rate quotas"),
    Setting("controller_quota_window_size_seconds", integer, 1, "controller.quota.window.size.seconds: length of each of those windows"),
    Setting("local_disk_limit_bytes", integer, 10 * 2**30, "bytes of rolled segments allowed to wait for the object store; past this, "
            "produce to tiered topics fails with KAFKA_STORAGE_ERROR instead of filling the disk (-1: no limit)"),
    Setting("group_consumer_session_timeout_ms", integer, 45000, "group.consumer.session.timeout.ms: a KIP-848 consumer "
            "(group.protocol=consumer) that sends no heartbeat for this long leaves its group"),
    Setting("group_consumer_min_session_timeout_ms", integer, 45000, "group.consumer.min.session.timeout.ms: the least a group may set"),
    Setting("group_consumer_heartbeat_interval_ms", integer, 5000, "group.consumer.heartbeat.interval.ms: how often KIP-848 consumers heartbeat"),
    Setting("group_consumer_min_heartbeat_interval_ms", integer, 5000, "group.consumer.min.heartbeat.interval.ms: the least a group may set"),
    Setting("broker_rack", text, None, "broker.rack: this broker's rack (availability zone), shown in Metadata"),
    Setting("replica_selector_class", replica_selector, None, "replica.selector.class: RackAwareReplicaSelector (or rack) sends "
            "a consumer whose client.rack is another broker's rack to fetch there, from the bucket (KIP-392); none: leaders serve all"),
    Setting("broker_session_timeout_ms", integer, 9000, "broker.session.timeout.ms: a broker that has not renewed its session in the "
            "metadata store for this long is out of the cluster, and its partitions move to the others"),
    Setting("broker_heartbeat_interval_ms", integer, 500, "broker.heartbeat.interval.ms: how often the session is renewed and the "
            "controller runs (Kafka's default is 2000)"),
    Setting("auto_leader_rebalance_enable", boolean, True, "auto.leader.rebalance.enable: the controller evens out leadership "
            "when a broker joins and every leader.imbalance.check.interval.seconds, if a broker is off its share by more than "
            "leader.imbalance.per.broker.percentage", "BOOL"),
    Setting("leader_imbalance_check_interval_seconds", integer, 300, "leader.imbalance.check.interval.seconds: how often the "
            "controller checks the leadership balance"),
    Setting("leader_imbalance_per_broker_percentage", integer, 10, "leader.imbalance.per.broker.percentage: how far (percent of "
            "its even share, and more than one partition) a broker's leadership may be off before the controller moves some"),
    Setting("wal_enable", boolean, True, "write-ahead objects: acks=all is answered once the batch is durable in the bucket, "
            "and the high watermark is the durable offset (false: durable on the local append, as before)", "BOOL"),
    Setting("wal_commit_interval_ms", integer, 5, "wal.commit.interval.ms: how long appended batches gather into one write-ahead object"),
    Setting("wal_buffer_max_bytes", integer, 8 * 2**20, "wal.buffer.max.bytes: a write-ahead object is sealed early once it holds this much"),
    Setting("wal_max_pending_bytes", integer, 64 * 2**20, "wal.max.pending.bytes: appended bytes allowed to wait for the bucket; past this, "
            "produce to tiered topics fails with NOT_ENOUGH_REPLICAS (retriable)"),
    *(Setting(*entry) for entry in SECURITY_SETTINGS),
    *(Setting(*entry) for entry in CLEANER_SETTINGS),
    Setting("log_level", log_level, "INFO", "DEBUG, INFO, WARNING or ERROR"),
    Setting("log_format", log_format, "text", "text, or json for one JSON object per line (time, level, logger, message, exception)"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML file with any of the settings below (keys with underscores), "
                        "and a [topic_defaults] table of Kafka topic configs; env DISKLESS_CONFIG")
    for s in SETTINGS:
        default = "" if s.default is None else f" (default {s.default})"
        parser.add_argument(s.flag, dest=s.name, metavar=s.metavar, default=None, help=f"{s.help}{default}; env {s.env}")
    parser.add_argument("--topic-default", action="append", default=[], metavar="NAME=VALUE",
                        help="broker-wide default for a topic config, e.g. retention.ms=3600000 (repeatable)")


def resolve(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[BrokerConfig, LogSettings]:
    """Merge flags, environment and TOML into a BrokerConfig (and the log level and format)."""
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
    sources: dict[str, str] = {}
    for s in SETTINGS:
        # The first source that has a value wins, and a bad value is blamed on that source.
        for raw, source in ((getattr(args, s.name), s.flag), (env.get(s.env), s.env),
                            (file_values.get(s.name), f"{s.name} in {config_path}"), (s.default, "default")):
            if raw is not None:
                break
        sources[s.name] = source
        try:
            values[s.name] = None if raw is None else s.parse(raw)
        except (SettingsError, ValueError, TypeError) as exc:
            raise SettingsError(f"{source}: {exc}") from None
    file_defaults = file_values.get("topic_defaults", {})
    if not isinstance(file_defaults, dict):
        raise SettingsError(f"topic_defaults in {config_path}: expected a table of NAME = VALUE, got {file_defaults!r}")
    topic_defaults = {str(k): str(v) for k, v in file_defaults.items()}
    for item in args.topic_default:
        name, sep, value = item.partition("=")
        if not sep:
            raise SettingsError(f"--topic-default: expected NAME=VALUE, got {item!r}")
        topic_defaults[name.strip()] = value.strip()
    from diskless.broker.topic_configs import TOPIC_CONFIGS, InvalidConfig, UnknownConfig, validate

    try:
        validate(topic_defaults)
    except UnknownConfig as exc:
        close = difflib.get_close_matches(exc.name, TOPIC_CONFIGS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SettingsError(f"topic default {exc.name}={exc.value}: no such topic config{hint}") from None
    except InvalidConfig as exc:
        raise SettingsError(f"topic default: {exc}") from None
    aws_env = {k: v for k, v in env.items() if k.startswith("AWS_")}
    try:
        object_store = resolved_object_store_url(values["object_store"], values["data_dir"], aws_env)
    except SettingsError as exc:
        raise SettingsError(f"{sources['object_store']}: {exc}") from None
    listens = values["listen"]
    advertiseds = values["advertised_listener"] or [(None, None)] * len(listens)
    try:
        securities, listens, advertiseds = named_listeners(values, sources, listens, advertiseds)
        security = security_config(values, sources, securities)
        cleaner = cleaner_config(values, sources)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if len(advertiseds) != len(listens):
        raise SettingsError(f"{sources['advertised_listener']}: {len(advertiseds)} address(es) for {len(listens)} "
                            f"--listen address(es); give one advertised address per listener, in the same order")
    if len({port for _host, port in listens if port}) != len([port for _host, port in listens if port]):
        raise SettingsError(f"{sources['listen']}: two listeners on one port")
    (listen_host, listen_port), advertised = listens[0], advertiseds[0]
    extra_listeners = tuple(
        Listener(host, port, a_host, a_port, listener)
        for (host, port), (a_host, a_port), listener in zip(listens[1:], advertiseds[1:], securities[1:])
    )
    http = values["http"] or (None, None)
    config = BrokerConfig(
        data_dir=values["data_dir"],
        listen_host=listen_host,
        listen_port=listen_port,
        advertised_host=advertised[0],
        advertised_port=advertised[1],
        extra_listeners=extra_listeners,
        listener_security=securities[0],
        security=security,
        metadata_url=values["metadata"],
        object_store_url=object_store,
        http_host=http[0],
        http_port=http[1],
        node_id=_at_least(0, values, sources, "node_id"),
        num_partitions=_at_least(1, values, sources, "num_partitions"),
        auto_create_topics_enable=values["auto_create_topics"],
        socket_request_max_bytes=_at_least(1, values, sources, "socket_request_max_bytes"),
        max_connections=_at_least(1, values, sources, "max_connections"),
        max_connections_per_ip=_max_connections_per_ip(values, sources),
        max_connections_per_ip_overrides=values["max_connections_per_ip_overrides"] or "",
        max_connection_creation_rate=_at_least(0, values, sources, "max_connection_creation_rate"),
        connections_max_idle_ms=_at_least(1, values, sources, "connections_max_idle_ms"),
        queued_max_request_bytes=_at_least(-1, values, sources, "queued_max_request_bytes"),
        request_arrival_timeout_ms=_at_least(1, values, sources, "request_arrival_timeout_ms"),
        max_partitions_per_request=_at_least(1, values, sources, "max_partitions_per_request"),
        max_partitions=_at_least(1, values, sources, "max_partitions"),
        log_retention_check_interval_ms=_at_least(1, values, sources, "log_retention_check_interval_ms"),
        group_initial_rebalance_delay_ms=_at_least(0, values, sources, "group_initial_rebalance_delay_ms"),
        offsets_topic_num_partitions=_at_least(1, values, sources, "offsets_topic_num_partitions"),
        upload_concurrency=_at_least(1, values, sources, "upload_concurrency"),
        remote_fetch_max_bytes_per_second=_at_least(1, values, sources, "remote_log_manager_fetch_max_bytes_per_second"),
        remote_fetch_quota_window_num=_at_least(1, values, sources, "remote_log_manager_fetch_quota_window_num"),
        remote_fetch_quota_window_size_seconds=_at_least(1, values, sources, "remote_log_manager_fetch_quota_window_size_seconds"),
        max_incremental_fetch_session_cache_slots=_at_least(0, values, sources, "max_incremental_fetch_session_cache_slots"),
        quota_windows=QuotaWindows(
            _at_least(1, values, sources, "quota_window_num"), 1000 * _at_least(1, values, sources, "quota_window_size_seconds"),
            _at_least(1, values, sources, "controller_quota_window_num"),
            1000 * _at_least(1, values, sources, "controller_quota_window_size_seconds"),
        ),
        local_disk_limit_bytes=values["local_disk_limit_bytes"],
        **_group_consumer_timeouts(values, sources),
        broker_rack=values["broker_rack"],
        replica_selector_class=values["replica_selector_class"],
        broker_session_timeout_ms=_at_least(1, values, sources, "broker_session_timeout_ms"),
        broker_heartbeat_interval_ms=_at_least(1, values, sources, "broker_heartbeat_interval_ms"),
        auto_leader_rebalance_enable=values["auto_leader_rebalance_enable"],
        leader_imbalance_check_interval_seconds=_at_least(1, values, sources, "leader_imbalance_check_interval_seconds"),
        leader_imbalance_per_broker_percentage=_at_least(0, values, sources, "leader_imbalance_per_broker_percentage"),
        wal_enable=values["wal_enable"],
        wal_commit_interval_ms=_at_least(0, values, sources, "wal_commit_interval_ms"),
        wal_buffer_max_bytes=_at_least(1, values, sources, "wal_buffer_max_bytes"),
        wal_max_pending_bytes=_at_least(1, values, sources, "wal_max_pending_bytes"),
        object_store_env=aws_env,
        topic_defaults=topic_defaults,
        cleaner=cleaner,
    )
    return config, LogSettings(values["log_level"], values["log_format"])


def _max_connections_per_ip(values: Mapping[str, Any], sources: Mapping[str, str]) -> int:
    """At least 1; 0 only with overrides, as Kafka requires."""
    if values["max_connections_per_ip"] == 0 and not parse_per_ip_overrides(values["max_connections_per_ip_overrides"] or ""):
        raise SettingsError(f"{sources['max_connections_per_ip']}: max.connections.per.ip can be set to zero only if "
                            f"max.connections.per.ip.overrides property is set")
    return values["max_connections_per_ip"] if values["max_connections_per_ip"] == 0 else _at_least(1, values, sources, "max_connections_per_ip")


def _group_consumer_timeouts(values: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, int]:
    """group.consumer.{,min.}session.timeout.ms and heartbeat.interval.ms, checked as Kafka's
    GroupCoordinatorConfig checks them: at least 1, each within its min and max (the max are
    Kafka's defaults, not settings here), the heartbeat below the session timeout."""
    from diskless.broker.group.config import GroupConfig

    checked = {name: _at_least(1, values, sources, name) for name in (
        "group_consumer_min_session_timeout_ms", "group_consumer_session_timeout_ms",
        "group_consumer_min_heartbeat_interval_ms", "group_consumer_heartbeat_interval_ms",
    )}  # fmt: skip
    maxima = GroupConfig()
    for kind, maximum in (("session_timeout_ms", maxima.group_consumer_max_session_timeout_ms),
                          ("heartbeat_interval_ms", maxima.group_consumer_max_heartbeat_interval_ms)):
        name, least_name, dotted = f"group_consumer_{kind}", f"group_consumer_min_{kind}", kind.replace("_", ".")
        if checked[least_name] > maximum:
            raise SettingsError(f"{sources[least_name]}: expected at most {maximum} (group.consumer.max.{dotted}), got {checked[least_name]}")
        if not checked[least_name] <= checked[name] <= maximum:
            raise SettingsError(f"{sources[name]}: expected {checked[least_name]} (group.consumer.min.{dotted}) to {maximum} "
                                f"(group.consumer.max.{dotted}), got {checked[name]}")
    if checked["group_consumer_heartbeat_interval_ms"] >= checked["group_consumer_session_timeout_ms"]:
        raise SettingsError(f"{sources['group_consumer_heartbeat_interval_ms']}: group.consumer.heartbeat.interval.ms must be less "
                            f"than group.consumer.session.timeout.ms ({checked['group_consumer_session_timeout_ms']}), "
                            f"got {checked['group_consumer_heartbeat_interval_ms']}")
    return checked


def _at_least(minimum: int, values: Mapping[str, Any], sources: Mapping[str, str], name: str) -> int:
    value = values[name]
    if value < minimum or value == 0 and minimum < 0:
        raise SettingsError(f"{sources[name]}: expected {'-1 or a positive integer' if minimum < 0 else f'at least {minimum}'}, got {value}")
    return value


def environment() -> Mapping[str, str]:
    return os.environ
