"""`diskless groups list|describe|reset-offsets|delete`: consumer groups and their lag, as
`kafka-consumer-groups.sh --list / --describe / --reset-offsets / --delete` show them, through
the Kafka protocol (ListGroups, ConsumerGroupDescribe, DescribeGroups, OffsetFetch, ListOffsets,
OffsetCommit), so they work against any broker.

A group is described as Kafka's AdminClient.describeConsumerGroups does for the tool: with
ConsumerGroupDescribe (KIP-848 groups, `group.protocol=consumer`), and with DescribeGroups
when the coordinator answers GROUP_ID_NOT_FOUND (a classic group, or none) or does not speak
ConsumerGroupDescribe. DescribeGroups alone calls a KIP-848 group Dead.

`describe` prints, per partition the group committed or is assigned, Kafka's columns:

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

LOG-END-OFFSET is what ListOffsets(latest) answers, the high watermark (what a consumer can
reach), and LAG is LOG-END-OFFSET minus CURRENT-OFFSET; "-" where there is no committed offset.
`describe --members` prints one line per member (GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST
CLIENT-ID #PARTITIONS, and with --verbose Kafka 4's CURRENT-EPOCH CURRENT-ASSIGNMENT
TARGET-EPOCH TARGET-ASSIGNMENT, assignments as `topic:0,1;other:2`), `describe --state` one
line per group (GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS, and with --verbose
GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH before #MEMBERS); epochs are "-" for classic groups.

`reset-offsets` follows Kafka's ConsumerGroupCommand: it is refused unless the group is Empty or
Dead (no active members), it is a dry run unless `--execute` is given, and it prints the plan as
GROUP TOPIC PARTITION NEW-OFFSET. `--to-offset` is clamped into [log start, log end] with Kafka's
warning; `--to-datetime` takes the first offset whose timestamp is at or after the instant, and
the log end offset for a partition with no record that recent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from diskless.client import Admin, KafkaError, TopicPartition
from diskless.client.errors import GroupIdNotFoundError, UnsupportedByBroker, UnsupportedVersionError
from diskless.client.structs import BrokerInfo

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. "
    "In a future major release, the default behavior of this command will be to prompt the user before executing the reset "
    "rather than doing a dry run. You should add the --dry-run option explicitly if you are scripting this command "
    "and want to keep the current default behavior without prompting."
)
COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def add_commands(commands: Any) -> None:
    groups = commands.add_parser("groups", help="list, describe (with lag) and delete consumer groups")
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="list consumer groups")
    describe = actions.add_parser(
        "describe", help="per partition: committed offset, log end offset, lag and member (like kafka-consumer-groups --describe)"
    )
    describe.add_argument("group", nargs="+")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="per partition: offsets, lag and member (the default)")
    view.add_argument("--members", action="store_true", help="per member: host, client id and number of partitions")
    view.add_argument("--state", action="store_true", help="per group: coordinator, assignment strategy, state and number of members")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: member epochs, current and target assignments; with --state: group epochs")  # fmt: skip
    delete = actions.add_parser("delete", help="delete groups without members and their committed offsets")
    delete.add_argument("group", nargs="+")
    reset = actions.add_parser(
        "reset-offsets", help="set the committed offsets of a group without active members (like kafka-consumer-groups --reset-offsets)"
    )
    reset.add_argument("group")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                       help="topic to reset, all its partitions or the ones listed after a colon (repeatable)")  # fmt: skip
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="reset to the log end offset (high watermark)")
    target.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (clamped into the log)")
    target.add_argument("--to-datetime", metavar="ISO", type=_instant_ms,
                        help="reset to the first offset at or after this time, YYYY-MM-DDTHH:mm:SS.sss[+HH:MM] (UTC without zone)")  # fmt: skip
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    for parser in (listing, describe, delete, reset):
        parser.add_argument("--bootstrap-server", "-b", default=None,
                            help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP}; env DISKLESS_BOOTSTRAP_SERVERS)")  # fmt: skip
    groups.set_defaults(run_command=run)


def run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or os.environ.get("DISKLESS_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)
    action = {"list": _list, "describe": _describe, "delete": _delete, "reset-offsets": _reset_offsets}[args.action]
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


def _instant_ms(text: str) -> int:
    """Kafka's --to-datetime format 'YYYY-MM-DDTHH:mm:SS.sss', optionally with a zone; UTC without one."""
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date and time (YYYY-MM-DDTHH:mm:SS.sss): {text!r}") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1000)


def _topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    topic, _, listed = spec.partition(":")
    return topic, [int(p) for p in listed.split(",") if p] if listed else None


async def _reset_offsets(args: argparse.Namespace, bootstrap: str) -> int:
    group = args.group
    async with Admin(bootstrap_servers=bootstrap) as admin:
        state = (await _described(admin, group)).state
        if state not in ("Empty", "Dead", ""):
            print(f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}.",
                  file=sys.stderr)  # fmt: skip
            return 1
        plan: dict[TopicPartition, int] = {}
        for spec in args.topic:
            topic, partitions = _topic_partitions(spec)
            plan.update(await _new_offsets(admin, args, topic, partitions))
        if args.execute:
            await admin.alter_group_offsets(group, plan)
    if not args.execute and not args.dry_run:
        print(DRY_RUN_WARNING)
    print()
    _print_table(RESET_COLUMNS, [(group, tp.topic, str(tp.partition), str(offset)) for tp, offset in sorted(plan.items())])
    return 0


async def _new_offsets(admin: Admin, args: argparse.Namespace, topic: str, partitions: list[int] | None) -> dict[TopicPartition, int]:
    def found(answers: dict[int, Any]) -> dict[int, int]:
        return {p: a.offset for p, a in answers.items() if a is not None}

    latest = found(await admin.list_offsets(topic, "latest", partitions))
    if args.to_latest:
        chosen = latest
    elif args.to_datetime is not None:
        at = found(await admin.list_offsets(topic, args.to_datetime, partitions))
        for p in sorted(set(latest) - set(at)):
            print(f"\nWarn: Partition {p} from topic {topic} is empty. Falling back to latest known offset.")
        chosen = {p: at.get(p, end) for p, end in latest.items()}
    else:
        earliest = found(await admin.list_offsets(topic, "earliest", partitions))
        if args.to_earliest:
            chosen = earliest
        else:
            chosen = {}
            for p, end in latest.items():
                start, wanted = earliest[p], args.to_offset
                if wanted > end:
                    print(f"New offset ({wanted}) is higher than latest offset for topic partition {topic}-{p}. Value will be set to {end}")
                elif wanted < start:
                    print(f"New offset ({wanted}) is lower than earliest offset for topic partition {topic}-{p}. Value will be set to {start}")
                chosen[p] = min(max(wanted, start), end)
    return {TopicPartition(topic, p): offset for p, offset in chosen.items()}


@dataclass(frozen=True, slots=True)
class _Member:
    member_id: str
    group_instance_id: str | None
    host: str
    client_id: str
    assignment: tuple[TopicPartition, ...]
    member_epoch: int | None = None  # the rest: KIP-848 members only
    target_assignment: tuple[TopicPartition, ...] | None = None


@dataclass(frozen=True, slots=True)
class _Group:
    """A group of either protocol as the tool shows it (Kafka's ConsumerGroupDescription)."""

    group_id: str
    state: str
    assignment_strategy: str  # a classic group's protocol, a consumer group's assignor
    members: tuple[_Member, ...]
    group_epoch: int | None = None  # the rest: KIP-848 groups only
    target_assignment_epoch: int | None = None


async def _described(admin: Admin, group_id: str) -> _Group:
    """ConsumerGroupDescribe, and DescribeGroups for a group that is not a KIP-848 one (or a
    broker without ConsumerGroupDescribe), as Kafka's DescribeConsumerGroupsHandler."""
    try:
        d = (await admin.describe_consumer_groups([group_id]))[group_id]
    except (GroupIdNotFoundError, UnsupportedVersionError, UnsupportedByBroker):
        c = (await admin.describe_groups([group_id]))[group_id]
        members = tuple(_Member(m.member_id, m.group_instance_id, m.client_host, m.client_id, m.assignment) for m in c.members)
        return _Group(group_id, c.state, c.protocol, members)
    members = tuple(
        _Member(m.member_id, m.group_instance_id, m.client_host, m.client_id, m.assignment, m.member_epoch, m.target_assignment)
        for m in d.members
    )
    return _Group(group_id, d.state, d.assignor_name, members, d.group_epoch, d.assignment_epoch)


def _announced(group: _Group, *, has_rows: bool) -> bool:
    """Kafka's shouldPrintMemberState: the line before a group's table; False (after an error
    line) for a group that does not exist."""
    if group.state in ("Dead", "") and not has_rows:
        print(f"Consumer group '{group.group_id}' does not exist.", file=sys.stderr)
        return False
    if not group.members:
        print(f"Consumer group '{group.group_id}' has no active members.")
    elif group.state in REBALANCING:
        print(f"Warning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)
    return True


async def _describe(args: argparse.Namespace, bootstrap: str) -> int:
    code = 0
    async with Admin(bootstrap_servers=bootstrap) as admin:
        for index, group_id in enumerate(args.group):
            if index:
                print()
            group = await _described(admin, group_id)
            if args.members:
                shown = _print_members(group, args.verbose)
            elif args.state:
                shown = _print_state(group, await admin.group_coordinator(group_id), args.verbose)
            else:
                shown = await _print_offsets(admin, group)
            code = code if shown else 2
    return code


async def _print_offsets(admin: Admin, group: _Group) -> bool:
    committed = await admin.list_group_offsets(group.group_id)
    owners = {tp: member for member in group.members for tp in member.assignment}
    partitions = sorted(set(committed) | set(owners))
    if not _announced(group, has_rows=bool(partitions)):
        return False
    ends = await _log_end_offsets(admin, partitions)
    rows = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends.get(tp)
        lag = None if current is None or end is None else max(0, end - current)
        member = owners.get(tp)
        rows.append((
            group.group_id, tp.topic, str(tp.partition), _text(current), _text(end), _text(lag),
            member.member_id if member else "-", member.host if member else "-", member.client_id if member else "-",
        ))  # fmt: skip
    _print_table(COLUMNS, rows)
    print(f"(state {group.state}, {len(group.members)} member(s), total lag {sum(int(r[5]) for r in rows if r[5] != '-')})")
    return True


def _print_members(group: _Group, verbose: bool) -> bool:
    if not _announced(group, has_rows=False):
        return False
    if not group.members:
        return True
    instances = any(m.group_instance_id for m in group.members)
    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if instances else []), "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    rows = []
    for m in group.members:
        row = [group.group_id, m.member_id, *([m.group_instance_id or "-"] if instances else []), m.host, m.client_id, str(len(m.assignment))]
        if verbose:
            target = "-" if m.target_assignment is None else _assignment_text(m.target_assignment)
            row += [_text(m.member_epoch), _assignment_text(m.assignment), _text(group.target_assignment_epoch if m.member_epoch is not None else None), target]
        rows.append(row)
    _print_table(header, rows)
    return True


def _print_state(group: _Group, coordinator: BrokerInfo, verbose: bool) -> bool:
    if not _announced(group, has_rows=False):
        return False
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", *(["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if verbose else []), "#MEMBERS"]
    row = [
        group.group_id, f"{coordinator.host}:{coordinator.port}  ({coordinator.node_id})", group.assignment_strategy or "-", group.state,
        *([_text(group.group_epoch), _text(group.target_assignment_epoch)] if verbose else []), str(len(group.members)),
    ]  # fmt: skip
    _print_table(header, [row])
    return True


def _assignment_text(partitions: Sequence[TopicPartition]) -> str:
    """Kafka 4's `topic:0,1;other:2`; "-" for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{topic}:{','.join(map(str, sorted(ps)))}" for topic, ps in sorted(by_topic.items())) or "-"


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
