"""The operator page's logged-out sessions in the shared store: with
``--state``, a logout on one replica is final on every replica.

``ui/auth.Sessions`` asks ``is_revoked`` on every page request, and
synchronously: that question is answered from this process's copy
(``MemorySessionStore``), never by a round trip. A logout is written
through at once (its own round trip, off the request: the cookie is
cleared and this process refuses it from that instant), and every
``REFRESH`` seconds the copy is replaced by what the store holds, so a
session logged out on another replica opens nothing here at most
``REFRESH`` seconds (and one round trip) later. Keys, under the fleet's
prefix::

    PREFIX ui:revoked      a sorted set: nonce -> wall time it expires
    PREFIX ui:not-before   sessions issued before it are revoked (overflow)

Bounded like the file store: past ``MAX_REVOKED`` logged-out sessions
every session issued so far is revoked (fail closed). While the store is
down, the copy is kept as it was, the logouts made here are kept and
written once it is back (logged once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ..ui.auth import MAX_REVOKED, SESSION_SECONDS, MemorySessionStore
from .store import StoreDown, wind_down

log = logging.getLogger("streamfix.ui")

#: Seconds between two reads of the fleet's logged-out sessions: a logout
#: on another replica is final here within this (and one round trip).
REFRESH = 1.0


class RedisSessionStore(MemorySessionStore):
    """A ``ui/auth.SessionStore`` shared through Redis (see the module doc)."""

    def __init__(self, url: str, prefix: str = "streamfix:", limit: int = MAX_REVOKED) -> None:
        super().__init__(limit)
        from .shared import RedisStore

        self._redis = RedisStore(url, prefix)
        self.key = prefix + "ui:revoked"
        self.not_before_key = prefix + "ui:not-before"
        #: Logouts made here and not yet written: nonce -> until.
        self.pending: dict[str, float] = {}
        self.down = False
        self._wake = asyncio.Event()

    def revoke(self, nonce: str, until: float, now: float) -> None:
        super().revoke(nonce, until, now)  # this process, at once
        self.pending[nonce] = until
        self._wake.set()  # written through now, not at the next refresh

    async def sync(self, now: float | None = None) -> None:
        """One round trip: the logouts made here written, the fleet's read."""
        now = time.time() if now is None else now
        writing = dict(self.pending)
        client = self._redis.client
        try:
            async with client.pipeline(transaction=False) as pipe:
                if writing:
                    pipe.zadd(self.key, writing)
                    pipe.expire(self.key, SESSION_SECONDS)
                pipe.zremrangebyscore(self.key, "-inf", now)
                pipe.zrange(self.key, 0, -1, withscores=True)
                pipe.get(self.not_before_key)
                out = await pipe.execute()
        except self._redis._errors as exc:
            if not self.down:
                log.warning("ui: the shared logged-out sessions are unreachable: %s", exc)
            self.down = True
            raise StoreDown(str(exc)) from exc
        if self.down:
            log.info("ui: the shared logged-out sessions are reachable again")
        self.down = False
        for nonce in writing:
            if self.pending.get(nonce) == writing[nonce]:
                del self.pending[nonce]
        read: list[tuple[bytes, float]] = out[-2]
        raw_not_before: Any = out[-1]
        if raw_not_before:
            self.not_before = max(self.not_before, float(raw_not_before))
        if len(read) > self.limit:  # fail closed, for the whole fleet
            self.not_before = now
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(self.not_before_key, repr(now), ex=SESSION_SECONDS)
                pipe.delete(self.key)
                with contextlib.suppress(*self._redis._errors):
                    await pipe.execute()
            read = []
        fresh = {nonce.decode(): until for nonce, until in read}
        fresh.update(self.pending)
        self.revoked.clear()
        self.revoked.update(fresh)

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """While the app runs: ``sync`` every ``REFRESH`` seconds, and at
        once after a logout here; the first before the app serves (a new
        replica refuses the fleet's logged-out sessions from its start)."""
        with contextlib.suppress(StoreDown, TimeoutError):
            await asyncio.wait_for(self.sync(), 2.0)
        task = asyncio.get_running_loop().create_task(self._run())
        try:
            yield
        finally:
            await wind_down(task, bool(self.pending), self.sync, self._redis)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            with contextlib.suppress(StoreDown):
                await self.sync()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), REFRESH)
