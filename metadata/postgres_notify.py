"""Cluster changes pushed by PostgreSQL: LISTEN on the channel every cluster write NOTIFYs.

Every transaction that changes who is in the cluster or who leads what (a broker registering
or leaving, a leader moving, a topic made, grown or deleted) ends with `pg_notify(CHANNEL)`,
delivered to every listener when it commits. A broker listening hears a leader move within a
round trip instead of at its next heartbeat: a handed-over partition opens on its new leader
without waiting out a heartbeat interval at each step (leaver, controller, new leader).

Best effort by design: the heartbeat's reads stay the source of truth, so a notification lost
with a broken connection costs at most one heartbeat interval. The listener holds one
connection of its own (outside the pool: LISTEN is session state) and reconnects with backoff,
one log line when it is lost and one when it is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

CHANNEL = "diskless_cluster"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
_MAX_BACKOFF_S = 5.0


class ClusterChangeListener:
    def __init__(self, dsn: str, connect_timeout_s: float, changed: Callable[[], None]) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._changed = changed
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metadata-cluster-changes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        backoff_s = 0.1
        lost = False
        while True:
            connection: Any = None
            try:
                connection = await asyncpg.connect(self._dsn, timeout=self._connect_timeout_s)
                closed = asyncio.Event()
                connection.add_termination_listener(lambda _conn: closed.set())
                await connection.add_listener(CHANNEL, lambda *_: self._changed())
                if lost:
                    log.info("listening for cluster changes again")
                    lost = False
                backoff_s = 0.1
                self._changed()  # whatever changed while nobody listened
                await closed.wait()
                log.warning("the connection listening for cluster changes closed; reconnecting")
                lost = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not lost:
                    log.warning("not listening for cluster changes (%s); heartbeats still see them, later", exc)
                    lost = True
            finally:
                if connection is not None:
                    connection.terminate()
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
