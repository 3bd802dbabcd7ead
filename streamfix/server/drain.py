"""A stop that a load balancer can follow: SIGTERM drains.

On the first SIGTERM the proxy starts draining (``Proxy.draining``):
``/readyz`` answers 503 at once, while the listener stays open and new
requests are still served for ``drain_grace`` seconds, the time a load
balancer's health checks take to stop sending. Then the listener closes
(aiohttp's graceful exit) and the replies in flight have up to
``drain_timeout`` seconds to finish (``web.run_app``'s
``shutdown_timeout``, set from it by ``streamfix serve``); the process
exits 0. A second SIGTERM ends the process at once (exit 0: it was asked
to stop). SIGINT stops as before, without the grace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web
from aiohttp.web_runner import GracefulExit

from .proxy import PROXY

log = logging.getLogger("streamfix.server")


def _graceful_exit() -> None:
    raise GracefulExit


class Drain:
    """The SIGTERM handler of one running app."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.timer: asyncio.TimerHandle | None = None

    def sigterm(self) -> None:
        if self.app[PROXY].draining is not None:
            log.warning("second SIGTERM: stopping now")
            logging.shutdown()
            os._exit(0)
        self.begin()

    def begin(self) -> None:
        """Draining from now: ``/readyz`` 503, the listener closed after the
        grace (a second call changes nothing)."""
        proxy = self.app[PROXY]
        if proxy.draining is not None:
            return
        grace = proxy.cfg.drain_grace
        proxy.draining = "SIGTERM"
        log.info(
            "SIGTERM: draining (/readyz answers 503; new requests taken %g s more, then "
            "up to %g s for those in flight)",
            grace,
            proxy.cfg.drain_timeout,
        )
        self.timer = asyncio.get_running_loop().call_later(grace, _graceful_exit)


async def on_sigterm(app: web.Application) -> None:
    """An ``on_startup`` hook: SIGTERM drains (in place of aiohttp's
    immediate graceful exit, whose handler ``web.run_app`` has put in)."""
    term = getattr(signal, "SIGTERM", None)
    if term is None:
        return
    drain = Drain(app)
    try:
        asyncio.get_running_loop().add_signal_handler(term, drain.sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        return
