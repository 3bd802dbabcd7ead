"""The state of one proxy app and what every endpoint shares: the
configuration, the upstream pool and its probes, the client session, the
upstream slots, the metrics, and sending a request upstream with the
body budgeted for the upstream chosen.

The endpoints (``chat.py``, ``doors.py``, ``models.py``, ``status.py``)
and the middlewares (``guards.py``) reach it as ``request.app[PROXY]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ..context import UNOPENED_HOLD, Report, ToolSpec
from ..transforms.detect import MATCHER_CACHE, matcher_for
from . import record
from .attempts import AskAgain, count_trim
from .budget import BudgetPolicy, clamp_request, engine_fields, fit_prompt, probe_upstream
from .config import ServerConfig
from .metrics import Metrics
from .upstreams import Upstream, UpstreamPool, forward_headers, send

log = logging.getLogger("streamfix.server")

#: Connections per upstream kept free of chat requests, for the probes.
PROBE_CONNECTIONS = 4

#: How long start-up waits for the first context-window probes.
PROBE_STARTUP_WAIT = 3.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def chain_options(up: Upstream) -> dict[str, Any]:
    """The chain's options for a reply from ``up``: an upstream known to
    reason (configured, or seen reasoning) gets the start of its replies
    held for a reasoning section whose ``<think>`` the prompt opened; for
    others the request decides (``Options.unopened_reasoning_hold``)."""
    return {"unopened_reasoning_hold": UNOPENED_HOLD} if up.info.reasoning else {}


class Proxy:
    """State of one proxy app: config, upstreams, metrics, client session."""

    def __init__(self, config: ServerConfig) -> None:
        if not config.upstreams:
            raise ValueError("at least one upstream is needed")
        self.cfg = config
        self.pool = UpstreamPool(list(config.upstreams), rest=config.rest)
        self.metrics = Metrics()
        self.policy = BudgetPolicy(
            output_reservation=config.output_reservation,
            safety_margin=config.safety_margin,
            floor=config.floor,
            reasoning_reserve=config.reasoning_reserve,
        )
        self.ask = AskAgain(config.max_reasks, self.policy, self.metrics)
        # ``connect`` bounds the wait for a pooled connection too: a backstop
        # behind ``slot`` (the probes share the pool, outside the slots).
        self.timeout = aiohttp.ClientTimeout(
            total=None,
            connect=config.pool_wait + config.connect_timeout,
            sock_connect=config.connect_timeout,
            sock_read=config.read_timeout,
        )
        self.api_keys = [k.encode() for k in config.api_keys]
        self.upstream_secrets = [
            secret.encode()
            for u in config.upstreams
            for secret in (u.api_key, urlsplit(u.url).password)
            if secret and len(secret) >= 4  # a 1-3 character "key" would garble bodies
        ]
        self._client: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(config.pool_limit)
        self._probe_task: asyncio.Task[None] | None = None
        #: Tool-name sets whose detector matcher was built (at most as many
        #: as the detector caches): those skip the thread.
        self._matchers_built: set[tuple[str, ...]] = set()

    # -- lifecycle ---------------------------------------------------------

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "the app is not running"
        return self._client

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        # headroom over the request slots for the probes and /v1/models
        limit = self.cfg.pool_limit + PROBE_CONNECTIONS * len(self.pool.upstreams)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        self._client = aiohttp.ClientSession(
            connector=connector, auto_decompress=True, skip_auto_headers=("User-Agent",)
        )
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.probe_all(), PROBE_STARTUP_WAIT)
            if self.cfg.probe_interval > 0:
                self._probe_task = asyncio.create_task(self._probe_loop())
            yield
        finally:
            if self._probe_task is not None:
                self._probe_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._probe_task
            await self._client.close()

    async def probe_all(self) -> None:
        await asyncio.gather(*(self._probe(up) for up in self.pool.upstreams))

    async def _probe(self, up: Upstream) -> None:
        headers = {"Authorization": f"Bearer {up.cfg.api_key}"} if up.cfg.api_key else {}
        try:
            info = await probe_upstream(self.client, up.cfg.url, headers)
        except Exception as exc:  # a probe must never take the proxy down
            log.info("probe of %s failed: %s", up.name, type(exc).__name__)
            return
        up.set_info(info)
        log.info("upstream %s: engine=%s window=%s", up.name, info.engine, up.window)

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.probe_interval)
            await self.probe_all()

    # -- what the endpoints share -----------------------------------------

    def redact(self, body: bytes) -> bytes:
        """``body`` without any configured upstream key (or URL password):
        some upstreams echo the key they were sent ("Incorrect API key
        provided: sk-…"), and what they say is relayed to clients."""
        for secret in self.upstream_secrets:
            body = body.replace(secret, b"[redacted]")
        return body

    async def build_matcher(self, tools: Mapping[str, ToolSpec]) -> None:
        """The detector's matcher for a new set of tool names costs CPU (see
        ``validate.MAX_TOOLS``): built in a thread, other streams keep going."""
        key = tuple(sorted(tools))
        if key not in self._matchers_built:
            await asyncio.to_thread(matcher_for, tools)
            if len(self._matchers_built) >= MATCHER_CACHE:
                self._matchers_built.clear()
            self._matchers_built.add(key)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of ``pool_limit`` upstream slots, waited for at most
        ``pool_wait`` seconds: the connection pool never queues silently."""
        slots = self._slots
        if not slots.locked():
            # Free: taken at once. (``wait_for`` would wrap the wait in a
            # task, a loop turn and a timer on every request.)
            await slots.acquire()
        else:
            try:
                await asyncio.wait_for(slots.acquire(), self.cfg.pool_wait)
            except TimeoutError:
                raise web.HTTPServiceUnavailable(
                    text=f"all {self.cfg.pool_limit} upstream connections busy; retry later",
                    headers={"Retry-After": "1"},
                ) from None
        try:
            yield
        finally:
            self._slots.release()

    def upstream_error(self, up: Upstream, kind: str) -> None:
        self.metrics.upstream_errors.labels(up.name, kind).inc()
        record.upstream_error(up.name, kind)

    def count_report(self, report: Report) -> None:
        self.metrics.count_report(report.counts)
        record.report(report)

    def count(self, endpoint: str, stream: bool, status: int) -> None:
        self.metrics.requests.labels(endpoint, "true" if stream else "false", str(status)).inc()

    async def send(
        self,
        method: str,
        path: str,
        request: web.Request,
        body_for: Callable[[Upstream], bytes | None],
        order: list[Upstream] | None = None,
        retries: int | None = None,
    ) -> tuple[Upstream, aiohttp.ClientResponse]:
        forward_auth = not self.api_keys

        def headers_for(up: Upstream) -> CIMultiDict[str]:
            h = forward_headers(request.headers, up, forward_auth=forward_auth)
            if method == "POST":
                h["Content-Type"] = "application/json"
            return h

        return await send(
            self.pool,
            self.client,
            method,
            path,
            body_for=body_for,
            headers_for=headers_for,
            retries=self.cfg.retries if retries is None else retries,
            backoff=self.cfg.backoff,
            timeout=self.timeout,
            on_error=self.upstream_error,
            order=order,
        )

    def budgeted(self, base: dict[str, Any], up: Upstream, sent: dict[str, Any]) -> bytes:
        """The body for ``up``: max_tokens clamped to its window, engine
        fields added. ``sent`` receives the final body and clamp info."""
        base, trim = fit_prompt(
            base, up.window, self.policy, scale=up.token_scale, known_over=False
        )
        if trim is not None:
            count_trim(self.metrics, up, trim)
        body, clamp = clamp_request(base, up.window, self.policy, reasoning=up.info.reasoning)
        extra = engine_fields(body, up.info)
        if extra:
            body = {**body, **extra}
        sent["body"] = body
        sent["clamp"] = clamp
        return orjson.dumps(body)

    def body_fn(self, base: dict[str, Any], sent: dict[str, Any]) -> Callable[[Upstream], bytes]:
        return lambda up: self.budgeted(base, up, sent)

    def record_attempt(
        self, up: Upstream, sent: dict[str, Any], resp: aiohttp.ClientResponse
    ) -> None:
        record.attempt(up.name, sent.get("body"), resp.status, resp.content_type, chain_options(up))
        if sent.get("clamp"):
            self.metrics.clamps.inc()
            log.info("clamped for %s: %s", up.name, sent["clamp"])


PROXY = web.AppKey("streamfix_proxy", Proxy)
