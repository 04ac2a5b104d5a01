"""How many partitions one request may create, and one broker may hold: the decision, no I/O.

Kafka's controller refuses a CreateTopics or CreatePartitions that would add more than
MAX_PARTITIONS_PER_BATCH (10,000) partitions with PolicyViolationException, "Excessively large
number of partitions per request." (ReplicationControlManager). Here the bound is a setting,
`max.partitions.per.request` (default 10,000, Kafka's constant), checked per topic created or
grown, and a broker-wide `max.partitions` (no Kafka name; default no limit) bounds the total.
Both are checked before anything is written.
"""

from __future__ import annotations

from metadata.errors import InvalidPartitions

MAX_PARTITIONS_PER_REQUEST = 10_000  # Kafka's MAX_PARTITIONS_PER_BATCH
MAX_PARTITIONS = 2**31 - 1


class PartitionPolicyViolation(InvalidPartitions):
    """A partition limit refused the change: answered POLICY_VIOLATION, as Kafka does (errors.py
    lists it before its base, InvalidPartitions)."""


def check_partition_limits(
    topic: str, current_partitions: int | None, requested_partitions: int, broker_partitions: int,
    *, max_partitions_per_request: int, max_partitions: int,
) -> None:  # fmt: skip
    """Raise PartitionPolicyViolation if growing `topic` from `current_partitions` (None: a new
    topic) to `requested_partitions` passes a limit; `broker_partitions` is today's total."""
    added = requested_partitions - (current_partitions or 0)
    if added > max_partitions_per_request:
        raise PartitionPolicyViolation(
            topic, current_partitions, requested_partitions,
            f"Excessively large number of partitions per request ({added} > max.partitions.per.request {max_partitions_per_request})",
        )  # fmt: skip
    if broker_partitions + added > max_partitions:
        raise PartitionPolicyViolation(
            topic, current_partitions, requested_partitions,
            f"the broker would hold {broker_partitions + added} partitions (max.partitions {max_partitions})",
        )  # fmt: skip
