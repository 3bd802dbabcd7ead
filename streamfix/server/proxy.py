"""The state of one proxy app: the configuration, the routing table in
force (``upstream/table.py``) and its probes, reloading it, the HTTP
client session the upstreams are reached with, the upstream slots, the
metrics and the counters every endpoint feeds, the tracer
(``tracing.py``: None unless traces are on; flushed when the app stops),
and, with ``--ui``, the operator page's last hour (``ui/activity.Activity``,
fed by ``count_report``).

The endpoints (``routes/``) and the middlewares (``caller/guards.py``)
reach it as ``request.app[PROXY]``; what one request carries (the table it
started with, its tenant, its rows) is its ``scope.Scope``, and one
exchange with an upstream is ``exchange.Exchange``: this module holds only
what outlives a request.

*Checking* (``probe_all``, at start and every ``probe_interval``): each
row is asked ``GET /models`` once (``upstream.diagnose.check_row``) and
one log line says what was found (engine, window, the model names it
serves) or what is wrong, with a hint (connection refused, ``no /v1?``).
A row that is down is not refused: it may come up later. ``/healthz``
reports each row's state (``checks``); a 200 from a row marks it up.

*Reloading* (``reload``, on SIGHUP under ``streamfix serve``): the
configuration is read again from where it came from; a new table is built
and swapped in for the requests that start after it. A configuration that
does not load is refused with one log line, and the old table stays. Only
the table reloads (upstreams, tenants, keys, ``protect_status``): a
changed setting of any other kind is logged as waiting for a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ..context import Report
from ..errors import PluginError
from ..narrow import VectorCache
from ..shapes import use_shapes
from ..transforms.detect import matcher_for
from . import record, tracing
from .config import ConfigError, ServerConfig
from .metrics import Metrics
from .reask import AskAgain
from .state.fleet import Fleet
from .ui.activity import Activity
from .upstream.budget import BudgetPolicy
from .upstream.diagnose import UNKNOWN, RowCheck, check_row
from .upstream.engines import probe_upstream
from .upstream.pool import Upstream
from .upstream.table import NO_TENANT, Table

log = logging.getLogger("streamfix.server")

#: Connections per upstream kept free of chat requests, for the probes.
PROBE_CONNECTIONS = 4

#: How long start-up waits for the first context-window probes.
PROBE_STARTUP_WAIT = 3.0

#: Bytes of an embedding probe's reply read to learn the vector size.
EMBED_PROBE_BYTES = 1024 * 1024


#: Where a reload reads the configuration again (``streamfix serve``: the
#: same flags, environment and TOML file as at start).
ConfigSource = Callable[[], ServerConfig]

#: Settings a reload applies; any other that changed waits for a restart.
RELOADED = frozenset({"upstreams", "tenants", "api_keys", "protect_status", "shapes"})


class Proxy:
    """State of one proxy app: config, upstreams, metrics, client session."""

    def __init__(self, config: ServerConfig, source: ConfigSource | None = None) -> None:
        self.cfg = config
        self.table = Table(config)
        if config.shapes:
            use_shapes(config.shapes)
        self.source = source
        self.metrics = Metrics()
        #: The operator page's last hour (``--ui``; None: not kept).
        self.activity: Activity | None = Activity() if config.ui else None
        if config.ui and config.state:  # the fleet's counts (state/activity.py)
            from .state.activity import FleetActivity

            self.activity = FleetActivity(config.state, config.state_prefix)
        self.policy = BudgetPolicy(
            output_reservation=config.output_reservation,
            safety_margin=config.safety_margin,
            floor=config.floor,
            reasoning_reserve=config.reasoning_reserve,
        )
        self.ask = AskAgain(config.max_reasks, self.policy, self.metrics)
        #: The tenants' limits and the shared state (``state/``).
        self.fleet = Fleet(config, self.metrics)
        self.fleet.activity = self.activity
        #: Why the proxy is draining (SIGTERM, ``drain.py``); None: it is not.
        self.draining: str | None = None
        #: ``--narrow-tools``: each tool set's BM25 index or vectors.
        self.tool_sets = VectorCache()
        # ``connect`` bounds the wait for a pooled connection too: a backstop
        # behind ``slot`` (the probes share the pool, outside the slots).
        self.timeout = aiohttp.ClientTimeout(
            total=None,
            connect=config.pool_wait + config.connect_timeout,
            sock_connect=config.connect_timeout,
            sock_read=config.read_timeout,
        )
        self._client: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(config.pool_limit)
        self._probe_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        #: The loop the app runs on (``lifecycle``): a reload may come from
        #: another thread, its probes are started there.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: What the last check of each backend found, by ``UpstreamConfig.identity``
        #: (a reload keeps it for the rows it keeps).
        self.checks: dict[tuple[str, str | None, str], RowCheck] = {}
        #: OpenTelemetry spans (``tracing.py``); None when traces are off.
        self.tracer = tracing.tracer_for(config)

    # -- lifecycle ---------------------------------------------------------

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "the app is not running"
        return self._client

    def _listen_for_reload(self) -> int | None:
        """SIGHUP reloads the table, where this process can have it: a
        configuration source, a platform with SIGHUP, the main thread."""
        hup = getattr(signal, "SIGHUP", None)
        if self.source is None or hup is None:
            return None
        try:
            asyncio.get_running_loop().add_signal_handler(hup, self.reload)
        except (ValueError, RuntimeError, NotImplementedError) as exc:
            log.warning("SIGHUP will not reload the configuration here: %s", exc)
            return None
        return int(hup)

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        # headroom over the request slots for the probes and /v1/models
        limit = self.cfg.pool_limit + PROBE_CONNECTIONS * len(self.table.upstreams)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        hup: int | None = None
        self._loop = asyncio.get_running_loop()
        # No cookie jar: the session is every client's, and a cookie one
        # upstream set in reply to one client must not go out with the next
        # (``upstream.pool``'s module doc, *Cookies*).
        self._client = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.probe_all(), PROBE_STARTUP_WAIT)
            if self.cfg.probe_interval > 0:
                self._probe_task = asyncio.create_task(self._probe_loop())
            hup = self._listen_for_reload()
            matcher_for({})  # the registry's markers, compiled once (~40 ms)
            yield
        finally:
            if hup is not None:
                asyncio.get_running_loop().remove_signal_handler(hup)
            for task in list(self._background):  # probes of rows a reload added
                task.cancel()
            if self._probe_task is not None:
                self._probe_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._probe_task
            await self._client.close()
            if self.tracer is not None:  # flushes the exporters: off the loop
                await asyncio.to_thread(self.tracer.shutdown)

    async def probe_all(self, only_new: bool = False) -> None:
        ups = self.table.upstreams
        await asyncio.gather(*(self._probe(up) for up in ups if not (only_new and up.probed)))

    def check_of(self, up: Upstream) -> RowCheck:
        """What the last check of ``up`` found (``unknown`` before one)."""
        return self.checks.get(up.cfg.identity, UNKNOWN)

    def answered(self, up: Upstream) -> None:
        """``up`` gave a 200: whatever its check said, it serves."""
        check = self.checks.get(up.cfg.identity)
        if check is not None and check.state != "ok":
            self.checks[up.cfg.identity] = RowCheck("ok", None, check.models)

    async def _probe(self, up: Upstream) -> None:
        headers = {"Authorization": f"Bearer {up.cfg.api_key}"} if up.cfg.api_key else {}
        try:
            check = await check_row(self.client, up.cfg.url, headers)
        except Exception as exc:  # a probe must never take the proxy down
            check = RowCheck("unknown", f"check failed: {type(exc).__name__}")
        before = self.checks.get(up.cfg.identity)
        self.checks[up.cfg.identity] = check
        if check.state == "unreachable":  # nothing more to ask it now
            if before != check:
                log.warning(
                    "upstream %s: %s (the proxy starts anyway; requests are still tried)",
                    up.name,
                    check.problem,
                )
            return
        try:
            info = await probe_upstream(self.client, up.cfg.url, headers, up.cfg.model)
            if up.cfg.kind == "embedding" and up.dimensions is None:
                up.dimensions = await self._embedding_size(up, headers)
        except Exception as exc:  # a probe must never take the proxy down
            log.info("probe of %s failed: %s", up.name, type(exc).__name__)
            return
        up.set_info(info)
        found = [f"engine {info.engine or 'not recognised'}", f"window {up.window or 'unknown'}"]
        if check.models:
            shown = ", ".join(check.models[:5]) + (", …" if len(check.models) > 5 else "")
            found.append(f"serves {shown}")
        if up.cfg.kind == "embedding":
            found.append(f"dimensions {up.dimensions or 'unknown'}")
        if check.problem is not None:
            log.warning("upstream %s: %s; %s", up.name, check.problem, ", ".join(found))
        else:
            log.info("upstream %s: %s", up.name, ", ".join(found))

    async def _embedding_size(self, up: Upstream, headers: dict[str, str]) -> int | None:
        """An embedding row's vector size: one embedding of one word."""
        body: dict[str, Any] = {"input": "probe"}
        if up.cfg.model:
            body["model"] = up.cfg.model
        timeout = aiohttp.ClientTimeout(total=PROBE_STARTUP_WAIT * 3)
        async with self.client.post(
            up.cfg.url + "/embeddings", json=body, headers=headers, timeout=timeout
        ) as resp:
            if resp.status != 200:
                return None
            data = orjson.loads(await resp.content.read(EMBED_PROBE_BYTES))
        return embedding_size(data)

    # -- reloading ---------------------------------------------------------

    def reload(self) -> bool:
        """Read the configuration again (``source``) and swap in its table
        for new requests; False (the old table stays) when it does not
        load. Rows new to the table are probed in the background. Safe to
        call from any thread (the swap is one assignment)."""
        if self.source is None:
            log.warning("reload: this proxy was not started from a configuration source")
            return False
        try:
            cfg = self.source()
            table = Table(cfg, previous=self.table)
            use_shapes(cfg.shapes)
        except (ConfigError, ValueError, OSError, PluginError) as exc:
            log.error("reload refused, the running configuration stays: %s", exc)
            self.metrics.reloads.labels("refused").inc()
            return False
        waiting = sorted(
            f.name
            for f in dataclasses.fields(cfg)
            if f.name not in RELOADED and getattr(cfg, f.name) != getattr(self.cfg, f.name)
        )
        if waiting:
            log.warning("reload: %s changed; that takes a restart", ", ".join(waiting))
        self.table = table
        self.metrics.reloads.labels("ok").inc()
        log.info(
            "reloaded: %d upstream row(s), %d tenant(s)", len(table.upstreams), len(cfg.tenants)
        )
        loop = self._loop
        if loop is not None and not loop.is_closed():  # may be called from another thread
            loop.call_soon_threadsafe(self._probe_new_rows)
        return True

    def _probe_new_rows(self) -> None:
        if self._client is None or self._client.closed:
            return
        task = asyncio.get_running_loop().create_task(self.probe_all(only_new=True))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.probe_interval)
            await self.probe_all()

    # -- what the endpoints share -----------------------------------------

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of ``pool_limit`` upstream slots, waited for at most
        ``pool_wait`` seconds: the connection pool never queues silently.
        When none frees in time: a 503 ``server_error`` with ``Retry-After``
        (``caller.guards.errors_mw`` keeps the header)."""
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
        tracing.upstream_error(kind)

    def count_report(self, report: Report, model: str = NO_TENANT) -> None:
        """One reply's report, for the route labelled ``model``."""
        self.metrics.count_report(report.counts)
        record.report(report)
        tracing.report(report)
        if self.activity is not None:  # --ui: the page's last hour
            self.activity.report(model, report.counts, report.unrecognised)

    def count(
        self,
        endpoint: str,
        stream: bool,
        status: int,
        tenant: str = NO_TENANT,
        model: str = NO_TENANT,
    ) -> None:
        """One answered request; ``model`` is the route's label (``-``: the
        request ended before a route was chosen)."""
        self.metrics.requests.labels(
            endpoint, "true" if stream else "false", str(status), tenant, model
        ).inc()


def embedding_size(data: Any) -> int | None:
    """The vector size in an embeddings reply, in either shape: OpenAI's
    (``{"data": [{"embedding": [...]}]}``) or llama.cpp's native one (a
    list of ``{"embedding": ...}``); an ``embedding`` that is a list of
    per-token vectors (llama.cpp without pooling) gives one vector's size,
    not the number of tokens."""
    items = data.get("data") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        return None
    vector = items[0].get("embedding")
    if isinstance(vector, list) and vector and isinstance(vector[0], list):
        vector = vector[0]  # per-token vectors
    if not isinstance(vector, list) or not vector:
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector[:8]):
        return None
    return len(vector)


PROXY = web.AppKey("streamfix_proxy", Proxy)
