"""`diskless groups list|describe|delete`: consumer groups and their lag, as
`kafka-consumer-groups.sh --list / --describe / --delete` show them, through the Kafka protocol
(ListGroups, DescribeGroups, OffsetFetch, ListOffsets), so they work against any broker.

`describe` prints, per partition the group committed or is assigned, Kafka's columns:

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

LOG-END-OFFSET is what ListOffsets(latest) answers, the high watermark (what a consumer can
reach), and LAG is LOG-END-OFFSET minus CURRENT-OFFSET; "-" where there is no committed offset.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from diskless.client import Admin, KafkaError, TopicPartition

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")


def add_commands(commands: Any) -> None:
    groups = commands.add_parser("groups", help="list, describe (with lag) and delete consumer groups")
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="list consumer groups")
    describe = actions.add_parser(
        "describe", help="per partition: committed offset, log end offset, lag and member (like kafka-consumer-groups --describe)"
    )
    describe.add_argument("group", nargs="+")
    delete = actions.add_parser("delete", help="delete groups without members and their committed offsets")
    delete.add_argument("group", nargs="+")
    for parser in (listing, describe, delete):
        parser.add_argument("--bootstrap-server", "-b", default=None,
                            help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP}; env DISKLESS_BOOTSTRAP_SERVERS)")  # fmt: skip
    groups.set_defaults(run_command=run)


def run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or os.environ.get("DISKLESS_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)
    action = {"list": _list, "describe": _describe, "delete": _delete}[args.action]
    try:
        return asyncio.run(action(args, bootstrap))
    except KafkaError as exc:
        print(f"diskless groups {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _list(args: argparse.Namespace, bootstrap: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        for listing in sorted(await admin.list_groups(), key=lambda g: g.group_id):
            print(listing.group_id)
    return 0


async def _delete(args: argparse.Namespace, bootstrap: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.delete_groups(args.group)
    for group in args.group:
        print(f"deleted group {group}")
    return 0


async def _describe(args: argparse.Namespace, bootstrap: str) -> int:
    code = 0
    async with Admin(bootstrap_servers=bootstrap) as admin:
        descriptions = await admin.describe_groups(args.group)
        for index, group in enumerate(args.group):
            description = descriptions[group]
            committed = await admin.list_group_offsets(group)
            owners = {tp: member for member in description.members for tp in member.assignment}
            partitions = sorted(set(committed) | set(owners))
            if index:
                print()
            if not partitions and description.state in ("Dead", ""):
                print(f"Consumer group '{group}' does not exist.", file=sys.stderr)
                code = 2
                continue
            state = description.state
            if not description.members:
                print(f"Consumer group '{group}' has no active members.")
            ends = await _log_end_offsets(admin, partitions)
            rows = []
            for tp in partitions:
                current = committed[tp].offset if tp in committed else None
                end = ends.get(tp)
                lag = None if current is None or end is None else max(0, end - current)
                member = owners.get(tp)
                rows.append((
                    group, tp.topic, str(tp.partition), _text(current), _text(end), _text(lag),
                    member.member_id if member else "-", member.client_host if member else "-", member.client_id if member else "-",
                ))  # fmt: skip
            _print_table(COLUMNS, rows)
            print(f"(state {state}, {len(description.members)} member(s), total lag {sum(int(r[5]) for r in rows if r[5] != '-')})")
    return code


async def _log_end_offsets(admin: Admin, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    ends: dict[TopicPartition, int] = {}
    for topic in sorted({tp.topic for tp in partitions}):
        wanted = [tp.partition for tp in partitions if tp.topic == topic]
        try:
            answers = await admin.list_offsets(topic, "latest", wanted)
        except KafkaError:  # a topic deleted since the commit: its offsets show without lag
            continue
        ends.update({TopicPartition(topic, p): found.offset for p, found in answers.items() if found is not None})
    return ends


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
