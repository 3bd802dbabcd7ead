"""The operator page's last hour, summed over the fleet (``--state`` with
``--ui``): every replica's and worker's page shows the same counts.

Each process keeps counting as ``ui/activity.Activity`` does (one dict
lookup per reply, nothing on the request path waits on the store) and
keeps what it counted since its last push apart (``pending``). Every
``PUSH_EVERY`` seconds, in the background, it adds those counts to the
store's and reads the fleet's sums back (two pipelined round trips); the
page shows the sums read plus what was counted here since. So another
replica's repairs and refusals reach this page within ``PUSH_EVERY``
seconds (twice that at most). Keys, under the fleet's prefix, each
expiring once out of the hour::

    PREFIX activity:repairs:LABEL:MINUTE   a hash: repair kind -> count
    PREFIX activity:limited:TENANT:MINUTE  a hash: limit -> refusals
    PREFIX activity:labels                 a set of "repairs|LABEL", "limited|TENANT"

While the store is down the page shows this process's own counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web

from ..ui.activity import MINUTES, NOT_REPAIRS_PREFIX, Activity
from .store import StoreDown, wind_down

log = logging.getLogger("streamfix.ui")

#: Seconds between two pushes of this process's counts (and reads of the fleet's).
PUSH_EVERY = 5.0
#: Seconds a minute's counts stay in the store (the hour, and a margin).
TTL = (MINUTES + 2) * 60
#: Labels read back at most (the table bounds them; a backstop).
MAX_LABELS = 1024

#: (kind of count, label) -> minute -> counts.
Counts = dict[tuple[str, str], dict[int, dict[str, int]]]


def _add(into: Counts, what: tuple[str, str], minute: int, counts: Mapping[str, int]) -> None:
    bucket = into.setdefault(what, {}).setdefault(minute, {})
    for kind, n in counts.items():
        bucket[kind] = bucket.get(kind, 0) + n


class FleetActivity(Activity):
    """``Activity`` whose page shows the fleet's counts (the module doc)."""

    def __init__(self, url: str, prefix: str = "streamfix:") -> None:
        super().__init__()
        from .shared import RedisStore

        self._redis = RedisStore(url, prefix)
        self.prefix = prefix + "activity:"
        #: Counted here since the last push.
        self.pending: Counts = {}
        #: The fleet's sums as last read (None: never read; own counts shown).
        self.fleet: Counts | None = None
        self.down = False

    # -- counting (the request path: no I/O) --------------------------------

    def report(
        self,
        model: str,
        counts: Mapping[str, int],
        unrecognised: list[str] | tuple[str, ...] = (),
        now: float | None = None,
    ) -> None:
        super().report(model, counts, unrecognised, now)
        kept = {k: n for k, n in counts.items() if n and not k.startswith(NOT_REPAIRS_PREFIX)}
        if kept:
            minute = int((time.time() if now is None else now) // 60)
            _add(self.pending, ("repairs", model), minute, kept)

    def refused(self, tenant: str, limit: str, now: float | None = None) -> None:
        super().refused(tenant, limit, now)
        minute = int((time.time() if now is None else now) // 60)
        _add(self.pending, ("limited", tenant), minute, {limit: 1})

    # -- what the page reads ------------------------------------------------

    def _hour(self, what: tuple[str, str], minute: int) -> list[dict[str, int]]:
        out: list[dict[str, int]] = []
        seen = (self.fleet or {}).get(what, {})
        mine = self.pending.get(what, {})
        for m in range(minute - MINUTES + 1, minute + 1):
            counts = dict(seen.get(m, {}))
            for kind, n in mine.get(m, {}).items():
                counts[kind] = counts.get(kind, 0) + n
            out.append(counts)
        return out

    def last_hour(self, model: str, now: float | None = None) -> list[dict[str, int]]:
        if self.fleet is None:
            return super().last_hour(model, now)
        return self._hour(("repairs", model), int((time.time() if now is None else now) // 60))

    def limited_last_hour(self, now: float | None = None) -> dict[str, dict[str, int]]:
        if self.fleet is None:
            return super().limited_last_hour(now)
        minute = int((time.time() if now is None else now) // 60)
        tenants = {t for kind, t in (*self.fleet, *self.pending) if kind == "limited"}
        out: dict[str, dict[str, int]] = {}
        for tenant in sorted(tenants):
            total: dict[str, int] = {}
            for counts in self._hour(("limited", tenant), minute):
                for limit, n in counts.items():
                    total[limit] = total.get(limit, 0) + n
            if total:
                out[tenant] = total
        return out

    # -- the store (in the background) --------------------------------------

    async def sync(self, now: float | None = None) -> None:
        """This process's counts added to the store's, the fleet's read."""
        now = time.time() if now is None else now
        minute = int(now // 60)
        pushing, self.pending = self.pending, {}
        client = self._redis.client
        labels_key = self.prefix + "labels"
        try:
            async with client.pipeline(transaction=False) as pipe:
                for (kind, label), minutes in pushing.items():
                    pipe.sadd(labels_key, f"{kind}|{label}")
                    for m, counts in minutes.items():
                        key = f"{self.prefix}{kind}:{label}:{m}"
                        for name, n in counts.items():
                            pipe.hincrby(key, name, n)
                        pipe.expire(key, TTL)
                pipe.expire(labels_key, TTL)
                pipe.smembers(labels_key)
                out = await pipe.execute()
            labels = sorted(raw.decode() for raw in out[-1])[:MAX_LABELS]
            wanted = [tuple(label.split("|", 1)) for label in labels if "|" in label]
            async with client.pipeline(transaction=False) as pipe:
                for kind, label in wanted:
                    for m in range(minute - MINUTES + 1, minute + 1):
                        pipe.hgetall(f"{self.prefix}{kind}:{label}:{m}")
                read = await pipe.execute()
        except self._redis._errors as exc:
            for what, minutes in pushing.items():  # counted again at the next push
                for m, counts in minutes.items():
                    _add(self.pending, what, m, counts)
            if not self.down:
                log.warning("ui: the fleet's counts are unreachable (%s): own counts shown", exc)
            self.down = True
            self.fleet = None
            raise StoreDown(str(exc)) from exc
        self.down = False
        fleet: Counts = {}
        at = 0
        for kind, label in wanted:
            for m in range(minute - MINUTES + 1, minute + 1):
                raw: Any = read[at]
                at += 1
                if raw:
                    fleet.setdefault((kind, label), {})[m] = {
                        k.decode(): int(v) for k, v in raw.items()
                    }
        self.fleet = fleet

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """While the app runs: ``sync`` every ``PUSH_EVERY`` seconds (and
        once more as it stops, so that its last counts are not lost)."""
        task = asyncio.get_running_loop().create_task(self._run())
        try:
            yield
        finally:
            await wind_down(task, bool(self.pending), self.sync, self._redis)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(StoreDown):
                await self.sync()
            await asyncio.sleep(PUSH_EVERY)
