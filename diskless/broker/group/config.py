"""The few broker settings the classic group coordinator decides with.

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

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group_min_session_timeout_ms must not exceed group_max_session_timeout_ms")
        if self.group_initial_rebalance_delay_ms < 0 or self.group_new_member_join_timeout_ms < 0:
            raise ValueError("delays must be non-negative")
        if self.group_max_size < 1:
            raise ValueError("group_max_size must be at least 1")
