"""The `diskless` command."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from typing import TYPE_CHECKING

from . import log_format

if TYPE_CHECKING:
    from diskless.broker.config import BrokerConfig

DESCRIPTION = """\
Diskless: a Kafka-compatible broker whose local disk is only a cache.
Rolled segments live in S3-compatible object storage; any Kafka client works unchanged."""


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as the `diskless` program, not called by a test
        _skip_optional_test_imports()
    from . import tools  # after the line above: it imports the client, and so kio

    parser = argparse.ArgumentParser(prog="diskless", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    given = sys.argv[1:] if argv is None else argv
    if given and given[0] in tools.COMMANDS:
        # `diskless produce` and the other client tools build their own parsers only: the
        # broker's settings and the bucket and metadata tools take a tenth of a second to import.
        tools.add_commands(commands)
        args, extras = parser.parse_known_args(argv)
        if extras:
            _unrecognized(_chosen_parser(parser, args), extras)
        return tools.run(args)
    from . import bucket_tool, groups_tool, metadata_tools, partitions_tool, quotas_tool, security_tools, settings, transactions_tool

    serve = commands.add_parser(
        "serve",
        help="run a broker",
        description="Run a broker. With no flags it runs on embedded defaults: SQLite metadata and a "
        "bucket in a local directory, both under --data-dir. Every flag also reads from an "
        "environment variable and from the --config TOML file (flag > env > file > default).",
    )
    parser.add_argument("--version", action="version", version=f"diskless {_version()}")
    settings.add_arguments(serve)
    tools.add_commands(commands)
    groups_tool.add_commands(commands)
    bucket_tool.add_commands(commands)
    metadata_tools.add_commands(commands)
    partitions_tool.add_commands(commands)
    security_tools.add_commands(commands)
    quotas_tool.add_commands(commands)
    transactions_tool.add_commands(commands)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unrecognized(_chosen_parser(parser, args), extras)
    if args.command == "serve":
        return _serve(args)
    if hasattr(args, "run_command"):  # groups, bucket, users, acls, quotas
        return args.run_command(args)
    return tools.run(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diskless")
    except PackageNotFoundError:
        return "(not installed)"


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command's parser, so a mistake shows that command's usage."""
    for dest in ("command", "action"):
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, dest, None)
        if sub is None or chosen not in sub.choices:
            break
        parser = sub.choices[chosen]
    return parser


def _unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> None:
    """argparse's error for unknown arguments, from the subcommand, with a guess at the flag meant."""
    import difflib

    flags = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    message = f"unrecognized arguments: {' '.join(extras)}"
    for extra in extras:
        if extra.startswith("-"):
            guess = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1)
            if guess:
                message += f" (did you mean {guess[0]}?)"
                break
    parser.error(message)


async def _check_object_store(config: BrokerConfig) -> None:
    """One small request to an s3:// store before the broker starts, so a wrong endpoint,
    bucket or credential shows in the first lines of the log. It only warns: the broker serves
    the hot tier without the bucket, and its uploads retry until the bucket answers."""
    url = config.resolved_object_store_url
    if not url.startswith("s3://"):
        return
    from cold_tier.errors import ObjectStoreError
    from cold_tier.retry import RetryPolicy
    from cold_tier.url import open_object_store

    store = open_object_store(url, env=config.object_store_env, retry=RetryPolicy(max_attempts=1),
                              connect_timeout_ms=3000, read_timeout_ms=3000)
    try:
        await store.list("diskless-reachability-check/")
    except (ObjectStoreError, OSError) as exc:
        logging.getLogger("diskless").warning(
            "object store %s does not answer (%s); starting anyway: uploads retry until it does", url, str(exc).splitlines()[0])
    finally:
        await store.close()


def _unbindable_address(config: BrokerConfig) -> str | None:
    """Why one of the addresses the broker listens on cannot be bound, naming it; None if all can.

    The error of a bind names no address, and the broker binds its first listener only after it
    opened the data directory and the metadata store: so each listener, and the admin HTTP
    endpoint, is bound once here with the broker's own socket options and closed at once."""
    from diskless.broker.listen_sockets import listen_sockets

    def shown(host: str, port: int) -> str:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    listeners = [(config.listener_security, config.listen_host, config.listen_port),
                 *((listener.security, listener.host, listener.port) for listener in config.extra_listeners)]  # fmt: skip
    addresses = [(f"listener {security.name}://{shown(host, port)}", host, port) for security, host, port in listeners]
    if config.http_host is not None:
        http_port = config.http_port or 0
        addresses.append((f"the admin HTTP endpoint (--http) {shown(config.http_host, http_port)}", config.http_host, http_port))
    for what, host, port in addresses:
        if port == 0:
            continue  # any free port: nothing to check
        try:
            for sock in listen_sockets(host, port):
                sock.close()
        except OSError as exc:
            return f"cannot bind {what}: {exc}"
    return None


def _skip_optional_test_imports() -> None:
    # kio imports hypothesis, when it is installed, only to register test strategies for its
    # types: a quarter of a second at every start of the command. A None entry makes that
    # import fail fast, which kio handles; a process that already imported it keeps it.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


def _serve(args: argparse.Namespace) -> int:
    from . import settings

    try:
        config, log_settings = settings.resolve(args, settings.environment())
    except settings.SettingsError as exc:
        print(f"diskless serve: {exc}", file=sys.stderr)
        return 2
    log_format.configure(log_settings.level, log_settings.format)
    if (unbindable := _unbindable_address(config)) is not None:
        logging.getLogger("diskless").error("cannot start: %s", unbindable)
        return 1
    from diskless.broker.app import Broker

    from .listeners import ExtraListeners, MultiListenerBroker

    async def run() -> None:
        broker = MultiListenerBroker(config) if config.extra_listeners else Broker(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await _check_object_store(config)
        extra = ExtraListeners(broker, config) if isinstance(broker, MultiListenerBroker) else None
        try:
            if extra is not None:
                await extra.start()  # bound first: the broker registers every listener's address
            await broker.start()
            # What start-up made (modules, the S3 client's service model, every partition's
            # state) lives as long as the process: out of the collector's sight, a full
            # collection no longer walks it, and no longer stalls every request for 100-150 ms.
            gc.freeze()
        except BaseException:
            if extra is not None:
                await extra.stop()
            raise
        try:
            await stop.wait()
            logging.getLogger("diskless").info("shutting down")
        finally:
            if extra is not None:
                await extra.stop()
            await broker.stop()

    from diskless.broker.data_dir import DataDirError

    try:
        asyncio.run(run())
    except DataDirError as exc:
        print(f"diskless serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        logging.getLogger("diskless").error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
