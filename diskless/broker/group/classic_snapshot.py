"""A classic group's state as the text the metadata store keeps (sans-IO).

Kafka writes a classic group's metadata (generation, protocol, leader, each member with its
subscription and assignment) to __consumer_offsets when a generation's assignment is in
(SyncGroup of the leader) and when the group empties, and a coordinator taking the partition
over loads the group Stable: its members heartbeat on at their generation, no rebalance.
Here the coordinator writes the same as one JSON document in the row KIP-848 groups use
(`"protocol": "classic"` tells them apart) and a new coordinator reads it back. A group that is
rebalancing keeps the last Stable generation stored, as in Kafka; members' sessions start
again when the group is read.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .group import ClassicGroup, GroupState
from .member import Member

VERSION = 1
PROTOCOL = "classic"


def to_text(group: ClassicGroup) -> str:
    """A Stable group's state."""
    assert group.state is GroupState.STABLE, group.state
    return json.dumps({
        "version": VERSION,
        "protocol": PROTOCOL,
        "generation": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id,
        "members": [_member(m) for m in group.members.values()],
    }, separators=(",", ":"))  # fmt: skip


def is_classic(text: str) -> bool:
    """Whether stored group state is a classic group's (else a KIP-848 group's)."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("protocol") == PROTOCOL


def from_text(group_id: str, text: str, now_ms: int) -> ClassicGroup:
    """The Stable group `to_text` wrote; ValueError if the text is not such a group."""
    try:
        data = json.loads(text)
        if data.get("version") != VERSION or data.get("protocol") != PROTOCOL:
            raise ValueError(f"version {data.get('version')} of a classic group's state is not {VERSION}")
        group = ClassicGroup(group_id, now_ms)
        for fields in data["members"]:
            group.add(_read_member(fields))
        if not group.members or data["leader"] not in group.members:
            raise ValueError(f"classic group {group_id}'s stored leader {data['leader']!r} is not among its members")
        group.generation_id = int(data["generation"])
        group.protocol_type = data["protocol_type"]
        group.protocol_name = data["protocol_name"]
        group.leader_id = data["leader"]
        group.state = GroupState.STABLE
        for member in group.members.values():
            member.metadata(group.protocol_name)  # KeyError if a member does not speak it
    except (KeyError, TypeError, AttributeError, AssertionError, ValueError) as exc:
        raise ValueError(f"classic group {group_id}'s stored state is malformed: {exc!r}") from None
    return group


def _member(m: Member) -> dict[str, Any]:
    return {
        "member_id": m.member_id, "instance_id": m.group_instance_id, "client_id": m.client_id, "client_host": m.client_host,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "session_timeout_ms": m.session_timeout_ms,
        "protocol_type": m.protocol_type, "protocols": [[name, _b64(metadata)] for name, metadata in m.protocols],
        "assignment": _b64(m.assignment),
    }  # fmt: skip


def _read_member(f: dict[str, Any]) -> Member:
    return Member(
        f["member_id"], f["instance_id"], f["client_id"], f["client_host"], int(f["rebalance_timeout_ms"]),
        int(f["session_timeout_ms"]), f["protocol_type"], tuple((name, _bytes(metadata)) for name, metadata in f["protocols"]),
        _bytes(f["assignment"]),
    )  # fmt: skip


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


__all__ = ["from_text", "is_classic", "to_text"]
