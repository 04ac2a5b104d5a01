"""The classic consumer group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), sans-IO.

See coordinator.py for how a shell drives it and responses.py for parked requests.
"""

from .config import GroupConfig
from .coordinator import GroupCoordinator, GroupOverview
from .group import GroupState, IllegalGroupTransition
from .responses import (
    NO_GENERATION,
    NO_LEADER,
    UNKNOWN_MEMBER_ID,
    Completion,
    GroupDescription,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    MemberDescription,
    Outcome,
    SyncGroupResponse,
)

__all__ = [
    "NO_GENERATION",
    "NO_LEADER",
    "UNKNOWN_MEMBER_ID",
    "Completion",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupOverview",
    "GroupState",
    "IllegalGroupTransition",
    "JoinGroupMember",
    "JoinGroupResponse",
    "LeaveGroupResponse",
    "LeaveMemberResponse",
    "ListedGroup",
    "MemberDescription",
    "Outcome",
    "SyncGroupResponse",
]
