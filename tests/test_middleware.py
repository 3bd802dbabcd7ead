"""The aiohttp mounts: a server middleware in front of unchanged handlers, a
client middleware in a real ClientSession, both over real loopback HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.context import Report
from streamfix.middleware import (
    REPORT_KEY,
    StreamCut,
    report_of,
    streamfix_client_middleware,
    streamfix_middleware,
)
from tests.support.streamutil import CAPTURES, Assembled, assemble, chunk, split_at, sse, tool

B2 = (CAPTURES / "b2_tools_named_choice_stream_default_format.sse").read_bytes()
PLAIN = (CAPTURES / "a_plain_stream.sse").read_bytes()
C2 = (CAPTURES / "c2_tools_named_choice_nostream_default_format.json").read_bytes()
TEXT_CALL = (CAPTURES / "d_toolcall_as_text.sse").read_bytes()
LOOP = (CAPTURES / "e_repetition_cat_mat_exact_loop.sse").read_bytes()

WEATHER = [tool("get_weather", {"city": {"type": "string"}}, ["city"])]
TOOLS_REQUEST: dict[str, Any] = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": WEATHER,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "stream": True,
}
PLAIN_REQUEST: dict[str, Any] = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "Hi"}],
    "stream": True,
}
#: Not JSON: the chain reports an upstream protocol error and ends the stream.
BROKEN = (
    sse([chunk(role="assistant", content=""), chunk("Hello")], done=False) + b"data: {not json\n\n"
)

# --------------------------------------------------------------------------
# The existing app: handlers that know nothing about streamfix


class Script:
    """What the upstream-like handler replays, and what it saw."""

    def __init__(self, body: bytes = B2, piece: int = 7, delay: float = 0.0, tail: int = 0) -> None:
        self.body = body
        self.piece = piece
        self.delay = delay
        self.tail = tail  # extra pieces written after the body (a stream that goes on)
        self.requests: list[dict[str, Any]] = []
        self.stopped_at: float | None = None
        self.stop_exc: BaseException | None = None


SCRIPT = web.AppKey("script", Script)


async def stream_handler(request: web.Request) -> web.StreamResponse:
    """A typical hand-written SSE endpoint: prepare, write pieces, return."""
    script = request.app[SCRIPT]
    script.requests.append(await request.json())
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    if request.query.get("gzip"):
        resp.enable_compression()
    if request.query.get("length"):
        resp.content_length = len(script.body)
    await resp.prepare(request)
    data = script.body
    try:
        for i in range(0, len(data), script.piece):
            await resp.write(data[i : i + script.piece])
            if script.delay:
                await asyncio.sleep(script.delay)
        for _ in range(script.tail):
            await asyncio.sleep(0.01)
            await resp.write(b": still going\n\n")
    except ConnectionResetError as exc:  # the client hung up: stop the upstream
        script.stopped_at = time.monotonic()
        script.stop_exc = exc
    except asyncio.CancelledError as exc:  # aiohttp cancels a handler whose client left
        script.stopped_at = time.monotonic()
        script.stop_exc = exc
        raise
    return resp


async def careless_stream_handler(request: web.Request) -> web.StreamResponse:
    """Writes without catching anything."""
    script = request.app[SCRIPT]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        for i in range(0, len(script.body), script.piece):
            await resp.write(script.body[i : i + script.piece])
        for _ in range(script.tail):
            await asyncio.sleep(0.01)
            await resp.write(b": still going\n\n")
    finally:
        script.stopped_at = time.monotonic()
    return resp


async def json_handler(request: web.Request) -> web.Response:
    await request.json()
    return web.Response(body=C2, content_type="application/json")


async def json_stream_handler(request: web.Request) -> web.StreamResponse:
    """A non-streamed completion written through a StreamResponse."""
    await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(C2)
    await resp.prepare(request)
    for i in range(0, len(C2), 50):
        await resp.write(C2[i : i + 50])
    return resp


async def error_handler(request: web.Request) -> web.Response:
    return web.json_response(
        {"error": {"message": "overloaded", "type": "server_error"}}, status=503
    )


async def models_handler(request: web.Request) -> web.Response:
    return web.Response(
        body=(CAPTURES / "models.json").read_bytes(), content_type="application/json"
    )


def make_app(script: Script, middlewares: list[Any]) -> web.Application:
    app = web.Application(middlewares=middlewares)
    app[SCRIPT] = script
    app.router.add_post("/v1/chat/completions", stream_handler)
    app.router.add_post("/careless/v1/chat/completions", careless_stream_handler)
    app.router.add_post("/json/v1/chat/completions", json_handler)
    app.router.add_post("/jsonstream/v1/chat/completions", json_stream_handler)
    app.router.add_post("/error/v1/chat/completions", error_handler)
    app.router.add_post("/v1/other", stream_handler)
    app.router.add_get("/v1/models", models_handler)
    return app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[TestServer]]]:
    servers: list[TestServer] = []

    async def start(script: Script, middlewares: list[Any] | None = None) -> TestServer:
        server = TestServer(make_app(script, middlewares or []), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for s in servers:
        await s.close()


async def post(
    server: TestServer, path: str, body: dict[str, Any], **session_kw: Any
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(**session_kw) as session,
        session.post(server.make_url(path), json=body) as resp,
    ):
        return resp.status, await resp.read()


def names(a: Assembled) -> list[str]:
    return [c["function"]["name"] for c in a.tool_calls]


# --------------------------------------------------------------------------
# Server middleware


async def test_without_the_middleware_the_repeated_name_is_doubled(serve: Any) -> None:
    """The control: llama.cpp repeats the name in every delta, so a client
    that appends (the OpenAI SDK) assembles a doubled name."""
    server = await serve(Script(B2))
    _, data = await post(server, "/v1/chat/completions", TOOLS_REQUEST)
    assert names(assemble(data)) != ["get_weather"]


@pytest.mark.parametrize("piece", [1, 3, 7, 64, len(B2)])
async def test_server_middleware_repairs_the_llamacpp_tool_stream(serve: Any, piece: int) -> None:
    script = Script(B2, piece=piece)
    server = await serve(script, [streamfix_middleware()])
    status, data = await post(server, "/v1/chat/completions", TOOLS_REQUEST)
    a = assemble(data)
    assert status == 200
    assert names(a) == ["get_weather"]
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert a.finish_reason == "tool_calls" and a.done and not a.errors
    assert script.requests == [TOOLS_REQUEST]  # the handler still read the body


@pytest.mark.parametrize("piece", [1, 5, 64])
async def test_server_middleware_leaves_a_plain_stream_byte_identical(
    serve: Any, piece: int
) -> None:
    server = await serve(Script(PLAIN, piece=piece), [streamfix_middleware()])
    _, data = await post(server, "/v1/chat/completions", PLAIN_REQUEST)
    assert data == PLAIN


@settings(max_examples=25)
@given(cuts=st.lists(st.integers(1, len(B2) - 1), max_size=40))
def test_server_middleware_any_write_boundaries(cuts: list[int]) -> None:
    """Whatever the handler's write boundaries (inside a UTF-8 sequence, an
    event, a field name), the client assembles the same single call."""
    parts = split_at(B2, cuts)

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in parts:
            await resp.write(part)
        return resp

    async def go() -> bytes:
        app = web.Application(middlewares=[streamfix_middleware()])
        app.router.add_post("/v1/chat/completions", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            return (await post(server, "/v1/chat/completions", TOOLS_REQUEST))[1]
        finally:
            await server.close()

    a = assemble(asyncio.run(go()))
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert a.finish_reason == "tool_calls" and a.done


async def test_server_middleware_with_compression(serve: Any) -> None:
    server = await serve(Script(B2, piece=11), [streamfix_middleware()])
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/chat/completions?gzip=1"), json=TOOLS_REQUEST) as resp,
    ):
        assert resp.headers.get("Content-Encoding") in ("gzip", "deflate")
        data = await resp.read()
    assert assemble(data).calls() == [("get_weather", {"city": "Paris"})]


async def test_server_middleware_rechunks_a_stream_with_a_declared_length(serve: Any) -> None:
    server = await serve(Script(B2, piece=13), [streamfix_middleware()])
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/chat/completions?length=1"), json=TOOLS_REQUEST) as resp,
    ):
        assert "Content-Length" not in resp.headers
        data = await resp.read()
    assert assemble(data).calls() == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("path", ["/json/v1/chat/completions", "/jsonstream/v1/chat/completions"])
async def test_server_middleware_repairs_a_non_streamed_completion(serve: Any, path: str) -> None:
    plain_server = await serve(Script())
    _, raw = await post(plain_server, path, {**TOOLS_REQUEST, "stream": False})
    assert "function_call" in orjson.loads(raw)["choices"][0]["message"]  # the control

    server = await serve(Script(), [streamfix_middleware()])
    status, data = await post(server, path, {**TOOLS_REQUEST, "stream": False})
    message = orjson.loads(data)["choices"][0]["message"]
    assert status == 200
    assert "function_call" not in message  # the legacy duplicate is dropped
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/models", None),
        ("POST", "/v1/other", TOOLS_REQUEST),  # another route: untouched even if it streams
        ("POST", "/error/v1/chat/completions", TOOLS_REQUEST),  # an error status: untouched
    ],
)
async def test_server_middleware_leaves_other_routes_alone(
    serve: Any, method: str, path: str, body: dict[str, Any] | None
) -> None:
    direct = await serve(Script(B2))
    mounted = await serve(Script(B2), [streamfix_middleware()])
    results = []
    for server in (direct, mounted):
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, server.make_url(path), json=body) as resp,
        ):
            results.append((resp.status, await resp.read()))
    assert results[0] == results[1]


async def test_server_middleware_ignores_a_body_that_is_not_json(serve: Any) -> None:
    async def raw_handler(request: web.Request) -> web.Response:
        return web.Response(text=(await request.read()).decode())

    app = web.Application(middlewares=[streamfix_middleware()])
    app.router.add_post("/v1/chat/completions", raw_handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.make_url("/v1/chat/completions"), data=b"not json") as resp,
        ):
            assert await resp.text() == "not json"
    finally:
        await server.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/careless/v1/chat/completions"])
async def test_server_middleware_ends_a_broken_stream_and_stops_the_handler(
    serve: Any, path: str
) -> None:
    """After the chain ends the turn, the client gets an error event and a
    clean end at once, and the handler's next write raises (a careful
    handler catches it like a disconnect; a careless one is absorbed)."""
    # The tail alone takes 20 s to write: a handler stopped within 10 s was
    # stopped, not finished (a bound a loaded two-core machine keeps).
    script = Script(BROKEN, piece=16, delay=0.01, tail=2000)
    server = await serve(script, [streamfix_middleware()])
    started = time.monotonic()
    status, data = await post(server, path, TOOLS_REQUEST)
    a = assemble(data)
    assert status == 200
    assert a.content == "Hello"
    assert [e["type"] for e in a.errors] == ["upstream_protocol_error"]
    assert script.stopped_at is not None and script.stopped_at - started < 10.0
    if path == "/v1/chat/completions":
        assert isinstance(script.stop_exc, StreamCut)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/careless/v1/chat/completions"])
async def test_server_middleware_cuts_a_loop_and_stops_the_handler(serve: Any, path: str) -> None:
    """llama.cpp's exact loop (capture e_): the client gets the text up to
    the cut and a clean ``[DONE]``; the handler is told to stop at once,
    long before its stream would have ended."""
    reports: list[Report] = []

    @web.middleware
    async def spy(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        finally:
            reports.append(request[REPORT_KEY])

    script = Script(LOOP, piece=256, tail=200)
    server = await serve(script, [spy, streamfix_middleware()])
    started = time.monotonic()
    _, data = await post(server, path, PLAIN_REQUEST)
    a = assemble(data)
    assert a.done and not a.errors
    assert 0 < len(a.content) < len(assemble(LOOP).content)
    assert reports and reports[0].cut is not None and reports[0].cut["cut"] == "repetition"
    assert script.stopped_at is not None and script.stopped_at - started < 1.5
    if path == "/v1/chat/completions":
        assert isinstance(script.stop_exc, StreamCut)


async def test_server_middleware_exposes_the_report(serve: Any) -> None:
    reports: list[Report] = []

    @web.middleware
    async def spy(request: web.Request, handler: Any) -> web.StreamResponse:
        resp = await handler(request)
        reports.append(request[REPORT_KEY])
        return resp

    server = await serve(Script(B2), [spy, streamfix_middleware()])
    await post(server, "/v1/chat/completions", TOOLS_REQUEST)
    assert len(reports) == 1 and isinstance(reports[0], Report)


def test_server_middleware_rejects_unknown_options() -> None:
    with pytest.raises(TypeError, match="unknown streamfix option"):
        streamfix_middleware(lfit=True)


async def test_server_middleware_lifts_a_call_written_as_text(serve: Any) -> None:
    server = await serve(Script(TEXT_CALL, piece=5), [streamfix_middleware()])
    request = {**TOOLS_REQUEST, "tool_choice": "auto"}
    _, data = await post(server, "/v1/chat/completions", request)
    a = assemble(data)
    assert names(a) == ["get_weather"]
    assert "<tool_call>" not in a.content


# --------------------------------------------------------------------------
# Client middleware


async def read_with(resp: aiohttp.ClientResponse, how: str) -> bytes:
    if how == "iter_any":
        return b"".join([c async for c in resp.content.iter_any()])
    if how == "iter_chunked":
        return b"".join([c async for c in resp.content.iter_chunked(5)])
    if how == "lines":
        return b"".join([line async for line in resp.content])
    if how == "readline":
        out = b""
        while line := await resp.content.readline():
            out += line
        return out
    if how == "read":
        return await resp.read()
    raise AssertionError(how)


READS = ["iter_any", "iter_chunked", "lines", "readline", "read"]


async def client_post(server: TestServer, path: str, how: str, **kw: Any) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(middlewares=(streamfix_client_middleware(),)) as session,
        session.post(server.make_url(path), **kw) as resp,
    ):
        return resp.status, await read_with(resp, how)


@pytest.mark.parametrize("how", READS)
async def test_client_middleware_repairs_the_llamacpp_tool_stream(serve: Any, how: str) -> None:
    server = await serve(Script(B2, piece=9))
    status, data = await client_post(server, "/v1/chat/completions", how, json=TOOLS_REQUEST)
    a = assemble(data)
    assert status == 200
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert a.finish_reason == "tool_calls" and a.done


async def test_client_middleware_reads_the_tools_from_a_bytes_body(serve: Any) -> None:
    server = await serve(Script(B2))
    _, data = await client_post(
        server,
        "/v1/chat/completions",
        "read",
        data=orjson.dumps(TOOLS_REQUEST),
        headers={"Content-Type": "application/json"},
    )
    assert names(assemble(data)) == ["get_weather"]


@pytest.mark.parametrize("how", READS)
async def test_client_middleware_leaves_a_plain_stream_byte_identical(serve: Any, how: str) -> None:
    server = await serve(Script(PLAIN, piece=3))
    _, data = await client_post(server, "/v1/chat/completions", how, json=PLAIN_REQUEST)
    assert data == PLAIN


async def test_client_middleware_repairs_json(serve: Any) -> None:
    server = await serve(Script())
    async with (
        aiohttp.ClientSession(middlewares=(streamfix_client_middleware(),)) as session,
        session.post(
            server.make_url("/json/v1/chat/completions"), json={**TOOLS_REQUEST, "stream": False}
        ) as resp,
    ):
        completion = await resp.json()
    message = completion["choices"][0]["message"]
    assert "function_call" not in message
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models"), ("POST", "/v1/other"), ("POST", "/error/v1/chat/completions")],
)
async def test_client_middleware_leaves_other_requests_alone(
    serve: Any, method: str, path: str
) -> None:
    server = await serve(Script(B2))
    results = []
    for middlewares in ((), (streamfix_client_middleware(),)):
        async with (
            aiohttp.ClientSession(middlewares=middlewares) as session,
            session.request(
                method, server.make_url(path), json=TOOLS_REQUEST if method == "POST" else None
            ) as resp,
        ):
            results.append((resp.status, await resp.read()))
    assert results[0] == results[1]


async def test_client_middleware_closes_the_upstream_when_the_stream_ends_early(serve: Any) -> None:
    script = Script(BROKEN, piece=16, delay=0.01, tail=500)
    server = await serve(script)
    async with (
        aiohttp.ClientSession(middlewares=(streamfix_client_middleware(),)) as session,
        session.post(server.make_url("/v1/chat/completions"), json=TOOLS_REQUEST) as resp,
    ):
        data = b"".join([c async for c in resp.content.iter_any()])
        ended = time.monotonic()
        report = report_of(resp)
    a = assemble(data)
    assert a.content == "Hello" and [e["type"] for e in a.errors] == ["upstream_protocol_error"]
    for _ in range(50):  # the server notices the closed connection on its next write
        if script.stopped_at is not None:
            break
        await asyncio.sleep(0.01)
    assert script.stopped_at is not None and script.stopped_at - ended < 0.2
    assert report is not None


async def test_client_middleware_cuts_a_loop_and_closes_the_upstream(serve: Any) -> None:
    script = Script(LOOP, piece=256, tail=500)
    server = await serve(script)
    async with (
        aiohttp.ClientSession(middlewares=(streamfix_client_middleware(),)) as session,
        session.post(server.make_url("/v1/chat/completions"), json=PLAIN_REQUEST) as resp,
    ):
        data = b"".join([line async for line in resp.content])
        ended = time.monotonic()
        report = report_of(resp)
    a = assemble(data)
    assert a.done and not a.errors
    assert 0 < len(a.content) < len(assemble(LOOP).content)
    assert report is not None and report.cut is not None
    for _ in range(50):
        if script.stopped_at is not None:
            break
        await asyncio.sleep(0.01)
    assert script.stopped_at is not None and script.stopped_at - ended < 0.1


async def test_client_middleware_report(serve: Any) -> None:
    server = await serve(Script(B2))
    async with (
        aiohttp.ClientSession(middlewares=(streamfix_client_middleware(),)) as session,
        session.post(server.make_url("/v1/chat/completions"), json=TOOLS_REQUEST) as resp,
    ):
        await resp.read()
        assert isinstance(report_of(resp), Report)
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.make_url("/v1/models")) as resp,
    ):
        assert report_of(resp) is None


async def test_client_middleware_lifts_a_call_written_as_text(serve: Any) -> None:
    server = await serve(Script(TEXT_CALL, piece=5))
    _, data = await client_post(
        server, "/v1/chat/completions", "lines", json={**TOOLS_REQUEST, "tool_choice": "auto"}
    )
    a = assemble(data)
    assert names(a) == ["get_weather"]
    assert "<tool_call>" not in a.content
