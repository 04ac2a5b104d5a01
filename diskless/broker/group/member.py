"""One member of a classic group (Kafka's ClassicGroupMember), mutable, owned by its group.

`awaiting_join` / `awaiting_sync` hold the ticket of the member's parked JoinGroup /
SyncGroup (see responses.py) instead of Kafka's futures. Only the coordinator's task touches
a member.
"""

from __future__ import annotations

from collections.abc import Iterable

Protocols = tuple[tuple[str, bytes], ...]


class Member:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols  # in the member's order of preference
        self.assignment = assignment
        self.awaiting_join: int | None = None
        self.awaiting_sync: int | None = None
        # A member added in this rebalance: it cannot heartbeat yet, so nothing else keeps
        # it alive; it expires after the new-member join timeout even while awaiting join.
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise KeyError(protocol_name)

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same metadata, same order: a rejoin that changes nothing."""
        return protocols == self.protocols

    def vote(self, candidates: Iterable[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        allowed = set(candidates)
        for name, _ in self.protocols:
            if name in allowed:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(allowed)}")

    def has_satisfied_heartbeat(self) -> bool:
        # Members parked in JoinGroup/SyncGroup are alive by definition; new ones are not,
        # since their join may have been abandoned by a client that never got a member id.
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None
