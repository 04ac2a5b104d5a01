"""`diskless partitions reassign` and `diskless partitions balance`: partition leadership moved
by hand, through the metadata store, without a broker in the path.

    diskless partitions reassign [--metadata URL] TOPIC:PARTITION=NODE [...]
                                 make live broker NODE the leader of each partition given,
                                 and keep it there (TOPIC:PARTITION=auto forgets that)
    diskless partitions balance [--metadata URL] [--dry-run]
                                 even out leadership over the live brokers (fewest moves)

A reassignment is kept in the store, as Kafka keeps a reassigned partition's replicas: the
controller gives the partition back to NODE whenever NODE lives (after it restarts, or when
balancing), and balancing moves only the partitions not reassigned. `=auto` forgets the
reassignment without moving anything: the controller places the partition from then on.

A move is one compare-and-set on the partition's leader epoch
(`MetadataStore.set_partition_leader`): it bumps the epoch, so the old leader's writes are
fenced from then on, and the brokers follow at their next heartbeat (the old leader closes the
partition, the new one rebuilds its tail from the bucket and serves it). Clients find the new
leader as after any leader change (NOT_LEADER_OR_FOLLOWER, a Metadata refresh, a retry):
idempotent producers lose and duplicate nothing.

A partition reassigned to a registered broker that is down stays where it is until that broker
returns (as Kafka's reassignment to an offline broker completes when it is back).

Everything is checked before anything moves: an unknown broker, an unknown topic or
partition, or a malformed argument is one line on standard error
and nothing changes (exit 2 for an argument that cannot be used as written, 1 for the rest).
A partition already led by the broker named is left alone. A move that loses the race with
the controller or another command (the epoch moved meanwhile) is reported; the others stand.

The URL comes from --metadata, else DISKLESS_METADATA, else the broker's default
sqlite:///<data-dir>/metadata.db, as for `diskless metadata`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from dataclasses import dataclass
from typing import Any

from .metadata_tools import DEFAULT_DATA_DIR, _url

_ASSIGNMENT = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+):(?P<partition>\d+)=(?P<node>-?\d+|auto)$")


@dataclass(frozen=True, slots=True)
class Assignment:
    topic: str
    partition: int
    node_id: int | None  # None: forget the partition's reassignment


class ReassignRefused(Exception):
    """A request that names something that is not there: nothing was moved."""


def add_commands(commands: Any) -> None:
    partitions = commands.add_parser("partitions", help="move partition leadership between brokers")
    actions = partitions.add_subparsers(dest="action", required=True, metavar="ACTION")
    reassign = actions.add_parser(
        "reassign", help="make the given live brokers the leaders of the given partitions",
        description="Make live broker NODE the leader of TOPIC's partition PARTITION, for each "
        "TOPIC:PARTITION=NODE given, and keep it there: the controller gives it back to NODE whenever "
        "NODE lives, and balancing leaves it alone. TOPIC:PARTITION=auto forgets that, moving nothing. "
        "The brokers follow within a heartbeat.",
    )  # fmt: skip
    reassign.add_argument("assignments", nargs="+", metavar="TOPIC:PARTITION=NODE|auto", type=_assignment)
    balance = actions.add_parser(
        "balance", help="even out partition leadership over the live brokers",
        description="Bring reassigned partitions back to their live brokers, then move the fewest "
        "other partitions that make every live broker lead the same number of partitions, give or "
        "take one (run it after adding a broker).",
    )  # fmt: skip
    balance.add_argument("--dry-run", action="store_true", help="print the moves, make none")
    for parser in (reassign, balance):
        parser.add_argument(
            "--metadata", metavar="URL",
            help="the brokers' metadata store: postgresql://USER:PASSWORD@HOST:PORT/DATABASE or sqlite:///PATH "
            "(env DISKLESS_METADATA; default sqlite:///<data-dir>/metadata.db)",
        )  # fmt: skip
        parser.add_argument("--data-dir", metavar="DIR", help=f"for the default URL (env DISKLESS_DATA_DIR; default {DEFAULT_DATA_DIR})")
    partitions.set_defaults(run_command=run)


def _assignment(text: str) -> Assignment:
    m = _ASSIGNMENT.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not TOPIC:PARTITION=NODE or TOPIC:PARTITION=auto (e.g. orders:0=2)")
    return Assignment(m["topic"], int(m["partition"]), None if m["node"] == "auto" else int(m["node"]))


def run(args: argparse.Namespace) -> int:
    from metadata.errors import MetadataError, MetadataStorageError, UnsupportedMetadataUrl

    logging.getLogger("metadata").setLevel(logging.ERROR)  # the error line says it
    command = f"diskless partitions {args.action}"
    try:
        return asyncio.run(_reassign(args) if args.action == "reassign" else _balance(args))
    except UnsupportedMetadataUrl as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except ReassignRefused as exc:
        print(f"{command}: {exc}; nothing was moved", file=sys.stderr)
        return 1
    except MetadataStorageError as exc:
        print(f"{command}: {exc.reason}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _reassign(args: argparse.Namespace) -> int:
    from diskless.broker.cluster.controller import Move
    from metadata import open_metadata_store

    async with await open_metadata_store(_url(args)) as store:
        brokers = {b.node_id: b for b in await store.list_brokers()}
        leaders = {(p.topic, p.partition): p for p in await store.list_partition_leaders()}
        topics = {p.topic: 0 for p in leaders.values()}
        for topic, _ in leaders:
            topics[topic] += 1
        moves, unchanged, forgotten, waiting = [], [], [], []
        seen: dict[tuple[str, int], int | None] = {}
        for a in args.assignments:
            broker = brokers.get(a.node_id) if a.node_id is not None else None
            if a.node_id is not None and broker is None:
                known = ", ".join(str(n) for n in sorted(brokers)) or "none"
                raise ReassignRefused(f"unknown broker {a.node_id} (registered brokers: {known})")
            if a.topic not in topics:
                raise ReassignRefused(f"unknown topic {a.topic!r}")
            current = leaders.get((a.topic, a.partition))
            if current is None:
                raise ReassignRefused(f"unknown partition {a.topic}:{a.partition} (topic {a.topic!r} has {topics[a.topic]} partitions)")
            if seen.setdefault((a.topic, a.partition), a.node_id) != a.node_id:
                raise ReassignRefused(f"{a.topic}:{a.partition} is given two leaders")
            if a.node_id is None:
                forgotten.append(current)
            elif broker is not None and not broker.alive:
                waiting.append((current, a.node_id))
            elif current.leader_id == a.node_id:
                unchanged.append(current)
            else:
                moves.append(Move(a.topic, a.partition, a.node_id, current.leader_epoch))
        by_topic: dict[str, list[tuple[int, int | None]]] = {}
        for a in args.assignments:
            by_topic.setdefault(a.topic, []).append((a.partition, a.node_id))
        for topic, preferred in by_topic.items():  # first: a move the controller sees is already kept
            await store.set_preferred_leaders(topic, preferred)
        for p in unchanged:
            print(f"{p.topic}:{p.partition}: already led by broker {p.leader_id} (epoch {p.leader_epoch}); kept there")
        for p in forgotten:
            print(f"{p.topic}:{p.partition}: reassignment forgotten; led by broker {_name(p.leader_id)}, placed by the controller from now on")
        for p, node_id in waiting:
            print(f"{p.topic}:{p.partition}: reassigned to broker {node_id}, which is down: it takes the partition when it returns "
                  f"(led by broker {_name(p.leader_id)} until then)")  # fmt: skip
        return await _apply(store, moves, leaders)


async def _balance(args: argparse.Namespace) -> int:
    from diskless.broker.cluster.controller import plan_balance
    from metadata import open_metadata_store

    async with await open_metadata_store(_url(args)) as store:
        live = [b.node_id for b in await store.list_brokers() if b.alive]
        if not live:
            raise ReassignRefused("no broker is alive")
        leaderships = await store.list_partition_leaders()
        leaders = {(p.topic, p.partition): p for p in leaderships}
        moves = plan_balance(leaderships, live)
        if not moves:
            counts = {node: sum(1 for p in leaderships if p.leader_id == node) for node in live}
            kept = {node: sum(1 for p in leaderships if p.leader_id == node == p.preferred_leader) for node in live}
            print("balanced: " + ", ".join(
                f"broker {node} leads {count}" + (f" ({kept[node]} reassigned to it)" if kept[node] else "") for node, count in sorted(counts.items())
            ))  # fmt: skip
            return 0
        if args.dry_run:
            for m in moves:
                print(f"{m.topic}:{m.partition}: would move from broker {leaders[(m.topic, m.partition)].leader_id} to broker {m.leader_id}")
            return 0
        return await _apply(store, moves, leaders)


async def _apply(store: Any, moves: list, leaders: dict) -> int:
    from metadata.errors import FencedLeaderEpoch

    lost = 0
    for m in moves:
        before = leaders[(m.topic, m.partition)]
        try:
            epoch = await store.set_partition_leader(m.topic, m.partition, m.leader_id, m.expected_epoch)
        except FencedLeaderEpoch:
            print(f"{m.topic}:{m.partition}: not moved: its leader changed meanwhile (epoch {m.expected_epoch} is gone); run the command again",
                  file=sys.stderr)  # fmt: skip
            lost += 1
            continue
        print(f"{m.topic}:{m.partition}: leader {_name(before.leader_id)} -> {m.leader_id} (epoch {m.expected_epoch} -> {epoch})")
    return 1 if lost else 0


def _name(node_id: int | None) -> str:
    return "none" if node_id is None else str(node_id)
