"""`diskless transactions list|describe`: the transactions the cluster coordinates, as Kafka's
`kafka-transactions.sh list` and `describe --transactional-id` show them, through the Kafka
protocol (ListTransactions, DescribeTransactions; KIP-664), so they work against any broker.

    list       TransactionalId  Coordinator  ProducerId  TransactionState
    describe   CoordinatorId  TransactionalId  ProducerId  ProducerEpoch  TransactionState
               CurrentTransactionStartTimeMs  TransactionDurationMs  TopicPartitions

TransactionDurationMs is now minus the start of the open transaction ("None" outside one, as
Kafka prints it); TopicPartitions are topic-partition, comma-separated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from diskless.client import Admin, KafkaError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
LIST_COLUMNS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)  # fmt: skip
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


def add_commands(commands: Any) -> None:
    transactions = commands.add_parser("transactions", help="list and describe transactions (like kafka-transactions.sh)")
    actions = transactions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every transactional id the coordinators know, with its state")
    listing.add_argument("--state", action="append", default=[], help="only this state (repeatable): Ongoing, CompleteCommit, ...")
    describe = actions.add_parser("describe", help="a transactional id's producer, state and partitions")
    describe.add_argument("--transactional-id", required=True, action="append", dest="transactional_ids", metavar="ID")
    for parser in (listing, describe):
        parser.add_argument("--bootstrap-server", "-b", default=None,
                            help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP}; env DISKLESS_BOOTSTRAP_SERVERS)")  # fmt: skip
    transactions.set_defaults(run_command=run)


def run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or os.environ.get("DISKLESS_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)
    action = {"list": _list, "describe": _describe}[args.action]
    try:
        return asyncio.run(action(args, bootstrap))
    except KafkaError as exc:
        print(f"diskless transactions {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _list(args: argparse.Namespace, bootstrap: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        listed = await admin.list_transactions(states=args.state)
    _print_table(LIST_COLUMNS, [(t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state) for t in listed])
    return 0


async def _describe(args: argparse.Namespace, bootstrap: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        described = await admin.describe_transactions(args.transactional_ids)
    now_ms = int(time.time() * 1000)
    rows = []
    for d in described.values():
        open_ = d.state in OPEN_STATES and d.transaction_start_time_ms >= 0
        rows.append((
            str(d.coordinator_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
            str(d.transaction_start_time_ms) if open_ else "None", str(now_ms - d.transaction_start_time_ms) if open_ else "None",
            ",".join(f"{t}-{p}" for t, p in d.partitions),
        ))  # fmt: skip
    _print_table(DESCRIBE_COLUMNS, rows)
    return 0


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
