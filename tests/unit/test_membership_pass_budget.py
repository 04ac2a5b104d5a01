"""A controller whose moves the store holds up keeps its own session: the pass is cut short,
the heartbeat goes on, and the moves are made once the store lets them through."""

from __future__ import annotations

import asyncio
import time

from diskless.broker.cluster.membership import ClusterView, Membership, MembershipSettings
from metadata.sqlite import SqliteMetadataStore


class HeldMoves(SqliteMetadataStore):
    """The SQLite store, with partition moves held until `released` (as rows locked by a
    transaction of a broker cut off from PostgreSQL hold them)."""

    released: asyncio.Event

    async def set_partition_leaders(self, topic, moves):  # type: ignore[no-untyped-def, override]
        await self.released.wait()
        return await super().set_partition_leaders(topic, moves)


async def test_a_held_up_controller_pass_does_not_let_the_session_lapse(tmp_path) -> None:
    store = await HeldMoves.open(str(tmp_path / "metadata.db"))
    store.released = asyncio.Event()
    try:
        await store.create_topic("t", 2, {})
        views: list[ClusterView] = []

        async def apply(view: ClusterView) -> None:
            views.append(view)

        async def fenced() -> None:
            raise AssertionError("the session lapsed: every partition was given up")

        settings = MembershipSettings(node_id=1, host="127.0.0.1", port=9092, rack=None, incarnation="a",
                                      session_timeout_ms=1000, heartbeat_interval_ms=100)  # fmt: skip
        membership = Membership(store, settings, apply, fenced)
        await asyncio.wait_for(membership.join(), 5)  # its first pass is held, and cut short
        assert membership.may_write()  # within its budget: the session is still valid (not a wall-clock bound: CI is busy)
        assert {key: lead.leader_id for key, lead in views[-1].leaders.items()} == {("t", 0): None, ("t", 1): None}
        membership.start()
        try:
            # Held for three session timeouts: the session stays valid throughout.
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                assert membership.may_write()
                await asyncio.sleep(0.05)
            store.released.set()
            while {lead.leader_id for lead in membership.view.leaders.values()} != {1}:
                assert time.monotonic() < deadline + 5.0, membership.view.leaders
                await asyncio.sleep(0.05)
            assert membership.may_write()
        finally:
            await membership.stop()
    finally:
        await store.close()
