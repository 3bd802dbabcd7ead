"""``streamfix probe`` of one row, started from the operator page.

Off the request path: the POST starts a task and answers at once; the
page shows the row's last result (or that it is running) and refreshes
itself while one runs. Bounded: one probe at a time in the process (a
second is refused while one runs), each at most ``PROBE_SECONDS`` in all
(``server/probe.py`` sends each of its cases streamed and not, one at a
time, on its own connections), the results kept one per row (the rows of the table in
force, by ``UpstreamConfig.identity``). The tasks end with the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from ..probe import Probe, probe
from ..upstream.pool import Upstream

log = logging.getLogger("streamfix.server.ui")

#: Longest one probe from the page may take.
PROBE_SECONDS = 300.0

Identity = tuple[str, str | None, str]


@dataclass
class ProbeRun:
    """One probe of one row: running (``result`` and ``error`` None), done, or failed."""

    row: str
    started: float
    result: Probe | None = None
    error: str | None = None
    ended: float | None = None

    @property
    def running(self) -> bool:
        return self.ended is None


class Probes:
    def __init__(self) -> None:
        self.runs: dict[Identity, ProbeRun] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, up: Upstream) -> bool:
        """Probe ``up`` in the background; False when one already runs."""
        if self.busy:
            return False
        run = self.runs[up.cfg.identity] = ProbeRun(up.name, time.time())
        self._task = asyncio.get_running_loop().create_task(self._run(up, run))
        return True

    async def _run(self, up: Upstream, run: ProbeRun) -> None:
        try:
            async with asyncio.timeout(PROBE_SECONDS):
                run.result = await probe(up.cfg.url, up.cfg.model, up.cfg.api_key)
        except TimeoutError:
            run.error = f"the probe took more than {PROBE_SECONDS:.0f} s"
        except Exception as exc:  # a probe must never take the proxy down
            log.info("probe of %s from the page failed: %s", up.name, type(exc).__name__)
            run.error = f"the probe failed: {type(exc).__name__}"
        finally:
            run.ended = time.time()

    def keep(self, identities: set[Identity]) -> None:
        """Forget the results of rows no longer in the table."""
        for gone in set(self.runs) - identities:
            if not self.runs[gone].running:
                del self.runs[gone]

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        yield
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
