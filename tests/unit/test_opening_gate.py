"""The gate that holds requests for partitions being opened: released in arrival order, a
newcomer queued behind those not yet resumed, a timeout that lets one go on as it stands."""

from __future__ import annotations

import asyncio

from diskless.broker.opening_gate import OpeningGate

P0, P1 = ("t", 0), ("t", 1)


async def test_nothing_opening_returns_without_yielding() -> None:
    gate = OpeningGate()
    order: list[str] = []

    async def request() -> None:
        await gate.until_open([P0], 1.0)
        order.append("request")

    task = asyncio.ensure_future(request())
    asyncio.get_running_loop().call_soon(order.append, "later callback")
    await task
    # The request ran to its end in its first step, before a callback scheduled after it.
    assert order == ["request", "later callback"]


async def test_held_requests_go_on_in_arrival_order_and_a_newcomer_waits_behind_them() -> None:
    gate = OpeningGate()
    gate.begin([P0, P1])
    appended: list[str] = []

    async def request(name: str, keys) -> None:
        await gate.until_open(keys, 10.0)
        appended.append(name)  # what the produce handler does in the same step: append

    first = asyncio.ensure_future(request("first", [P0]))
    second = asyncio.ensure_future(request("second", [P1]))
    third = asyncio.ensure_future(request("third", [P0]))
    await asyncio.sleep(0)  # all three are now held
    assert gate.held == 3 and appended == []
    gate.end([P1])  # the second's partition opens, but the first is still held: nobody goes
    await asyncio.sleep(0)
    assert appended == [] and gate.held == 3
    gate.end([P0])
    # Released, not yet resumed: a newcomer for an open partition must queue behind them.
    newcomer = asyncio.ensure_future(request("newcomer", [P0]))
    await asyncio.gather(first, second, third, newcomer)
    assert appended == ["first", "second", "third", "newcomer"]
    assert gate.held == 0
    late = asyncio.ensure_future(request("late", [P0]))
    await late
    assert appended[-1] == "late"


async def test_a_request_held_too_long_goes_on_and_frees_those_behind_it() -> None:
    gate = OpeningGate()
    gate.begin([P0])
    appended: list[str] = []

    async def request(name: str, keys, timeout_s: float) -> None:
        await gate.until_open(keys, timeout_s)
        appended.append(name)

    stuck = asyncio.ensure_future(request("stuck", [P0], 0.05))
    behind = asyncio.ensure_future(request("behind", [P1], 10.0))
    await asyncio.wait_for(asyncio.gather(stuck, behind), 5.0)
    assert appended == ["stuck", "behind"]  # P0 never opened: the timeout let both go on
    assert gate.held == 0
