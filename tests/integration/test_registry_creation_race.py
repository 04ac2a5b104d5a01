"""A new topic's partitions are open when CreateTopics answers, even when the controller gave
them leaders first: it saw them leaderless between the topic's row and the creating broker's
leadership write (CI: ListOffsets right after a creation answered NOT_LEADER_OR_FOLLOWER). A
real SQLite store and bucket directory, and the broker's own Registry."""

from __future__ import annotations

import uuid
from pathlib import Path

from .test_registry_unseen_topics import registry_of

ME, OTHER = 2, 7


async def test_partitions_the_controller_gave_leaders_first_open_here_if_they_are_mine(tmp_path: Path) -> None:
    async with registry_of(tmp_path, ME) as (registry, store):
        real = store.set_partition_leaders
        raced: list[list[int | None]] = []

        async def controller_first(topic: str, moves: list[tuple[int, int | None, int]]) -> list[int | None]:
            store.set_partition_leaders = real  # type: ignore[method-assign]
            raced.append(await real(topic, [(0, ME, 0), (1, OTHER, 0)]))  # the controller's pass
            return await real(topic, moves)

        store.set_partition_leaders = controller_first  # type: ignore[method-assign]
        name = f"t-{uuid.uuid4().hex[:8]}"
        await registry.create_topic(name, 3, {})

        assert raced == [[1, 1]]
        led = {index: (leader.leader_epoch if (leader := registry.leader(name, index)) else None) for index in range(3)}
        # 0: the controller's choice (this broker), at its epoch; 1: another broker's, not
        # opened here; 2: this broker's own write.
        assert led == {0: 1, 1: None, 2: 1}
        by_partition = {(p.partition, p.leader_id, p.leader_epoch) for p in await store.list_partition_leaders() if p.topic == name}
        assert by_partition == {(0, ME, 1), (1, OTHER, 1), (2, ME, 1)}
        for index in (0, 2):
            assert registry.leader(name, index).high_watermark == 0
