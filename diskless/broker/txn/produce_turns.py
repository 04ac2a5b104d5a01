"""Produce requests of one transactional id that must be verified first go one at a time.

A transactional batch that opens its producer's transaction in a partition led here is
verified with the transaction coordinator first (KIP-890 part 1); when the coordinator is
another broker, that is an inter-broker request, each on its own connection, so two pipelined
Produce requests of the producer (the first two batches of a partition, say) could have their
answers back in either order and append out of order: the second would be refused as
OUT_OF_ORDER_SEQUENCE_NUMBER, which fails the transaction. So such a request takes a turn: it
waits until every earlier one of the same transactional id has appended, then looks again at
what still needs verifying (the earlier one may have opened the transaction in its partitions).

Only the event-loop task uses it.
"""

from __future__ import annotations

import asyncio


class ProduceTurns:
    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}  # transactional id -> the newest turn

    def take(self, transactional_id: str) -> tuple[asyncio.Future[None], asyncio.Future[None] | None]:
        """A new turn, and the one before it to wait for (None: nothing to wait for). Every
        turn taken must be ended (`end`), whatever happens."""
        before = self._last.get(transactional_id)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[transactional_id] = mine
        return mine, before

    def end(self, transactional_id: str, turn: asyncio.Future[None]) -> None:
        if not turn.done():
            turn.set_result(None)
        if self._last.get(transactional_id) is turn:
            del self._last[transactional_id]

    def __len__(self) -> int:
        return len(self._last)
