"""What the coordinator answers: plain values mirroring Kafka's response messages.

Parked requests. JoinGroup waits until the join phase ends and SyncGroup waits until the
leader's assignment arrives. The core has no futures: such a call returns an `Outcome` with
`response=None` and a `ticket`, and the answer arrives later as a `Completion` carrying that
ticket, returned by whichever call (another member's request, or `tick`) finished the wait.
The shell keeps `ticket -> waiter` and resolves waiters from every `Outcome.completions` and
every `tick` result. A call never returns a Completion for its own ticket: if its wait ends
within the call, the answer is in `response`.

A Completion whose `response` is None means Kafka would never answer that request (a newer
JoinGroup/SyncGroup of the same member superseded it, or the member was removed while it
waited): the shell drops the waiter without writing a response.

`None` protocol_type/protocol_name stand for Kafka's null; JoinGroup < v7 and SyncGroup < v5
have no nullable string there, so the shell writes "" for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

R = TypeVar("R")

NO_GENERATION = -1
NO_LEADER = ""
UNKNOWN_MEMBER_ID = ""


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    """One entry of the member list sent to the leader only."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_LEADER
    skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: ErrorCode
    members: tuple[LeaveMemberResponse, ...] = ()


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups for one group. `protocol_data` is the protocol name, set only when Stable."""

    group_id: str
    error_code: ErrorCode
    group_state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[MemberDescription, ...] = ()
    error_message: str | None = None  # DescribeGroups v6+


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to a request parked earlier under `ticket` (see the module header)."""

    ticket: int
    group_id: str
    member_id: str
    response: JoinGroupResponse | SyncGroupResponse | None


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """Exactly one of `response` (answer now) and `ticket` (answer later) is set."""

    response: R | None
    ticket: int | None = None
    completions: tuple[Completion, ...] = ()
