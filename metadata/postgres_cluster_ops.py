"""PostgreSQL operations of the cluster: its id, broker sessions, leases, partition leaders.

Same contract as postgres_ops.py (each runs inside the store's transaction or call); split from
it along the protocol's own seam. Times are the database's clock (clock_timestamp()), the one
clock every broker of the cluster shares.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence

from .errors import BrokerIdInUse, FencedLeaderEpoch
from .model import COORDINATOR_SLOTS, BrokerRegistration, PartitionLeadership, check_partition
from .postgres_notify import NOTIFY
from .postgres_ops import Conn, _partition_row, _topic_row

# --- cluster ------------------------------------------------------------------------------


async def get_or_create_cluster_id(conn: Conn, proposed: str) -> str:
    # Of two brokers inserting at once, the second waits for the first to commit, does
    # nothing, and its next statement (a new snapshot in READ COMMITTED) reads the winner's.
    await conn.execute("INSERT INTO cluster (name, value) VALUES ('cluster.id', $1) ON CONFLICT DO NOTHING", proposed)
    return await conn.fetchval("SELECT value FROM cluster WHERE name = 'cluster.id'")


# --- membership and leadership ------------------------------------------------------------


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


async def register_broker(
    conn: Conn, node_id: int, host: str, port: int, rack: str | None, incarnation: str, session_timeout_ms: int,
    listeners: tuple[tuple[str, str, int], ...] = (),
) -> None:
    row = await conn.fetchrow(
        "SELECT incarnation, session_expires > clock_timestamp() AS alive FROM brokers WHERE node_id = $1 FOR UPDATE", node_id
    )
    if row is not None and row["incarnation"] != incarnation and row["alive"]:
        raise BrokerIdInUse(node_id, row["incarnation"])
    if row is None or row["incarnation"] != incarnation:
        # A new incarnation: fence the old one (store.py). Rows locked in (topic_id, partition)
        # order, as a write-ahead commit locks them, so the two never deadlock.
        await conn.execute(
            "UPDATE partitions p SET leader_epoch = p.leader_epoch + 1"
            " FROM (SELECT topic_id, partition FROM partitions WHERE leader_id = $1 ORDER BY topic_id, partition FOR UPDATE) AS l"
            " WHERE p.topic_id = l.topic_id AND p.partition = l.partition",
            node_id,
        )
        # Its coordinator slots too: the old process's transaction and group writes are
        # conditional on the slot's epoch (the coordinator epoch).
        await conn.execute("UPDATE coordinator_slots SET epoch = epoch + 1 WHERE holder = $1", node_id)
    await conn.execute(
        "INSERT INTO brokers (node_id, host, port, rack, incarnation, session_expires, listeners)"
        " VALUES ($1, $2, $3, $4, $5, clock_timestamp() + $6::interval, $7)"
        " ON CONFLICT (node_id) DO UPDATE SET host = $2, port = $3, rack = $4, incarnation = $5,"
        " session_expires = clock_timestamp() + $6::interval, listeners = $7",
        node_id, host, port, rack, incarnation, _ms(session_timeout_ms), json.dumps(listeners),
    )  # fmt: skip
    await conn.execute(NOTIFY)


async def heartbeat_broker(conn: Conn, node_id: int, incarnation: str, session_timeout_ms: int) -> bool:
    status = await conn.execute(
        "UPDATE brokers SET session_expires = clock_timestamp() + $3::interval"
        " WHERE node_id = $1 AND incarnation = $2 AND session_expires > clock_timestamp()",
        node_id, incarnation, _ms(session_timeout_ms),
    )  # fmt: skip
    return status == "UPDATE 1"


async def unregister_broker(conn: Conn, node_id: int, incarnation: str) -> None:
    await conn.execute("DELETE FROM brokers WHERE node_id = $1 AND incarnation = $2", node_id, incarnation)
    await conn.execute(NOTIFY)


async def list_brokers(conn: Conn) -> list[BrokerRegistration]:
    rows = await conn.fetch(
        "SELECT node_id, host, port, rack, incarnation, listeners, session_expires > clock_timestamp() AS alive,"
        " GREATEST(CEIL(EXTRACT(EPOCH FROM session_expires - clock_timestamp()) * 1000), 0)::bigint AS remaining_ms"
        " FROM brokers ORDER BY node_id"
    )
    return [
        BrokerRegistration(
            r["node_id"], r["host"], r["port"], r["rack"], r["incarnation"], r["alive"], r["remaining_ms"],
            tuple((name, host, port) for name, host, port in json.loads(r["listeners"])),
        )
        for r in rows
    ]


async def acquire_lease(conn: Conn, name: str, holder: int, duration_ms: int) -> bool:
    row = await conn.fetchrow(
        "INSERT INTO leases (name, holder, expires) VALUES ($1, $2, clock_timestamp() + $3::interval)"
        " ON CONFLICT (name) DO UPDATE SET holder = $2, expires = clock_timestamp() + $3::interval"
        " WHERE leases.holder = $2 OR leases.expires <= clock_timestamp() RETURNING holder",
        name, holder, _ms(duration_ms),
    )  # fmt: skip
    return row is not None


async def release_lease(conn: Conn, name: str, holder: int) -> None:
    await conn.execute("DELETE FROM leases WHERE name = $1 AND holder = $2", name, holder)


async def end_sessions(conn: Conn, application_name: str) -> int:
    return await conn.fetchval(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()",
        application_name,
    )


async def lease_holder(conn: Conn, name: str) -> int | None:
    return await conn.fetchval("SELECT holder FROM leases WHERE name = $1 AND expires > clock_timestamp()", name)


async def list_partition_leaders(conn: Conn) -> list[PartitionLeadership]:
    rows = await conn.fetch(
        "SELECT t.name, p.partition, p.leader_id, p.leader_epoch, p.preferred_leader FROM partitions p"
        " JOIN topics t ON t.topic_id = p.topic_id ORDER BY t.name COLLATE \"C\", p.partition"
    )
    return [PartitionLeadership(r["name"], r["partition"], r["leader_id"], r["leader_epoch"], r["preferred_leader"]) for r in rows]


async def set_partition_leader(conn: Conn, topic: str, partition: int, leader_id: int | None, expected_epoch: int) -> int:
    topic_id, current = await _partition_row(conn, topic, partition, "FOR UPDATE")
    if current != expected_epoch:
        raise FencedLeaderEpoch(topic, partition, expected_epoch, current)
    await conn.execute(
        "UPDATE partitions SET leader_id = $3, leader_epoch = leader_epoch + 1 WHERE topic_id = $1 AND partition = $2",
        topic_id, partition, leader_id,
    )  # fmt: skip
    await conn.execute(NOTIFY)
    return current + 1


async def set_partition_leaders(conn: Conn, topic: str, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
    topic_id, num_partitions = await _topic_row(conn, topic)
    for partition, _, _ in moves:
        check_partition(topic, partition, num_partitions)
    first, batch = _first_moves(moves)
    rows = await conn.fetch(
        "UPDATE partitions p SET leader_id = m.leader_id, leader_epoch = p.leader_epoch + 1"
        " FROM unnest($2::int[], $3::int[], $4::int[]) AS m (partition, leader_id, expected_epoch)"
        " WHERE p.topic_id = $1 AND p.partition = m.partition AND p.leader_epoch = m.expected_epoch"
        " RETURNING p.partition, p.leader_epoch",
        topic_id, [m[0] for m in batch], [m[1] for m in batch], [m[2] for m in batch],
    )  # fmt: skip
    return await _moved(conn, moves, first, {r["partition"]: r["leader_epoch"] for r in rows})


async def set_preferred_leaders(conn: Conn, topic: str, preferred: Sequence[tuple[int, int | None]]) -> None:
    topic_id, num_partitions = await _topic_row(conn, topic)
    for partition, _ in preferred:
        check_partition(topic, partition, num_partitions)
    await conn.execute(
        "UPDATE partitions p SET preferred_leader = m.node_id FROM unnest($2::int[], $3::int[]) AS m (partition, node_id)"
        " WHERE p.topic_id = $1 AND p.partition = m.partition",
        topic_id, [p for p, _ in preferred], [n for _, n in preferred],
    )  # fmt: skip
    await conn.execute(NOTIFY)


def _first_moves(moves: Sequence[tuple[int, int | None, int]]) -> tuple[dict[int, int], list[tuple[int, int | None, int]]]:
    """One UPDATE moves each row at most once: a later move of the same row in the same call
    would find its epoch moved by the first, so it answers None, as it would one by one.
    Returns each row's first position in `moves`, and those first moves."""
    first: dict[int, int] = {}
    for position, move in enumerate(moves):
        first.setdefault(move[0], position)
    return first, [moves[position] for position in sorted(first.values())]


async def _moved(conn: Conn, moves: Sequence[tuple[int, int | None, int]], first: dict[int, int], epochs: dict[int, int]) -> list[int | None]:
    """Each move's new epoch (None: not made), NOTIFYing the brokers when any was."""
    if epochs:
        await conn.execute(NOTIFY)
    return [epochs.get(key) if first[key] == position else None for position, (key, _, _) in enumerate(moves)]


# --- coordinator slots -------------------------------------------------------------------------


async def list_coordinator_slots(conn: Conn) -> list[PartitionLeadership]:
    rows = await conn.fetch("SELECT slot, holder, epoch FROM coordinator_slots ORDER BY slot")
    return [PartitionLeadership(COORDINATOR_SLOTS, r["slot"], r["holder"], r["epoch"]) for r in rows]


async def create_coordinator_slots(conn: Conn, count: int) -> int:
    await conn.execute("LOCK TABLE coordinator_slots IN EXCLUSIVE MODE")  # two controllers in a race make one set
    existing = await conn.fetchval("SELECT COUNT(*) FROM coordinator_slots")
    if existing:
        return existing
    await conn.execute("INSERT INTO coordinator_slots (slot) SELECT generate_series(0, $1 - 1)", count)
    await conn.execute(NOTIFY)
    return count


async def set_coordinator_slots(conn: Conn, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
    first, batch = _first_moves(moves)
    rows = await conn.fetch(
        "UPDATE coordinator_slots s SET holder = m.holder, epoch = s.epoch + 1"
        " FROM unnest($1::int[], $2::int[], $3::int[]) AS m (slot, holder, expected_epoch)"
        " WHERE s.slot = m.slot AND s.epoch = m.expected_epoch RETURNING s.slot, s.epoch",
        [m[0] for m in batch], [m[1] for m in batch], [m[2] for m in batch],
    )  # fmt: skip
    return await _moved(conn, moves, first, {r["slot"]: r["epoch"] for r in rows})
