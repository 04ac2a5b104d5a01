"""`diskless transactions list|describe|abort`: the transactions the cluster coordinates, as
Kafka's `kafka-transactions.sh list` and `describe --transactional-id` show them, and the abort
of a hanging transaction as `kafka-transactions.sh abort` does it, through the Kafka protocol
(ListTransactions, DescribeTransactions, KIP-664; WriteTxnMarkers), so they work against any
broker. `--command-config` takes Kafka client properties for SASL/TLS, as the other tools.

    list       TransactionalId  Coordinator  ProducerId  TransactionState
    describe   CoordinatorId  TransactionalId  ProducerId  ProducerEpoch  TransactionState
               CurrentTransactionStartTimeMs  TransactionDurationMs  TopicPartitions

TransactionDurationMs is now minus the start of the open transaction ("None" outside one, as
Kafka prints it); TopicPartitions are topic-partition, comma-separated.

    abort --topic T --partition P --producer-id X --producer-epoch E --coordinator-epoch C

    abort --topic T --partition P --start-offset O

writes an abort marker for producer X's transaction into T-P through its leader (prints
nothing, exit 0, once it is durable): a read_committed consumer then reads past it. With
`--start-offset` the producer is the one whose open transaction in T-P begins at O, found with
DescribeProducers (its coordinator epoch, or 0 when the partition does not know it, as Kafka).

    find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MINUTES]

lists the transactions open in partitions (of broker N, or of T) for longer than
MINUTES (15) that their coordinator will never end, as Kafka's `find-hanging`: open there
(DescribeProducers) since before then, and either no coordinator knows the producer id
(ListTransactions) or its transaction (DescribeTransactions) does not hold the partition.
Columns: Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp
Duration(min); `abort --start-offset` ends one.

Errors are one line on stderr: exit 1 for what the broker answered (an unknown topic:
UNKNOWN_TOPIC_OR_PARTITION) or no transaction starting at O, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from diskless.client import Admin, KafkaError
from diskless.client.admin_transactions import ProducerState, TransactionDescription
from diskless.client.errors import UnknownTopicOrPartitionError, error_for
from diskless.client.security import ClientSecurity

from .client_options import add_client_options, bootstrap_servers, client_security

MAX_PRODUCER_EPOCH = 32_767  # an int16 on the wire
LIST_COLUMNS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)  # fmt: skip
HANGING_COLUMNS = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)",
)  # fmt: skip
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
TRANSACTIONAL_ID_NOT_FOUND = 105


def add_commands(commands: Any) -> None:
    transactions = commands.add_parser("transactions", help="list and describe transactions (like kafka-transactions.sh)")
    actions = transactions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every transactional id the coordinators know, with its state")
    listing.add_argument("--state", action="append", default=[], help="only this state (repeatable): Ongoing, CompleteCommit, ...")
    describe = actions.add_parser("describe", help="a transactional id's producer, state and partitions")
    describe.add_argument("--transactional-id", required=True, action="append", dest="transactional_ids", metavar="ID")
    abort = actions.add_parser("abort", help="abort a hanging transaction in one partition (WriteTxnMarkers to its leader)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", required=True, type=int)
    abort.add_argument("--start-offset", type=int, help="the first offset of the transaction in the partition (finds its producer)")
    abort.add_argument("--producer-id", type=int, help="the transaction's producer id (without --start-offset)")
    abort.add_argument("--producer-epoch", type=int, help="the transaction's producer epoch (without --start-offset)")
    abort.add_argument("--coordinator-epoch", type=int, help="the coordinator epoch the marker carries (without --start-offset)")
    hanging = actions.add_parser("find-hanging", help="transactions open in partitions that no coordinator will end")
    hanging.add_argument("--broker-id", type=int, help="search the partitions this broker leads")
    hanging.add_argument("--topic", help="search this topic's partitions")
    hanging.add_argument("--partition", type=int, help="only this partition (with --topic)")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="the largest transaction.timeout.ms of any producer, in minutes: transactions open longer are "
                              "candidates (default 15)")  # fmt: skip
    for parser in (listing, describe, abort, hanging):
        add_client_options(parser)
    transactions.set_defaults(run_command=run)


def run(args: argparse.Namespace) -> int:
    action = {"list": _list, "describe": _describe, "abort": _abort, "find-hanging": _find_hanging}[args.action]
    try:
        security = client_security(args)  # a bad --command-config is one line (ValueError), before any connection
        return asyncio.run(action(args, bootstrap_servers(args), security))
    except KafkaError as exc:
        print(f"diskless transactions {args.action}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"diskless transactions {args.action}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _list(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    async with Admin(bootstrap_servers=bootstrap, security=security) as admin:
        listed = await admin.list_transactions(states=args.state)
    _print_table(LIST_COLUMNS, [(t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state) for t in listed])
    return 0


async def _describe(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    async with Admin(bootstrap_servers=bootstrap, security=security) as admin:
        described = await admin.describe_transactions(args.transactional_ids)
    now_ms = int(time.time() * 1000)
    rows = []
    for d in described.values():
        start_ms = d.transaction_start_time_ms if d.state in OPEN_STATES else None
        rows.append((
            str(d.coordinator_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
            str(start_ms) if start_ms is not None else "None", str(now_ms - start_ms) if start_ms is not None else "None",
            ",".join(f"{t}-{p}" for t, p in d.partitions),
        ))  # fmt: skip
    _print_table(DESCRIBE_COLUMNS, rows)
    return 0


async def _abort(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    named = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    by_offset = args.start_offset is not None
    if by_offset == any(v is not None for v in named) or (not by_offset and None in named):
        raise ValueError("give either --start-offset or all of --producer-id, --producer-epoch and --coordinator-epoch")
    if args.partition < 0 or (by_offset and args.start_offset < 0):
        raise ValueError("--partition and --start-offset must be >= 0")
    if not by_offset:
        if args.producer_id < 0 or args.coordinator_epoch < 0:
            raise ValueError("--producer-id and --coordinator-epoch must be >= 0")
        if not 0 <= args.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(f"--producer-epoch must be between 0 and {MAX_PRODUCER_EPOCH}")
    async with Admin(bootstrap_servers=bootstrap, security=security) as admin:
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        if by_offset:
            producers = await admin.describe_producers(args.topic, args.partition)
            found = next((p for p in producers if p.current_transaction_start_offset == args.start_offset), None)
            if found is None:
                print(f"diskless transactions abort: could not find any open transaction starting at offset {args.start_offset} "
                      f"on partition {args.topic}-{args.partition}", file=sys.stderr)  # fmt: skip
                return 1
            producer_id, producer_epoch = found.producer_id, found.producer_epoch
            coordinator_epoch = max(found.coordinator_epoch, 0)
        await admin.abort_transaction(args.topic, args.partition, producer_id, producer_epoch, coordinator_epoch)
    return 0


async def _find_hanging(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    if args.topic is None and args.broker_id is None:
        raise ValueError("give --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise ValueError("--partition needs --topic")
    if args.max_transaction_timeout < 0:
        raise ValueError("--max-transaction-timeout must be >= 0")
    async with Admin(bootstrap_servers=bootstrap, security=security) as admin:
        topics = await admin.describe_topics(None if args.topic is None else [args.topic])
        searched = {
            name: [p.partition for p in d.partitions
                   if (args.partition is None or p.partition == args.partition)
                   and (args.broker_id is None or args.broker_id in (p.leader, *p.replicas))]
            for name, d in topics.items()
        }  # fmt: skip
        if args.partition is not None and not searched[args.topic]:
            raise error_for(UnknownTopicOrPartitionError.errno, None, topic=args.topic, partition=args.partition)
        now_ms = int(time.time() * 1000)
        oldest_ms = now_ms - args.max_transaction_timeout * 60_000
        names = [name for name, partitions in searched.items() if partitions]
        described = await asyncio.gather(*(admin.describe_topic_producers(name, searched[name]) for name in names))
        candidates = [
            (name, partition, producer)
            for name, by_partition in zip(names, described)
            for partition, producers in sorted(by_partition.items())
            for producer in producers
            if producer.current_transaction_start_offset >= 0 and producer.last_timestamp_ms < oldest_ms
        ]  # fmt: skip
        hanging = await _not_ending(admin, candidates) if candidates else []
    _print_table(HANGING_COLUMNS, [
        (name, str(partition), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.current_transaction_start_offset),
         str(p.last_timestamp_ms), str((now_ms - p.last_timestamp_ms) // 60_000))
        for name, partition, p in hanging
    ])  # fmt: skip
    return 0


async def _not_ending(admin: Admin, candidates: list[tuple[str, int, ProducerState]]) -> list[tuple[str, int, ProducerState]]:
    """The candidates no coordinator will end: their producer id is unknown to every coordinator,
    or its transactional id's transaction (open, or still writing markers) lacks the partition."""
    producer_ids = {p.producer_id for _, _, p in candidates}
    transactional_ids = {t.producer_id: t.transactional_id for t in await admin.list_transactions(producer_ids=producer_ids)}

    async def describe(transactional_id: str) -> TransactionDescription | None:
        try:
            return (await admin.describe_transactions(transactional_id))[transactional_id]
        except KafkaError as exc:
            if getattr(exc, "errno", None) == TRANSACTIONAL_ID_NOT_FOUND:  # forgotten since it was listed
                return None
            raise

    ids = sorted(set(transactional_ids.values()))
    described = dict(zip(ids, await asyncio.gather(*(describe(i) for i in ids))))
    hanging = []
    for topic, partition, producer in candidates:
        transactional_id = transactional_ids.get(producer.producer_id)
        description = described.get(transactional_id) if transactional_id is not None else None
        if description is None or (topic, partition) not in description.partitions:
            hanging.append((topic, partition, producer))
    return hanging


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
