"""`diskless metadata migrate` and `diskless metadata check`: the metadata database, looked
after from a terminal or a deployment script, without a broker.

    diskless metadata migrate [--metadata URL]   bring the schema to this build's version
    diskless metadata check [--metadata URL] [--json]
                                                 connection, schema version, row counts

The URL comes from --metadata, else DISKLESS_METADATA, else the broker's default
sqlite:///<data-dir>/metadata.db (--data-dir, DISKLESS_DATA_DIR, ./diskless-data). A bad URL,
a wrong password, an unknown database or a database that does not answer is one line on
standard error: exit 2 for a URL that cannot be used as written, 1 for the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_DATA_DIR = "./diskless-data"


def add_commands(commands: Any) -> None:
    metadata = commands.add_parser("metadata", help="migrate or check the metadata database")
    actions = metadata.add_subparsers(dest="action", required=True, metavar="ACTION")
    migrate = actions.add_parser("migrate", help="bring the metadata schema to this build's version")
    check = actions.add_parser("check", help="connection, schema version and row counts; changes nothing")
    for parser in (migrate, check):
        parser.add_argument(
            "--metadata", metavar="URL",
            help="sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE (env DISKLESS_METADATA; "
            "default sqlite:///<data-dir>/metadata.db)",
        )  # fmt: skip
        parser.add_argument(
            "--data-dir", metavar="DIR", help=f"for the default URL (env DISKLESS_DATA_DIR; default {DEFAULT_DATA_DIR})"
        )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    metadata.set_defaults(run_command=run)


def _url(args: argparse.Namespace) -> str:
    url = args.metadata or os.environ.get("DISKLESS_METADATA")
    if url:
        return url
    data_dir = Path(args.data_dir or os.environ.get("DISKLESS_DATA_DIR") or DEFAULT_DATA_DIR)
    return "sqlite:///" + str(data_dir.absolute() / "metadata.db")


def run(args: argparse.Namespace) -> int:
    from metadata.errors import MetadataError, MetadataStorageError, UnsupportedMetadataUrl

    # The store logs "unreachable" for a broker's operators; here the error line says it.
    logging.getLogger("metadata").setLevel(logging.ERROR)
    try:
        return asyncio.run(_migrate(args) if args.action == "migrate" else _check(args))
    except UnsupportedMetadataUrl as exc:
        print(f"diskless metadata {args.action}: {exc}", file=sys.stderr)
        return 2
    except MetadataStorageError as exc:
        print(f"diskless metadata {args.action}: {exc.reason}", file=sys.stderr)
        return 1
    except MetadataError as exc:  # UnsupportedSchemaVersion, ...
        print(f"diskless metadata {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _migrate(args: argparse.Namespace) -> int:
    from metadata.admin import migrate_metadata

    report = await migrate_metadata(_url(args))
    if report.found_version == report.version:
        print(f"{report.location}: schema version {report.version}, already current")
    else:
        print(f"{report.location}: schema version {report.found_version} -> {report.version}")
    return 0


async def _check(args: argparse.Namespace) -> int:
    from metadata.admin import check_metadata

    report = await check_metadata(_url(args))
    if args.json:
        print(json.dumps({
            "location": report.location, "backend": report.backend, "connection": "ok",
            "schema_version": report.schema_version, "supported_version": report.supported_version,
            "row_counts": report.row_counts,
        }))  # fmt: skip
        return 0
    if report.schema_version == 0:
        state = "empty: run diskless metadata migrate (or start a broker)"
    elif report.schema_version < report.supported_version:
        state = "older than this build: brokers migrate it at start-up, or run diskless metadata migrate"
    else:
        state = "current"
    print(f"metadata:       {report.location} ({report.backend})")
    print("connection:     ok")
    print(f"schema version: {report.schema_version} ({state})")
    for table, count in report.row_counts.items():
        print(f"  {table + ':':<20}{count}")
    return 0
