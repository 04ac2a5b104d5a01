"""A classic group's state for the store: what is written when, and a group taken up from it."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from diskless.broker.group import GroupState, SyncGroupResponse
from diskless.broker.group import classic_snapshot

from .test_group_membership import GROUP, SESSION_MS, Harness

STATIC = {"b": "instance-b"}


def stored(h: Harness) -> str:
    """Write what the coordinator asks to be written; the text."""
    unstored = h.c.unstored(GROUP)
    assert unstored is not None
    version, text = unstored
    h.c.stored(h.c.groups[GROUP], version, text)
    assert text is not None
    return text


def test_a_stable_generation_is_written_once_and_a_rebalance_keeps_it() -> None:
    h = Harness()
    assert not h.c.is_unstored(GROUP)
    a, b = h.stable_group("a", "b", instances=STATIC)
    assert h.c.unstored_groups() == [GROUP]
    text = stored(h)
    assert (h.c.is_unstored(GROUP), h.c.unstored_groups()) == (False, [])
    assert h.heartbeat(a, 1, now=SESSION_MS) is ErrorCode.none
    assert not h.c.is_unstored(GROUP)  # heartbeats change nothing kept
    # b's session ends: the group rebalances and the stored generation stays until the next one.
    h.tick(SESSION_MS + 1)
    assert h.overview().state is GroupState.PREPARING_REBALANCE
    assert not h.c.is_unstored(GROUP)
    assert h.join(a, client="a", now=SESSION_MS + 1).response is not None  # a alone: generation 2 at once
    assert h.sync(a, 2, {a: b"only-a"}, now=SESSION_MS + 1).response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"only-a")
    second = stored(h)
    assert json.loads(second)["generation"] == 2 and json.loads(text)["generation"] == 1
    # a leaves: Empty, and its row is to be deleted.
    h.leave((a, None), now=SESSION_MS + 2)
    assert h.overview().state is GroupState.EMPTY
    assert h.c.unstored(GROUP) is not None and h.c.unstored(GROUP)[1] is None
    version, _ = h.c.unstored(GROUP)
    h.c.stored(h.c.groups[GROUP], version, None)
    assert not h.c.is_unstored(GROUP)


def test_a_static_members_new_id_is_written_without_a_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b", instances=STATIC)
    stored(h)
    out = h.join(client="b", instance="instance-b", now=5)  # b restarted: a new member id
    assert out.response is not None and out.response.error_code is ErrorCode.none
    assert h.overview().state is GroupState.STABLE and h.overview().generation_id == 1
    members = {m["instance_id"]: m["member_id"] for m in json.loads(stored(h))["members"]}
    assert members == {None: a, "instance-b": out.response.member_id} and out.response.member_id != b


def test_a_group_taken_up_goes_on_at_its_generation_and_its_sessions_run_from_then() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b", instances=STATIC)
    text = stored(h)
    taker = Harness()
    taker.c.restore(GROUP, text, now_ms=100_000)
    assert not taker.c.is_unstored(GROUP)  # what it was read from
    overview = taker.overview()
    assert (overview.state, overview.generation_id, overview.protocol_type, overview.protocol_name, overview.leader_id) == (
        GroupState.STABLE, 1, "consumer", "range", h.overview().leader_id
    )  # fmt: skip
    assert overview.static_members == {"instance-b": b}
    assert taker.heartbeat(a, 1, now=100_001) is ErrorCode.none
    assert taker.heartbeat(b, 1, instance="instance-b", now=100_001) is ErrorCode.none
    assert taker.heartbeat(b, 1, now=100_001) is ErrorCode.none
    assert taker.heartbeat(a, 0, now=100_001) is ErrorCode.illegal_generation
    taker.c.restore(GROUP, text, now_ms=100_001)  # read again (a second take-up): what is here stays
    assert taker.heartbeat(a, 1, now=100_001) is ErrorCode.none
    # A follower asking again gets its assignment as it was.
    assert taker.sync(b, 1, instance="instance-b", now=100_002).response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"assign-b")
    assert taker.c.validate_offset_commit(GROUP, 1, a, None, 100_002) is ErrorCode.none
    # b never heartbeats again: its session, counted from the take-up's last heartbeat, ends.
    assert taker.heartbeat(a, 1, now=100_000 + SESSION_MS) is ErrorCode.none
    taker.tick(100_001 + SESSION_MS)
    assert taker.overview().state is GroupState.PREPARING_REBALANCE
    assert taker.overview().member_ids == (a,)


@pytest.mark.parametrize("text", [
    "", "[]", '{"version":1,"protocol":"classic"}', '{"version":2,"protocol":"classic","members":[]}',
    '{"version":1,"protocol":"classic","generation":1,"protocol_type":"consumer","protocol_name":"range","leader":"x","members":[]}',
])  # fmt: skip
def test_unreadable_state_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        classic_snapshot.from_text(GROUP, text, 0)


def test_a_member_without_the_groups_protocol_is_refused() -> None:
    h = Harness()
    h.stable_group("a")
    data = json.loads(stored(h))
    data["protocol_name"] = "roundrobin"
    with pytest.raises(ValueError, match="malformed"):
        classic_snapshot.from_text(GROUP, json.dumps(data), 0)


def test_only_classic_state_is_classic() -> None:
    h = Harness()
    h.stable_group("a")
    assert classic_snapshot.is_classic(stored(h))
    assert not classic_snapshot.is_classic('{"version":1,"group_epoch":3}')
    assert not classic_snapshot.is_classic("not json")


def test_a_write_that_lands_after_the_group_was_replaced_records_nothing() -> None:
    h = Harness()
    h.stable_group("a")
    version, text = h.c.unstored(GROUP)
    written = h.c.groups[GROUP]
    h.leave((h.overview().member_ids[0], None), now=1)
    assert h.c.delete_group(GROUP, 2) is ErrorCode.none
    h.stable_group("b")  # the same id, a new group, at the same version
    h.c.stored(written, version, text)
    assert h.c.is_unstored(GROUP)  # the new group's state is still to be written
