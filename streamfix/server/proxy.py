"""The state of one proxy app and what every endpoint shares: the
configuration, the routing table in force (``table.py``) and its probes,
reloading it, the client session, the upstream slots, the metrics, and
sending a request upstream with the body budgeted for the upstream chosen.

The endpoints (``chat.py``, ``doors.py``, ``models.py``, ``status.py``,
``embeddings.py``, ``completions.py``) and the middlewares (``guards.py``)
reach it as ``request.app[PROXY]``, and the table a request started with
as ``table_of(request)``.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ..context import UNOPENED_HOLD, Report, ToolSpec
from ..errors import RequestError, UpstreamProtocolError
from ..session import error_event
from ..transforms.detect import MATCHER_CACHE, matcher_for
from . import record
from .attempts import AskAgain, count_trim
from .budget import BudgetPolicy, clamp_request, engine_fields, fit_prompt, probe_upstream
from .client import ClientGone, ClientStream
from .config import ConfigError, ServerConfig
from .metrics import Metrics
from .replies import json_error
from .table import NO_TENANT, TABLE, Route, Table, tenant_label, tenant_of
from .upstreams import Upstream, forward_headers, send

log = logging.getLogger("streamfix.server")

#: Connections per upstream kept free of chat requests, for the probes.
PROBE_CONNECTIONS = 4

#: How long start-up waits for the first context-window probes.
PROBE_STARTUP_WAIT = 3.0

#: Bytes of an embedding probe's reply read to learn the vector size.
EMBED_PROBE_BYTES = 1024 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Where a reload reads the configuration again (``streamfix serve``: the
#: same flags, environment and TOML file as at start).
ConfigSource = Callable[[], ServerConfig]

#: Settings a reload applies; any other that changed waits for a restart.
RELOADED = frozenset({"upstreams", "tenants", "api_keys", "protect_status"})


def chain_options(up: Upstream) -> dict[str, Any]:
    """The chain's options for a reply from ``up``: an upstream known to
    reason (configured, or seen reasoning) gets the start of its replies
    held for a reasoning section whose ``<think>`` the prompt opened; for
    others the request decides (``Options.unopened_reasoning_hold``)."""
    return {"unopened_reasoning_hold": UNOPENED_HOLD} if up.info.reasoning else {}


class StreamSession(Protocol):
    """What the proxy needs of a sans-I/O stream session at its end
    (``SSESession``, ``completions.CompletionSession``)."""

    @property
    def finished(self) -> bool: ...
    @property
    def saw_done(self) -> bool: ...
    def close(self) -> bytes: ...
    def fail(self, exc: Exception) -> bytes: ...


class Proxy:
    """State of one proxy app: config, upstreams, metrics, client session."""

    def __init__(self, config: ServerConfig, source: ConfigSource | None = None) -> None:
        self.cfg = config
        self.table = Table(config)
        self.source = source
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
        self._client: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(config.pool_limit)
        self._probe_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        #: The loop the app runs on (``lifecycle``): a reload may come from
        #: another thread, its probes are started there.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Tool-name sets whose detector matcher was built (at most as many
        #: as the detector caches): those skip the thread.
        self._matchers_built: set[tuple[str, ...]] = set()

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
        self._client = aiohttp.ClientSession(
            connector=connector, auto_decompress=True, skip_auto_headers=("User-Agent",)
        )
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.probe_all(), PROBE_STARTUP_WAIT)
            if self.cfg.probe_interval > 0:
                self._probe_task = asyncio.create_task(self._probe_loop())
            hup = self._listen_for_reload()
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

    async def probe_all(self, only_new: bool = False) -> None:
        ups = self.table.upstreams
        await asyncio.gather(*(self._probe(up) for up in ups if not (only_new and up.probed)))

    async def _probe(self, up: Upstream) -> None:
        headers = {"Authorization": f"Bearer {up.cfg.api_key}"} if up.cfg.api_key else {}
        try:
            info = await probe_upstream(self.client, up.cfg.url, headers, up.cfg.model)
            if up.cfg.kind == "embedding" and up.dimensions is None:
                up.dimensions = await self._embedding_size(up, headers)
        except Exception as exc:  # a probe must never take the proxy down
            log.info("probe of %s failed: %s", up.name, type(exc).__name__)
            return
        up.set_info(info)
        log.info("upstream %s: engine=%s window=%s", up.name, info.engine, up.window)

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
        try:
            vector = data["data"][0]["embedding"]
        except (KeyError, IndexError, TypeError):
            return None
        return len(vector) if isinstance(vector, list) else None

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
        except (ConfigError, ValueError, OSError) as exc:
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

    def route(
        self, request: web.Request, kind: str, model: Any, endpoint: str, stream: bool
    ) -> Route:
        """The rows of the request's table for ``model`` (``Table.route``);
        a refusal (404 ``model_not_found``, 400 without a model) is counted
        for ``endpoint`` and raised."""
        try:
            return table_of(request).route(kind, model, tenant_of(request))
        except RequestError as exc:
            self.count(endpoint, stream, exc.status, tenant_label(request))
            raise

    def stream_end(
        self, up: Upstream, session: StreamSession, got_data: bool
    ) -> tuple[str | None, bytes]:
        """A stream whose reads ran out: (the error, or None; the bytes that
        end it). Without ``[DONE]`` it died (or was empty: llama.cpp's
        answer to a prompt over its window), and an error event ends it."""
        if session.finished:
            return None, b""
        if session.saw_done:
            return None, session.close()
        kind = "died_midstream" if got_data else "empty_stream"
        self.upstream_error(up, kind)
        error = (
            f"upstream {up.name} ended the stream before [DONE]"
            if got_data
            else f"upstream {up.name} sent an empty stream"
            " (llama.cpp does so when the prompt exceeds its context window)"
        )
        return error, session.fail(UpstreamProtocolError(error))

    def stream_broke(
        self, up: Upstream, session: StreamSession, exc: Exception
    ) -> tuple[str, bytes]:
        """A stream that broke the protocol, timed out or lost its
        connection: (the error, the bytes that end it)."""
        if isinstance(exc, UpstreamProtocolError):
            self.upstream_error(up, "protocol")
            return str(exc), session.fail(exc)
        kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
        self.upstream_error(up, kind)
        error = f"upstream {up.name} failed mid-stream: {type(exc).__name__}"
        return error, session.fail(UpstreamProtocolError(error))

    def reply_failed(self, up: Upstream, exc: Exception) -> web.Response:
        """A whole reply that could not be read (the connection died or
        went silent): counted, and the 502 (504 for a timeout) to answer."""
        kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
        self.upstream_error(up, kind)
        return json_error(
            504 if kind == "timeout" else 502,
            f"upstream {up.name} failed mid-reply: {type(exc).__name__}",
            "upstream_error",
            kind,
        )

    def count_report(self, report: Report) -> None:
        self.metrics.count_report(report.counts)
        record.report(report)

    async def answer(
        self,
        run: Awaitable[web.StreamResponse],
        count: Callable[[int], None],
        client: ClientStream | None = None,
    ) -> web.StreamResponse:
        """What an endpoint answers: ``run`` within ``--request-timeout``,
        its status counted (``count``). When the time runs out: a 504
        before the reply began, else the stream (``client``) ends with an
        error event. A streamed client that went away counts as 499
        (nginx's "client closed request")."""
        limit = self.cfg.request_timeout
        deadline = asyncio.timeout(limit if limit > 0 else None)
        # A whole reply is counted once answered; a stream however it ends.
        status: int | None = 200 if client is not None else None
        try:
            try:
                async with deadline:
                    out = await run
            except TimeoutError:
                if not deadline.expired():
                    raise
                message = f"the request took longer than --request-timeout ({limit:g} s)"
                if client is None or not client.prepared:
                    out = json_error(504, message, "timeout", "request_timeout")
                else:
                    with contextlib.suppress(ClientGone):
                        await client.commit()
                        await client.write(error_event(message, "timeout", "request_timeout"))
                    out = client.response
            status = out.status  # a 200 stream, or an error answered before it began
            return out
        except ClientGone:
            assert client is not None
            status = 499
            return client.resp or web.Response(status=499)
        except asyncio.CancelledError:
            if client is not None:
                status = 499
            raise
        finally:
            if status is not None:
                count(status)

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

    async def send(
        self,
        method: str,
        path: str,
        request: web.Request,
        body_for: Callable[[Upstream], bytes | None],
        rows: list[Upstream] | None = None,
        order: list[Upstream] | None = None,
        retries: int | None = None,
    ) -> tuple[Upstream, aiohttp.ClientResponse]:
        """Open ``method path`` on one of ``rows`` (default: every row of
        the request's table), see ``upstreams.send``."""
        table = table_of(request)
        forward_auth = not table.keys

        def headers_for(up: Upstream) -> CIMultiDict[str]:
            h = forward_headers(request.headers, up, forward_auth=forward_auth)
            if method == "POST":
                h["Content-Type"] = "application/json"
            return h

        return await send(
            table.pool,
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
            rows=rows,
        )

    def budgeted(self, base: dict[str, Any], up: Upstream, sent: dict[str, Any]) -> bytes:
        """The body for ``up``: max_tokens clamped to its window, engine
        fields added. ``sent`` receives the final body and clamp info."""
        base, trim = fit_prompt(
            with_model(base, up), up.window, self.policy, scale=up.token_scale, known_over=False
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


def table_of(request: web.Request) -> Table:
    """The table the request started with (``guards.errors_mw`` notes it
    on arrival), else the one in force."""
    table = request.get(TABLE)
    return table if table is not None else request.app[PROXY].table


def with_model(body: dict[str, Any], up: Upstream) -> dict[str, Any]:
    """``body`` naming the model as ``up``'s server knows it (a catch-all
    row sends the client's name on)."""
    model = up.cfg.model
    if model is None or body.get("model") == model:
        return body
    return {**body, "model": model}
