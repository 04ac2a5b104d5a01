"""The few broker settings the group coordinators (classic and KIP-848) decide with.

Field names are Kafka's broker configs with dots turned into underscores; defaults are
Kafka's. The CLI builds one `GroupConfig`; the coordinator never reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # How long the first rebalance of an Empty group waits for more members (KIP-134).
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = _INT32_MAX
    # A member added by JoinGroup has no member id to heartbeat with until the join phase
    # ends; its parked JoinGroup expires after this long (Kafka's NewMemberJoinTimeoutMs).
    group_new_member_join_timeout_ms: int = 300_000
    # KIP-848's consumer groups (group.consumer.*): session and heartbeat of members, and the
    # ranges a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms may take.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_max_size: int = _INT32_MAX
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group_min_session_timeout_ms must not exceed group_max_session_timeout_ms")
        if self.group_initial_rebalance_delay_ms < 0 or self.group_new_member_join_timeout_ms < 0:
            raise ValueError("delays must be non-negative")
        if self.group_max_size < 1 or self.group_consumer_max_size < 1:
            raise ValueError("group_max_size and group_consumer_max_size must be at least 1")
        if not (
            self.group_consumer_min_session_timeout_ms
            <= self.group_consumer_session_timeout_ms
            <= self.group_consumer_max_session_timeout_ms
        ):
            raise ValueError("group_consumer_session_timeout_ms must lie within its min and max")
        if not (
            self.group_consumer_min_heartbeat_interval_ms
            <= self.group_consumer_heartbeat_interval_ms
            <= self.group_consumer_max_heartbeat_interval_ms
        ):
            raise ValueError("group_consumer_heartbeat_interval_ms must lie within its min and max")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError("group_consumer_heartbeat_interval_ms must be below group_consumer_session_timeout_ms")
        if not self.group_consumer_assignors or set(self.group_consumer_assignors) - {"uniform", "range"}:
            raise ValueError("group_consumer_assignors must name uniform and/or range")
