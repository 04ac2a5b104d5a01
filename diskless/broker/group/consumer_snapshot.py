"""A KIP-848 consumer group's state as the text the metadata store keeps (sans-IO).

Kafka writes a consumer group's metadata, members, target assignment and current assignments
to __consumer_offsets and replays them when a coordinator takes the partition over; here the
coordinator writes the whole group as one JSON document before it answers the heartbeat that
changed it, and a new coordinator reads it back. Partition owners and static members are
derived from the members on reading; timers are not kept (a restored member's session and
rebalance timeout start again when the group is read).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from .consumer_group import ConsumerGroup, ConsumerMember, MemberState

VERSION = 1


def to_text(group: ConsumerGroup) -> str:
    return json.dumps({
        "version": VERSION,
        "group_epoch": group.group_epoch,
        "target_epoch": group.target_epoch,
        "assignor": group.assignor_name,
        "members": [member_state(m) for m in group.members.values()],
        "target": {member_id: _partitions(a) for member_id, a in group.target.items()},
        "subscription": {name: [str(topic_id), n] for name, (topic_id, n) in group.subscription_metadata.items()},
    }, separators=(",", ":"))  # fmt: skip


def from_text(group_id: str, text: str) -> ConsumerGroup:
    """The group `to_text` wrote; ValueError if the text is not such a group."""
    try:
        data = json.loads(text)
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')} of a consumer group's state is not {VERSION}")
        group = ConsumerGroup(
            group_id, group_epoch=int(data["group_epoch"]), target_epoch=int(data["target_epoch"]), assignor_name=data["assignor"],
            target={member_id: _read_partitions(a) for member_id, a in data["target"].items()},
            subscription_metadata={name: (uuid.UUID(topic_id), int(n)) for name, (topic_id, n) in data["subscription"].items()},
        )  # fmt: skip
        for fields in data["members"]:
            member = _read_member(fields)
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            group.claim(member)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"consumer group {group_id}'s stored state is malformed: {exc!r}") from None
    return group


def member_state(m: ConsumerMember) -> dict[str, Any]:
    """What is kept of a member (the coordinator compares it to tell whether a heartbeat
    changed anything)."""
    return {
        "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "client_host": m.client_host,
        "rack_id": m.rack_id, "rebalance_timeout_ms": m.rebalance_timeout_ms, "topics": list(m.subscribed_topic_names),
        "regex": m.subscribed_topic_regex, "assignor": m.server_assignor, "epoch": m.member_epoch,
        "previous_epoch": m.previous_member_epoch, "state": m.state.value,
        "assigned": _partitions(m.assigned), "revoking": _partitions(m.pending_revocation),
    }  # fmt: skip


def _read_member(f: Mapping[str, Any]) -> ConsumerMember:
    return ConsumerMember(
        f["member_id"], f["instance_id"], f["client_id"], f["client_host"], rack_id=f["rack_id"],
        rebalance_timeout_ms=int(f["rebalance_timeout_ms"]), subscribed_topic_names=tuple(f["topics"]),
        subscribed_topic_regex=f["regex"], server_assignor=f["assignor"], member_epoch=int(f["epoch"]),
        previous_member_epoch=int(f["previous_epoch"]), state=MemberState(f["state"]),
        assigned=_read_partitions(f["assigned"]), pending_revocation=_read_partitions(f["revoking"]),
    )  # fmt: skip


def _partitions(assignment: Mapping[uuid.UUID, frozenset[int]]) -> dict[str, list[int]]:
    return {str(topic_id): sorted(partitions) for topic_id, partitions in assignment.items()}


def _read_partitions(data: Mapping[str, list[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {uuid.UUID(topic_id): frozenset(int(p) for p in partitions) for topic_id, partitions in data.items()}


__all__ = ["from_text", "member_state", "to_text"]
