"""A scripted OpenAI-compatible upstream: a real aiohttp server on loopback.

For tests of anything that talks HTTP to a backend (the proxy, the
middlewares, benchmarks). Not a mock: a real socket, real chunked
transfer, real disconnects. Usage::

    async with FakeUpstream() as up:
        up.push(Reply.stream(text_stream(["Hel", "lo"])))
        ... POST to f"{up.url}/chat/completions" ...
        up.requests[0].body        # what it received
        up.requests[0].closed_at   # when its side of the reply ended

Replies are taken from ``push``-ed ones in order, then ``default``.
A reply can stream parts with a delay, repeat one part forever (a loop
that only a client disconnect or a proxy cut ends), end cleanly, abort
the connection mid-stream, or answer with any status and body. Every
``/chat/completions`` request is recorded with its body, headers, start
and end times and whether the peer went away. ``routes`` adds any GET
endpoint (``/v1/models``, ``/props``...) returning JSON.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from aiohttp import web

from streamfix.tools.local import free_port

from .streamutil import chunk, sse


@dataclass
class Reply:
    status: int = 200
    #: A whole body (non-streamed replies, errors). Wins over ``parts``.
    body: bytes | None = None
    content_type: str = "text/event-stream"
    parts: Sequence[bytes] = ()
    delay: float = 0.0  # seconds before each part
    #: After ``parts``, send this forever, every ``delay`` seconds.
    repeat: bytes | None = None
    #: How the reply ends: "eof" (normal end), "abort" (drop the TCP
    #: connection without ending the chunked body), "hang" (send nothing
    #: more, keep the connection open).
    end: str = "eof"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def stream(cls, data: bytes | Sequence[bytes], delay: float = 0.0, **kw: Any) -> Reply:
        parts = [data] if isinstance(data, bytes) else list(data)
        return cls(parts=parts, delay=delay, **kw)

    @classmethod
    def events(cls, data: bytes, delay: float = 0.0, **kw: Any) -> Reply:
        """One write per SSE event of ``data``, ``delay`` seconds apart."""
        parts = [e + b"\n\n" for e in data.split(b"\n\n") if e]
        return cls(parts=parts, delay=delay, **kw)

    @classmethod
    def json(cls, obj: Any, status: int = 200, **kw: Any) -> Reply:
        return cls(status=status, body=orjson.dumps(obj), content_type="application/json", **kw)

    @classmethod
    def error(cls, status: int, message: str = "boom", code: str | None = None) -> Reply:
        err = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
        return cls.json(err, status=status)

    @classmethod
    def empty(cls) -> Reply:
        """HTTP 200 and no body at all (llama.cpp on a streamed overflow)."""
        return cls(body=b"")


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str = "stop",
    **extra: Any,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        **extra,
    }


def call_chunks(
    name: str, arguments: str, pieces: int = 3, call_id: str = "call_1", repeat_name: bool = False
) -> bytes:
    """A structured streamed tool call, arguments split in ``pieces``; with
    ``repeat_name``, id, type and name in every piece (llama-cpp-python)."""
    step = max(1, len(arguments) // pieces)
    frags = [arguments[i : i + step] for i in range(0, len(arguments), step)]
    chunks = [chunk(role="assistant")]
    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": name}}
    if not repeat_name:
        chunks.append(chunk(tool_calls=[{**head, "function": {"name": name, "arguments": ""}}]))
    for f in frags:
        piece = {**head, "function": {"name": name, "arguments": f}} if repeat_name else None
        chunks.append(chunk(tool_calls=[piece or {"index": 0, "function": {"arguments": f}}]))
    chunks.append(chunk(finish="tool_calls"))
    return sse(chunks)


@dataclass
class Received:
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    started_at: float
    closed_at: float | None = None
    #: The peer went away (or the server was cancelled) before the reply ended.
    disconnected: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def refusing_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


class AppServer:
    """Any aiohttp app (the proxy, a middleware-wrapped app) on loopback,
    run as ``streamfix serve`` runs it (``handler_cancellation=True``)."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> Self:
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class FakeUpstream(AppServer):
    """A scripted OpenAI-compatible upstream on loopback: replies from
    ``queue``, ``handler`` or ``default``; every request recorded."""

    def __init__(
        self,
        default: Reply | None = None,
        routes: dict[str, Any] | None = None,
        handler: Callable[[Received], Reply | None] | None = None,
    ) -> None:
        self.default = default or Reply.stream(
            sse([chunk(role="assistant"), chunk("hi"), chunk(finish="stop")])
        )
        self.queue: deque[Reply] = deque()
        #: GET path (without host) -> JSON body, e.g. {"/v1/models": {...}}
        self.routes: dict[str, Any] = dict(routes or {})
        #: Called for each chat request; a Reply it returns wins.
        self.handler = handler
        self.requests: list[Received] = []
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        super().__init__(app)

    def push(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    @property
    def chat_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        rec = Received(request.method, request.path, body, dict(request.headers), time.monotonic())
        self.requests.append(rec)
        try:
            if request.method == "GET":
                if request.path in self.routes:
                    return web.Response(
                        body=orjson.dumps(self.routes[request.path]),
                        content_type="application/json",
                    )
                return web.Response(status=404, text="not found")
            reply = self.handler(rec) if self.handler else None
            if reply is None:
                reply = self.queue.popleft() if self.queue else self.default
            return await self._reply(request, reply)
        except (asyncio.CancelledError, ConnectionResetError):
            rec.disconnected = True
            raise
        finally:
            rec.closed_at = time.monotonic()
            rec.ended.set()

    async def _reply(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        if reply.body is not None:
            resp = web.Response(status=reply.status, body=reply.body, headers=reply.headers)
            resp.content_type = reply.content_type
            return resp
        resp = web.StreamResponse(status=reply.status, headers=reply.headers)
        resp.content_type = reply.content_type
        await resp.prepare(request)
        for part in reply.parts:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            await resp.write(part)
        if reply.repeat is not None:
            while True:
                await asyncio.sleep(reply.delay)
                await resp.write(reply.repeat)
        if reply.end == "abort":
            assert request.transport is not None
            request.transport.abort()
            raise ConnectionResetError("aborted on purpose")
        if reply.end == "hang":
            await asyncio.sleep(3600)
        await resp.write_eof()
        return resp


def proxy_app(*upstreams: str, **settings: Any) -> web.Application:
    """The streamfix proxy app in front of these upstream URLs (fast
    retries by default, so failure tests stay quick)."""
    from streamfix.server.app import create_app
    from streamfix.server.config import ServerConfig, parse_upstream

    settings.setdefault("backoff", 0.01)
    settings.setdefault("probe_interval", 0)
    cfg = ServerConfig(upstreams=[parse_upstream(u) for u in upstreams], **settings)
    return create_app(cfg)
