"""The OpenAI-compatible proxy: ``create_app(config) -> web.Application``.

Routes: ``POST /v1/chat/completions`` (streamed through ``SSESession``,
non-streamed through ``Chain.complete``), ``GET /v1/models`` (passed
through), ``GET /healthz``, ``GET /metrics`` (Prometheus text format), and
the front doors of ``server/doors.py`` (``/v1/messages``, ``/v1/responses``:
translated to a chat body, served by ``serve_chat``, the reply encoded by
the door at the one place bytes reach the client, ``_ClientStream.write``).

One chat request, streamed::

    read + validate body ─► budget (clamp max_tokens, engine fields)
      ─► upstreams.send (weighted choice, failover, retries) ─► 200?
      ─► prepare client response (no-cache, X-Accel-Buffering: no)
      ─► for each upstream read: session.feed ─► hold or write
      ─► end: [DONE] passed on, or an error event (never a fake finish)

*Holding.* Until the chain has emitted real output (``output_started``;
with ``--required soft`` and ``tool_choice: "required"``, until a call was
emitted) the repaired bytes are held, not written, so that the request can
still be asked again without the client seeing two replies. Held bytes
are bounded (``MAX_HELD_BYTES``); keep-alive comments go out meanwhile.

*Asking again* (at most ``max_reasks`` times, each reason once): the
repaired reply is empty; a tool call was cut off by the output limit
(asked with twice the allowance, clamped to the window); ``required``
soft mode and no call (asked with an instruction naming the tools); the
upstream said ``context_length_exceeded`` (the window is learned from the
message, the request clamped).

*An upstream that ignores* ``stream: true`` and answers one JSON
completion: it is repaired like a non-streamed reply and sent to the
client as a stream (``completion_to_sse``); a JSON error there is a 502.

*Cancellation paths* (each closes the upstream response, in ``finally``):
the client disconnects (the handler is cancelled when the server runs
with ``handler_cancellation=True``, as ``streamfix serve`` does, and a
closing transport is noticed at the next upstream read otherwise); a
write to the client fails; the chain cuts a loop (``session.finished``);
the upstream dies or times out (an error event goes to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ..chain import Chain
from ..context import UNOPENED_HOLD, Context, Report, tools_of
from ..errors import RequestError, UpstreamProtocolError
from ..session import SSESession, error_event
from ..sse import DONE_EVENT, encode_data
from ..transforms.detect import MATCHER_CACHE, matcher_for
from ..wire import Door, Encoder
from . import record
from .body import BodyReads
from .budget import (
    BudgetPolicy,
    clamp_request,
    engine_fields,
    estimate_prompt_tokens,
    fit_prompt,
    probe_upstream,
    prompt_tokens_from_error,
    window_from_error,
)
from .config import ServerConfig
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .upstreams import (
    ERROR_BODY_BYTES,
    ReadWatch,
    Upstream,
    UpstreamFailure,
    UpstreamPool,
    error_body,
    forward_headers,
    response_headers,
    send,
)

log = logging.getLogger("streamfix.server")

#: Repaired bytes held back while a re-ask is still possible. A reply
#: whose held part grows past this is committed (streamed as is): holding
#: more would delay a long prose answer for nothing and grow memory.
MAX_HELD_BYTES = 256 * 1024

#: Seconds between keep-alive comments sent while output is held, well
#: under the usual 60 s idle timeouts of load balancers and clients.
KEEPALIVE_INTERVAL = 5.0

#: Connections per upstream kept free of chat requests, for the probes.
PROBE_CONNECTIONS = 4

#: How long start-up waits for the first context-window probes.
PROBE_STARTUP_WAIT = 3.0

#: Largest non-streamed upstream reply read into memory (bytes). A whole
#: completion is kilobytes, megabytes with logprobs; past this the
#: upstream is broken, and reading on would only grow memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024


class ReplyTooLarge(aiohttp.ClientPayloadError):
    """A non-streamed upstream reply over ``MAX_REPLY_BYTES`` (handled
    where other payload errors are: a 502 to the client)."""


async def read_reply(resp: aiohttp.ClientResponse, limit: int | None = None) -> bytes:
    """``resp``'s whole body, at most ``limit`` (default ``MAX_REPLY_BYTES``)
    bytes, else ReplyTooLarge."""
    limit = MAX_REPLY_BYTES if limit is None else limit
    parts: list[bytes] = []
    size = 0
    async for part in record.reads(BodyReads(resp.content)):
        size += len(part)
        if size > limit:
            raise ReplyTooLarge(f"reply larger than {limit} bytes")
        parts.append(part)
    return b"".join(parts)


#: Most tools one request may offer, and longest tool name (characters).
#: The detector builds one matcher per distinct set of tool names (about
#: 5 ms of CPU per 64-character name, measured) and recurses once per
#: character of a name. OpenAI's own limits are 128 tools and 64 characters.
MAX_TOOLS = 512
MAX_TOOL_NAME_CHARS = 256

_KEEPALIVE = b": keep-alive\n\n"

#: A delta that carries reasoning text (not ``"reasoning_content": null``,
#: which vLLM sends in every chunk of every model).

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}

#: The instruction added when ``tool_choice: "required"`` got prose back.
REQUIRED_INSTRUCTION = (
    "You must answer this turn by calling one of these tools: {names}. "
    "Reply with a tool call only, not with text."
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(
    status: int, message: str, type_: str, code: str | None = None, param: str | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(error_body(message, type_, code, param)),
        content_type="application/json",
    )


def relay_error(
    status: int, raw: bytes, headers: CIMultiDict[str], content_type: str, upstream: str
) -> web.Response:
    """An upstream's non-200 answer for the client: passed on as is when it
    is an OpenAI-shaped error (``{"error": …}``), else wrapped into one (an
    HTML page from a gateway, a plain-text 404) so SDKs can read it."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str)):
        out = web.Response(status=status, body=raw, headers=headers)
        out.content_type = content_type
        return out
    text = raw[:200].decode("utf-8", "replace").strip()
    message = f"upstream {upstream} answered HTTP {status}" + (f": {text}" if text else "")
    type_ = "invalid_request_error" if status < 500 else "upstream_error"
    return json_error(status, message, type_, f"upstream_{status}")


_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


class _ClientGone(Exception):
    """Writing to the client failed: it went away."""


class _ClientStream:
    """The streamed response to the client, with a hold-back buffer."""

    __slots__ = (
        "committed",
        "encoder",
        "held",
        "held_bytes",
        "last_write",
        "recording",
        "request",
        "resp",
    )

    def __init__(self, request: web.Request, encoder: Encoder | None = None) -> None:
        self.request = request
        #: A front door's encoder (``streamfix.wire``): everything written
        #: to the client goes through it, and only what is written, so
        #: held bytes discarded for a re-ask never reach it.
        self.encoder = encoder
        self.resp: web.StreamResponse | None = None
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.committed = False
        self.last_write = time.monotonic()
        self.recording = record.current()

    @property
    def prepared(self) -> bool:
        return self.resp is not None

    @property
    def response(self) -> web.StreamResponse:
        assert self.resp is not None, "not prepared"
        return self.resp

    async def prepare(self, extra: CIMultiDict[str]) -> None:
        if self.resp is not None:
            return
        resp = web.StreamResponse(status=200)
        for k, v in extra.items():
            resp.headers.add(k, v)
        resp.headers.update(SSE_HEADERS)
        self.resp = resp
        try:
            await resp.prepare(self.request)
        except ConnectionResetError as exc:
            raise _ClientGone from exc

    async def write(self, data: bytes) -> None:
        assert self.resp is not None
        if self.encoder is not None:
            data = self.encoder.feed(data)
            if not data:
                return
        try:
            await self.resp.write(data)
        except ConnectionResetError as exc:
            raise _ClientGone from exc
        self.last_write = time.monotonic()
        if self.recording is not None:
            self.recording.to_client(data)

    def gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def hold(self, data: bytes) -> None:
        self.held.append(data)
        self.held_bytes += len(data)

    async def keepalive_if_due(self) -> None:
        if time.monotonic() - self.last_write >= KEEPALIVE_INTERVAL:
            await self.write(_KEEPALIVE)

    async def commit(self) -> None:
        self.committed = True
        if self.held:
            data = b"".join(self.held)
            self.held.clear()
            self.held_bytes = 0
            await self.write(data)

    def discard(self) -> None:
        self.held.clear()
        self.held_bytes = 0

    async def send(self, data: bytes) -> None:
        if self.committed:
            await self.write(data)
        else:
            self.hold(data)


class _Attempt:
    """What one request's successive upstream attempts share."""

    __slots__ = ("body", "done", "door", "endpoint", "reasks", "soft", "stream", "tail")

    def __init__(
        self, body: dict[str, Any], soft: bool, stream: bool, door: Door | None = None
    ) -> None:
        self.body = body  # sent upstream (before the per-upstream budget)
        self.soft = soft
        self.stream = stream
        self.door = door  # the front door the request came in by, if not chat
        self.endpoint = "chat" if door is None else door.endpoint  # the metrics' label
        self.reasks = 0
        self.done: set[str] = set()  # re-ask reasons used
        #: The end of a reply kept while the proxy looks into why it was
        #: empty (see ``Proxy._diagnose_empty``).
        self.tail = b""


def chain_options(up: Upstream) -> dict[str, Any]:
    """The chain's options for a reply from ``up``: an upstream known to
    reason (configured, or seen reasoning) gets the start of its replies
    held for a reasoning section whose ``<think>`` the prompt opened; for
    others the request decides (``Options.unopened_reasoning_hold``)."""
    return {"unopened_reasoning_hold": UNOPENED_HOLD} if up.info.reasoning else {}


def validate_chat(body: Any) -> dict[str, Any]:
    """Raise RequestError unless ``body`` is a usable chat request."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise RequestError("each message must be an object", param="messages")
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise RequestError("'stream' must be a boolean", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    if tools is not None and len(tools) > MAX_TOOLS:
        raise RequestError(f"at most {MAX_TOOLS} tools per request", param="tools")
    for i, t in enumerate(tools or ()):
        # Function tools only: other tool types are the upstream's business.
        if not isinstance(t, dict):
            raise RequestError(f"tools[{i}] must be an object", param=f"tools[{i}]")
        if t.get("type", "function") != "function":
            continue
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(
                f"tools[{i}].function must be an object with a non-empty 'name'",
                param=f"tools[{i}].function",
            )
        if len(fn["name"]) > MAX_TOOL_NAME_CHARS:
            raise RequestError(
                f"tools[{i}].function.name is longer than {MAX_TOOL_NAME_CHARS} characters",
                param=f"tools[{i}].function.name",
            )
        if "parameters" in fn and not isinstance(fn["parameters"], dict | None):
            raise RequestError(
                f"tools[{i}].function.parameters must be a JSON Schema object",
                param=f"tools[{i}].function.parameters",
            )
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise RequestError(f"'{key}' must be a positive integer", param=key)
    return body


def with_required_instruction(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with an instruction naming the offered tools, merged into
    the first system message (several chat templates reject a system
    message anywhere but first) or added as one."""
    names = ", ".join(tools_of(body))
    text = REQUIRED_INSTRUCTION.format(names=names)
    messages = [dict(m) for m in body["messages"]]
    first = messages[0]
    if first.get("role") in ("system", "developer") and isinstance(first.get("content"), str):
        first["content"] = f"{first['content']}\n\n{text}"
    else:
        messages.insert(0, {"role": "system", "content": text})
    out = dict(body)
    out["messages"] = messages
    return out


def raise_allowance(
    body: dict[str, Any], sent: dict[str, Any] | None, reservation: int
) -> dict[str, Any]:
    """``body`` asking for twice the output tokens last sent (the budget
    clamps the result to the window). A request that set no limit is left
    as is: the engine already allowed what fits."""
    out = dict(body)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            cur = (sent or body).get(key) or body[key] or reservation
            out[key] = max(int(cur) * 2, body[key])
    return out


def completion_to_sse(completion: dict[str, Any]) -> bytes:
    """A whole ``chat.completion`` as the stream a client expects: per
    choice, one chunk with the message, one with the finish reason; usage
    on the last; then ``[DONE]``."""
    top = {k: v for k, v in completion.items() if k not in ("choices", "usage", "object")}
    top["object"] = "chat.completion.chunk"
    chunks: list[dict[str, Any]] = []
    for pos, ch in enumerate(completion.get("choices") or ()):
        if not isinstance(ch, dict):
            continue
        index = ch.get("index", pos)
        delta = dict(ch.get("message") or {})
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {"index": i, **c} for i, c in enumerate(calls) if isinstance(c, dict)
            ]
        extra = {k: v for k, v in ch.items() if k not in ("index", "message", "finish_reason")}
        chunks.append(
            {**top, "choices": [{"index": index, "delta": delta, **extra, "finish_reason": None}]}
        )
        fin = {"index": index, "delta": {}, "finish_reason": ch.get("finish_reason")}
        chunks.append({**top, "choices": [fin]})
    if "usage" in completion and chunks:
        chunks[-1]["usage"] = completion["usage"]
    return b"".join(encode_data(orjson.dumps(c)) for c in chunks) + DONE_EVENT


def _calls_in(obj: dict[str, Any]) -> int:
    n = 0
    for ch in obj.get("choices") or ():
        msg = ch.get("message") if isinstance(ch, dict) else None
        if isinstance(msg, dict) and isinstance(msg.get("tool_calls"), list):
            n += len(msg["tool_calls"])
    return n


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
        # ``connect`` bounds the wait for a pooled connection too: a backstop
        # behind ``_slot`` (the probes share the pool, outside the slots).
        self.timeout = aiohttp.ClientTimeout(
            total=None,
            connect=config.pool_wait + config.connect_timeout,
            sock_connect=config.connect_timeout,
            sock_read=config.read_timeout,
        )
        self._api_keys = [k.encode() for k in config.api_keys]
        self._upstream_secrets = [
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

    # -- middlewares -------------------------------------------------------

    @web.middleware
    async def errors_mw(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
            if resp.status >= 400 and isinstance(resp, web.Response):
                self._redact(resp)
            return resp
        except RequestError as exc:
            return json_error(
                exc.status,
                str(exc),
                _STATUS_TYPES.get(exc.status, "invalid_request_error"),
                param=exc.param,
            )
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = exc.text or exc.reason
            if exc.status == 413:
                message = f"request body too large (limit {self.cfg.body_limit} bytes)"
            return json_error(
                exc.status, message, _STATUS_TYPES.get(exc.status, "invalid_request_error")
            )
        except Exception:
            # A bug of ours: an OpenAI-shaped 500 rather than aiohttp's plain
            # text one (a streamed reply already begun ends in ``_pump``).
            if request.writer.output_size > 0:
                raise
            log.exception("internal error on %s %s", request.method, request.path)
            return json_error(500, "streamfix internal error (see the proxy log)", "internal_error")

    def _redact(self, resp: web.Response) -> None:
        """Upstream error bodies are relayed, and some upstreams echo the key
        they were sent ("Incorrect API key provided: sk-…"): never pass a
        configured upstream key (or URL password) on to the client."""
        body = resp.body
        if not isinstance(body, bytes) or not self._upstream_secrets:
            return
        out = body
        for secret in self._upstream_secrets:
            out = out.replace(secret, b"[redacted]")
        if out != body:
            resp.body = out

    @web.middleware
    async def auth_mw(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._api_keys and request.path not in ("/healthz", "/metrics"):
            header = request.headers.get("Authorization", "")
            token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
            if not token:  # Anthropic clients send their key as x-api-key
                token = request.headers.get("x-api-key", "").strip().encode()
            ok = False
            for key in self._api_keys:  # no early exit: constant time per key
                ok |= hmac.compare_digest(token, key)
            if not ok:
                return json_error(
                    401, "invalid or missing API key", "authentication_error", "invalid_api_key"
                )
        return await handler(request)

    # -- small endpoints ---------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        ups = [
            {
                "url": u.name,
                "resting": u.resting(now),
                "window": u.window,
                "engine": u.info.engine,
                "reasoning": u.info.reasoning,
            }
            for u in self.pool.upstreams
        ]
        return web.json_response(
            {"status": "ok", "upstreams": ups}, dumps=lambda o: orjson.dumps(o).decode()
        )

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        resp = web.Response(body=self.metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def models(self, request: web.Request) -> web.StreamResponse:
        model = request.match_info.get("model")
        path = "/models"
        if model is not None:
            # The model id is data, not a path: ``..`` segments (raw or
            # percent-encoded) would reach any GET endpoint of the upstream
            # host (llama.cpp's /slots shows other users' prompts).
            if any(seg in ("", ".", "..") for seg in model.split("/")):
                raise web.HTTPNotFound(text=f"no model {model!r}")
            path += "/" + quote(model, safe="/:@")
        async with self._slot():
            try:
                up, resp = await self._send("GET", path, request, lambda up: None)
            except UpstreamFailure as f:
                return self._failure_response(f)
            try:
                body = await read_reply(resp)
                out = web.Response(
                    status=resp.status, body=body, headers=response_headers(resp.headers)
                )
                out.content_type = resp.content_type
                self._count("models", False, resp.status)
                return out
            except (TimeoutError, aiohttp.ClientError) as exc:
                self._upstream_error(up, "died_midstream")
                return json_error(
                    502, f"upstream {up.name} failed: {type(exc).__name__}", "upstream_error"
                )
            finally:
                resp.close()

    # -- helpers -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
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

    def _upstream_error(self, up: Upstream, kind: str) -> None:
        self.metrics.upstream_errors.labels(up.name, kind).inc()
        record.upstream_error(up.name, kind)

    def _count_report(self, report: Report) -> None:
        self.metrics.count_report(report.counts)
        record.report(report)

    def _count(self, endpoint: str, stream: bool, status: int) -> None:
        self.metrics.requests.labels(endpoint, "true" if stream else "false", str(status)).inc()

    async def _send(
        self,
        method: str,
        path: str,
        request: web.Request,
        body_for: Callable[[Upstream], bytes | None],
        order: list[Upstream] | None = None,
        retries: int | None = None,
    ) -> tuple[Upstream, aiohttp.ClientResponse]:
        forward_auth = not self._api_keys

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
            on_error=self._upstream_error,
            order=order,
        )

    def _failure_response(self, f: UpstreamFailure) -> web.Response:
        if f.body and f.status in (429, 500, 502, 503, 504):
            try:
                obj = orjson.loads(f.body)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str)):
                resp = web.Response(status=f.status, body=f.body, headers=f.headers or {})
                resp.content_type = "application/json"
                return resp
        type_ = "timeout" if f.status == 504 else "upstream_error"
        return json_error(f.status, f.message, type_, f.kind)

    def _budgeted(self, base: dict[str, Any], up: Upstream, sent: dict[str, Any]) -> bytes:
        """The body for ``up``: max_tokens clamped to its window, engine
        fields added. ``sent`` receives the final body and clamp info."""
        base, trim = fit_prompt(
            base, up.window, self.policy, scale=up.token_scale, known_over=False
        )
        if trim is not None:
            self._trimmed(up, trim)
        body, clamp = clamp_request(base, up.window, self.policy, reasoning=up.info.reasoning)
        extra = engine_fields(body, up.info)
        if extra:
            body = {**body, **extra}
        sent["body"] = body
        sent["clamp"] = clamp
        return orjson.dumps(body)

    def _body_fn(self, base: dict[str, Any], sent: dict[str, Any]) -> Callable[[Upstream], bytes]:
        return lambda up: self._budgeted(base, up, sent)

    def _trimmed(self, up: Upstream, info: dict[str, Any]) -> None:
        self.metrics.prompt_trims.inc()
        log.info("prompt trimmed for %s: %s", up.name, info)

    def _record(self, up: Upstream, sent: dict[str, Any], resp: aiohttp.ClientResponse) -> None:
        record.attempt(up.name, sent.get("body"), resp.status, resp.content_type, chain_options(up))
        if sent.get("clamp"):
            self.metrics.clamps.inc()
            log.info("clamped for %s: %s", up.name, sent["clamp"])

    def _reask_reason(self, att: _Attempt, report: Report, calls: int) -> str | None:
        if att.reasks >= self.cfg.max_reasks:
            return None
        # a cut-off call also leaves the reply empty: the specific reason first
        if report.truncated_call and "truncated_call" not in att.done:
            return "truncated_call"
        if report.empty_after_repair and "empty" not in att.done:
            return "empty"
        if att.soft and calls == 0 and "required" not in att.done:
            return "required"
        return None

    def _next_body(self, att: _Attempt, reason: str, sent: dict[str, Any]) -> None:
        att.reasks += 1
        att.done.add(reason)
        self.metrics.reasks.labels(reason).inc()
        if reason == "truncated_call":
            att.body = raise_allowance(att.body, sent.get("body"), self.policy.output_reservation)
        elif reason == "required":
            att.body = with_required_instruction(att.body)

    async def _context_exceeded(self, up: Upstream, att: _Attempt, raw: bytes) -> bool:
        """An upstream 400 ``context_length_exceeded``: learn the window
        and say whether to ask again (once)."""
        if b"context_length_exceeded" not in raw or "context" in att.done:
            return False
        error: bytes = raw
        if window_from_error(raw) is None:  # an error event inside a 200 stream
            for line in raw.split(b"\n"):
                if line.startswith(b"data:") and b"context_length_exceeded" in line:
                    error = line[5:].strip()
                    break
        window = window_from_error(error)
        if window is None or att.reasks >= self.cfg.max_reasks:
            return False
        up.learn_window(window)
        prompt = prompt_tokens_from_error(error)
        estimate = estimate_prompt_tokens(att.body)
        if prompt and estimate:
            up.token_scale = prompt / estimate
        # The prompt itself may be what does not fit: clamping the reply
        # alone cannot help then (llama.cpp lowers max_tokens by itself).
        att.body, trim = fit_prompt(att.body, window, self.policy, scale=up.token_scale)
        if trim is not None:
            self._trimmed(up, trim)
        att.reasks += 1
        att.done.add("context")
        self.metrics.reasks.labels("context").inc()
        return True

    # -- chat completions --------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self._count("chat", False, 413)
            raise
        try:
            body = validate_chat(orjson.loads(raw))
        except orjson.JSONDecodeError:
            self._count("chat", False, 400)
            raise RequestError("request body is not valid JSON") from None
        except RequestError:
            self._count("chat", False, 400)
            raise
        return await self.serve_chat(request, body)

    async def serve_chat(
        self, request: web.Request, body: dict[str, Any], door: Door | None = None
    ) -> web.StreamResponse:
        """Serve a validated chat body; a front door's (``streamfix.wire``)
        reply is encoded by ``door``."""
        stream = body.get("stream") is True
        tools = tools_of(body)
        if tools:
            # The detector's matcher for a new set of tool names costs CPU
            # (see MAX_TOOLS); built in a thread, other streams keep going.
            key = tuple(sorted(tools))
            if key not in self._matchers_built:
                await asyncio.to_thread(matcher_for, tools)
                if len(self._matchers_built) >= MATCHER_CACHE:
                    self._matchers_built.clear()
                self._matchers_built.add(key)
        soft = self.cfg.required == "soft" and body.get("tool_choice") == "required" and bool(tools)
        up_body = dict(body)
        if soft:
            up_body["tool_choice"] = "auto"
        att = _Attempt(up_body, soft, stream, door)
        async with self._slot():
            if stream:
                return await self._chat_stream(request, body, att)
            return await self._chat_once(request, body, att)

    async def _chat_once(
        self, request: web.Request, client_body: dict[str, Any], att: _Attempt
    ) -> web.StreamResponse:
        while True:
            sent: dict[str, Any] = {}
            base = att.body
            try:
                up, resp = await self._send(
                    "POST", "/chat/completions", request, self._body_fn(base, sent)
                )
            except UpstreamFailure as f:
                self._count(att.endpoint, False, f.status)
                return self._failure_response(f)
            self._record(up, sent, resp)
            try:
                raw = await read_reply(resp)
            except (TimeoutError, aiohttp.ClientError) as exc:
                kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
                self._upstream_error(up, kind)
                status = 504 if kind == "timeout" else 502
                self._count(att.endpoint, False, status)
                return json_error(
                    status,
                    f"upstream {up.name} failed mid-reply: {type(exc).__name__}",
                    "upstream_error",
                    kind,
                )
            finally:
                resp.close()
            if resp.status != 200:
                if resp.status == 400 and await self._context_exceeded(up, att, raw):
                    continue
                self._count(att.endpoint, False, resp.status)
                return relay_error(
                    resp.status, raw, response_headers(resp.headers), resp.content_type, up.name
                )
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                self._upstream_error(up, "protocol")
                self._count(att.endpoint, False, 502)
                return json_error(
                    502,
                    f"upstream {up.name} sent a reply that is not a JSON object",
                    "upstream_protocol_error",
                )
            ctx = Context.of(client_body, chain_options(up))
            t0 = time.perf_counter()
            fixed = Chain(ctx).complete(obj)
            self.metrics.chunk_seconds.observe(time.perf_counter() - t0)
            if ctx.report.reasoning and not up.info.reasoning:
                up.mark_reasoning()
            self._count_report(ctx.report)
            reason = self._reask_reason(att, ctx.report, _calls_in(fixed))
            if reason is not None:
                log.info("asking %s again: %s", up.name, reason)
                self._next_body(att, reason, sent)
                continue
            self._count(att.endpoint, False, 200)
            reply = fixed if att.door is None else att.door.reply(fixed)
            out = web.Response(body=orjson.dumps(reply), headers=response_headers(resp.headers))
            out.content_type = "application/json"
            return out

    async def _chat_stream(
        self, request: web.Request, client_body: dict[str, Any], att: _Attempt
    ) -> web.StreamResponse:
        client = _ClientStream(request, att.door.encoder() if att.door else None)
        status = 200
        try:
            while True:
                sent: dict[str, Any] = {}
                base = att.body
                try:
                    up, resp = await self._send(
                        "POST", "/chat/completions", request, self._body_fn(base, sent)
                    )
                except UpstreamFailure as f:
                    if not client.prepared:
                        status = f.status
                        return self._failure_response(f)
                    await client.commit()
                    await client.write(error_event(f.message, "upstream_error", f.kind))
                    return client.response
                self._record(up, sent, resp)
                try:
                    if resp.status != 200:
                        raw = await resp.content.read(ERROR_BODY_BYTES)
                        if resp.status == 400 and await self._context_exceeded(up, att, raw):
                            continue
                        if not client.prepared:
                            status = resp.status
                            return relay_error(
                                resp.status,
                                raw,
                                response_headers(resp.headers),
                                resp.content_type,
                                up.name,
                            )
                        await client.commit()
                        await client.write(
                            error_event(
                                f"upstream {up.name} answered HTTP {resp.status}", "upstream_error"
                            )
                        )
                        return client.response
                    if resp.content_type == "application/json":
                        # the upstream ignored ``stream``: one completion (or an
                        # error) as JSON; repaired, then sent as a stream
                        try:
                            raw = await read_reply(resp)
                        except (TimeoutError, aiohttp.ClientError) as exc:
                            self._upstream_error(up, "died_midstream")
                            status = 502
                            return json_error(
                                502,
                                f"upstream {up.name} failed mid-reply: {type(exc).__name__}",
                                "upstream_error",
                                "died_midstream",
                            )
                        return await self._json_as_stream(up, raw, client, client_body)
                    # before prepare: fails as a 500
                    session = SSESession(client_body, **chain_options(up))
                    await client.prepare(response_headers(resp.headers))
                    reask = await self._pump(up, resp, session, client, att)
                finally:
                    resp.close()
                if reask is None:
                    return client.response
                if reask == "empty_stream":
                    if await self._diagnose_empty(request, up, att):
                        client.discard()
                        continue
                    await client.commit()
                    if att.tail:
                        await client.write(att.tail)
                    return client.response
                log.info("asking %s again: %s", up.name, reask)
                client.discard()
                if reask != "context":  # counted where the window was learned
                    self._next_body(att, reask, sent)
        except _ClientGone:
            status = 499  # nginx's "client closed request"
            return client.resp or web.Response(status=499)
        except asyncio.CancelledError:
            status = 499
            raise
        finally:
            self._count(att.endpoint, True, status)

    async def _json_as_stream(
        self, up: Upstream, raw: bytes, client: _ClientStream, client_body: dict[str, Any]
    ) -> web.StreamResponse:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or "error" in obj or not isinstance(obj.get("choices"), list):
            self._upstream_error(up, "protocol")
            if isinstance(obj, dict) and "error" in obj:
                return relay_error(502, raw, CIMultiDict(), "application/json", up.name)
            return json_error(
                502, f"upstream {up.name} sent JSON that is not a completion", "upstream_error"
            )
        ctx = Context.of(client_body, chain_options(up))
        fixed = Chain(ctx).complete(obj)
        self._count_report(ctx.report)
        await client.prepare(CIMultiDict())
        await client.commit()
        await client.write(completion_to_sse(fixed))
        return client.response

    async def _pump(
        self,
        up: Upstream,
        resp: aiohttp.ClientResponse,
        session: SSESession,
        client: _ClientStream,
        att: _Attempt,
    ) -> str | None:
        """Stream one upstream reply to the client. Returns a re-ask
        reason when the reply is to be discarded and asked again."""
        chain = session.chain
        observe = self.metrics.chunk_seconds.observe
        perf = time.perf_counter
        soft = att.soft
        got_data = False
        tail = b""
        error: str | None = None
        watch = ReadWatch(resp, self.cfg.read_timeout)
        try:
            async for data in record.reads(BodyReads(resp.content)):
                got_data = True
                t0 = watch.last = perf()
                out = session.feed(data)
                observe(perf() - t0)
                watch.busy = True  # writing to the client: not the upstream's silence
                if out:
                    if client.committed:
                        await client.write(out)
                    else:
                        client.hold(out)
                        ready = chain.calls_emitted > 0 if soft else chain.output_started
                        if ready or client.held_bytes > MAX_HELD_BYTES:
                            await client.commit()
                        else:
                            await client.keepalive_if_due()
                elif not client.committed:
                    await client.keepalive_if_due()
                watch.busy = False
                if session.finished:
                    break
                if client.gone():
                    raise _ClientGone
            if session.finished:
                pass
            elif not session.saw_done:
                kind = "died_midstream" if got_data else "empty_stream"
                self._upstream_error(up, kind)
                error = (
                    f"upstream {up.name} ended the stream before [DONE]"
                    if got_data
                    else f"upstream {up.name} sent an empty stream"
                    " (llama.cpp does so when the prompt exceeds its context window)"
                )
                tail = session.fail(UpstreamProtocolError(error))
            else:
                tail = session.close()
        except UpstreamProtocolError as exc:
            self._upstream_error(up, "protocol")
            error = str(exc)
            tail = session.fail(exc)
        except (TimeoutError, aiohttp.ClientError) as exc:
            kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
            self._upstream_error(up, kind)
            error = f"upstream {up.name} failed mid-stream: {type(exc).__name__}"
            tail = session.fail(UpstreamProtocolError(error))
        except (_ClientGone, asyncio.CancelledError):
            raise
        except Exception:  # a bug of ours: end the stream cleanly, loudly in the log
            log.exception("internal error while repairing a stream from %s", up.name)
            error = "internal error"
            session.finish()
            tail = error_event("streamfix internal error", "internal_error")
        finally:
            watch.cancel()
            self._count_report(session.report)
            if session.report.reasoning and not up.info.reasoning:
                up.mark_reasoning()
        if session.stopped:
            log.info("cut %s: %s", up.name, session.report.cut)
        if not client.committed and client.held_bytes:
            # llama.cpp-style overflow reported as an error event in a 200 stream
            held = b"".join(client.held)
            if b"context_length_exceeded" in held and await self._context_exceeded(up, att, held):
                return None if client.gone() else "context"
        if error is None and not client.committed:
            reason = self._reask_reason(att, session.report, chain.calls_emitted)
            if reason is not None:
                return None if client.gone() else reason
        if (
            not got_data
            and not client.committed
            and "context" not in att.done
            and att.reasks < self.cfg.max_reasks
        ):
            att.tail = tail
            return "empty_stream"
        await client.commit()
        if tail:
            await client.write(tail)
        return None

    async def _diagnose_empty(self, request: web.Request, up: Upstream, att: _Attempt) -> bool:
        """An HTTP 200 stream with an empty body: llama.cpp's answer when the
        prompt does not fit its window (no error, nothing to learn from).
        Ask the same upstream the same thing, not streamed and for one token:
        a ``context_length_exceeded`` there states the window and the
        prompt's size, and the request can be fitted and asked again.
        Returns True when it was."""
        probe = {k: v for k, v in att.body.items() if k not in ("stream_options",)}
        probe.update(stream=False, max_tokens=1)
        probe.pop("max_completion_tokens", None)
        try:
            _, resp = await self._send(
                "POST",
                "/chat/completions",
                request,
                lambda u: orjson.dumps(probe),
                order=[up],
                retries=0,
            )
        except UpstreamFailure:
            return False
        try:
            if resp.status != 400:
                return False
            raw = await resp.content.read(ERROR_BODY_BYTES)
        except (TimeoutError, aiohttp.ClientError):
            return False
        finally:
            resp.close()
        return await self._context_exceeded(up, att, raw)


PROXY = web.AppKey("streamfix_proxy", Proxy)


def create_app(config: ServerConfig) -> web.Application:
    """The proxy as an aiohttp application. Run it with
    ``handler_cancellation=True`` (``web.run_app`` / ``AppRunner`` keyword)
    so that a client disconnect cancels the upstream request at once."""
    from .doors import add_doors, door_errors_mw  # they import this module

    proxy = Proxy(config)
    app = web.Application(
        client_max_size=config.body_limit,
        middlewares=[door_errors_mw, proxy.errors_mw, proxy.auth_mw],
    )
    app[PROXY] = proxy
    app.cleanup_ctx.append(proxy.lifecycle)
    recorder = record.Recorder.of(config, proxy.metrics)
    chat: Handler = proxy.chat
    if recorder is not None:  # --record DIR
        app[record.RECORDER] = recorder
        app.cleanup_ctx.append(recorder.lifecycle)
        chat = recorder.wrap(chat)
    app.router.add_post("/v1/chat/completions", chat)
    add_doors(app)
    app.router.add_get("/v1/models", proxy.models)
    app.router.add_get("/v1/models/{model:.+}", proxy.models)
    app.router.add_get("/healthz", proxy.healthz)
    app.router.add_get("/metrics", proxy.metrics_endpoint)
    return app


def app_from_env() -> web.Application:
    """The proxy configured from ``STREAMFIX_*`` variables (and
    ``STREAMFIX_CONFIG``), for process managers that import an app::

        STREAMFIX_UPSTREAM=http://127.0.0.1:8080/v1 gunicorn \\
            'streamfix.server.app:app_from_env()' \\
            --worker-class aiohttp.GunicornWebWorker --workers 4 --bind 127.0.0.1:8787

    (gunicorn's aiohttp worker does not cancel handlers on disconnect; the
    proxy then notices a gone client at the next upstream read.)
    """
    import os

    from .config import ConfigError, build_config

    cfg = build_config({}, os.environ)
    if not cfg.upstreams:
        raise ConfigError("no upstream: set STREAMFIX_UPSTREAM or [[upstream]] in STREAMFIX_CONFIG")
    return create_app(cfg)
