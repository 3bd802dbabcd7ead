"""The fault matrix: every way an upstream or a client can fail, against real
loopback servers (aiohttp apps on port 0, raw asyncio servers for the
broken-wire cases), each with its documented outcome.

The outcomes, for every row:

- the client always gets a clean end: an HTTP error with an OpenAI-shaped
  body (before the stream started), or an ``{"error": …}`` SSE event (after
  it started); never a hang, never a fake normal finish (no ``[DONE]``, no
  ``finish_reason`` after a failure);
- the upstream request is always closed (the raw server sees EOF, the
  aiohttp fake sees its handler end);
- nothing held is silently lost: a held call that cannot be completed ends
  the stream with an error, and is never emitted as a half call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Self

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix.server.proxy import PROXY

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app, refusing_url

MESSAGES = [{"role": "user", "content": "hi"}]

#: Longest a client waits for any reply in these tests: a hang fails fast.
CLIENT_WAIT = 5.0


def body(stream: bool = True, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, "stream": stream, **kw}


def tools_body(stream: bool = True, **kw: Any) -> dict[str, Any]:
    return body(stream, tools=SHAPES_TOOLS, **kw)


async def post(url: str, payload: Any) -> tuple[int, bytes]:
    async def go() -> tuple[int, bytes]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(url + "/chat/completions", data=orjson.dumps(payload)) as r,
        ):
            return r.status, await r.read()

    return await asyncio.wait_for(go(), CLIENT_WAIT)


def assert_openai_error(data: bytes) -> dict[str, Any]:
    err = orjson.loads(data)["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert {"message", "type", "code"} <= set(err)
    return err  # type: ignore[no-any-return]


def assert_error_end(data: bytes) -> dict[str, Any]:
    """A stream that ended because of a fault: an error event last, no
    [DONE], no finish_reason (and every data line is valid JSON)."""
    a = assemble(data)
    assert a.errors, data[-300:]
    assert not a.done and a.finish_reason is None
    last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b'data: {"error"'), last
    err = a.errors[-1]
    assert isinstance(err["message"], str) and err["message"] and err["type"]
    return err


# -- a raw upstream for broken wires ----------------------------------------------


@dataclass
class Conn:
    request: bytes = b""
    opened_at: float = field(default_factory=time.monotonic)
    #: When the proxy closed its side (we read EOF), or None.
    eof_at: float | None = None
    eof: asyncio.Event = field(default_factory=asyncio.Event)


Script = Callable[[asyncio.StreamWriter], Coroutine[Any, Any, None]]

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
)


class TcpUpstream:
    """An asyncio TCP server on a free loopback port (``url``) that hands
    each connection to ``_handle``; its handler tasks are cancelled at exit."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    @staticmethod
    async def read_request(reader: asyncio.StreamReader) -> bytes:
        """One HTTP request, head and body (``Content-Length`` framed)."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return head + await reader.readexactly(length)


class RawUpstream(TcpUpstream):
    """Reads one HTTP request per connection, then runs ``script(writer)``
    (which writes whatever bytes it likes and may abort), then waits for the
    peer to close. Records each connection."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script
        self.conns: list[Conn] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn()
        script: asyncio.Task[None] | None = None
        try:
            request = await self.read_request(reader)
            if request.startswith(b"GET "):  # the proxy's start-up probes
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            self.conns.append(conn)
            conn.request = request
            script = asyncio.create_task(self.script(writer))
            # whatever the script does, watch for the proxy closing its side
            # (or the script closing ours: EOF as well)
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):
                    pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            conn.eof_at = time.monotonic()
            conn.eof.set()
            if script is not None:
                script.cancel()
                with contextlib.suppress(BaseException):
                    await script
            writer.close()
            self._tasks.discard(task)

    async def closed(self, index: int = 0, within: float = 2.0) -> Conn:
        """Connection ``index``, once the proxy has closed it (fails if it
        does not within ``within`` seconds)."""
        deadline = time.monotonic() + within
        while len(self.conns) <= index:
            assert time.monotonic() < deadline, "no connection came"
            await asyncio.sleep(0.01)
        conn = self.conns[index]
        await asyncio.wait_for(conn.eof.wait(), max(0.01, deadline - time.monotonic()))
        return conn


def write_then(data: bytes, end: str = "close", delay: float = 0.0) -> Script:
    """Write ``data``, then ``end``: "close" (FIN), "abort" (RST), "hang"."""

    async def script(w: asyncio.StreamWriter) -> None:
        if delay:
            await asyncio.sleep(delay)
        w.write(data)
        await w.drain()
        if end == "close":
            w.close()
        elif end == "abort":
            w.transport.abort()
        elif end == "hang":
            pass  # wait for the proxy to give up and close

    return script


def hang_before_headers() -> Script:
    async def script(w: asyncio.StreamWriter) -> None:
        return None  # answer nothing; the handler then waits for EOF

    return script


# -- the upstream cannot be reached -----------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_refused_connection_is_502(stream: bool) -> None:
    async with AppServer(proxy_app(refusing_url(), retries=0)) as px:
        status, data = await post(px.url, body(stream))
    assert status == 502
    assert assert_openai_error(data)["code"] == "connect"


class ClosesReusedConnections(TcpUpstream):
    """A keep-alive upstream whose first completion leaves its connection
    spent: the next request on that connection is met by a close, with no
    reply. That is how llama-cpp-python treats a connection after an empty
    stream (it closes it a moment later; a request sent in that moment
    meets a closed connection). Every other connection stays usable."""

    REPLY = orjson.dumps(
        {"id": "c", "object": "chat.completion", "model": "m",
         "choices": [{"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "hello"}}]}
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.answered = 0
        self.dropped = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            spent = False
            while True:
                head = await self.read_request(reader)
                if spent:
                    self.dropped += 1
                    return
                if head.startswith(b"GET "):  # the proxy's start-up probes
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                else:
                    spent = self.answered == 0
                    self.answered += 1
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(self.REPLY), self.REPLY)
                    )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def test_a_reused_connection_closed_by_the_upstream_is_sent_again() -> None:
    """No retries configured, yet every request is answered: a request that
    meets a kept-alive connection the upstream has just closed goes out
    again on a new one, and the upstream is not counted as failing."""
    async with ClosesReusedConnections() as up, AppServer(proxy_app(up.url, retries=0)) as px:
        # the pool hands out its idle connections in turn (the start-up
        # probes opened a few): the spent one comes back within these
        for _ in range(8):
            status, data = await post(px.url, body(stream=False))
            assert status == 200, data
            assert orjson.loads(data)["choices"][0]["message"]["content"] == "hello"
        (upstream,) = px.app[PROXY].table.upstreams
        assert upstream.failures == 0
    assert up.dropped == 1 and up.answered == 8


@contextlib.asynccontextmanager
async def unanswered_syn_port() -> Any:
    """A port whose SYNs go unanswered: a listening socket with a full
    accept queue (backlog 0, one connection parked, never accepted), so the
    kernel drops further SYNs and a connect hangs until its timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    parked = []
    try:
        for _ in range(2):
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            parked.append(s)
        await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for s in parked:
            s.close()
        srv.close()


async def test_connect_timeout_is_504() -> None:
    async with unanswered_syn_port() as url:
        # Is the trick effective here? (the kernel may still complete it)
        probe = socket.socket()
        probe.settimeout(0.2)
        try:
            probe.connect((url.split("//")[1].split(":")[0], int(url.rsplit(":", 1)[1][:-3])))
        except (TimeoutError, OSError):
            pass
        else:
            pytest.skip("this kernel completes connections past a full backlog")
        finally:
            probe.close()
        async with AppServer(proxy_app(url, retries=0, connect_timeout=0.2)) as px:
            t0 = time.monotonic()
            status, data = await post(px.url, body())
    assert status == 504 and time.monotonic() - t0 < 2
    assert assert_openai_error(data)["code"] == "timeout"


@pytest.mark.parametrize("stream", [True, False])
async def test_accepts_and_never_answers_is_504(stream: bool) -> None:
    async with RawUpstream(hang_before_headers()) as up:
        async with AppServer(proxy_app(up.url, retries=0, read_timeout=0.2)) as px:
            t0 = time.monotonic()
            status, data = await post(px.url, body(stream))
            assert time.monotonic() - t0 < 2
        await up.closed()
    assert status == 504
    assert assert_openai_error(data)["code"] == "timeout"


async def test_read_timeout_mid_stream_is_an_error_event_and_closes() -> None:
    head = SSE_HEAD + sse([chunk(role="assistant"), chunk("par"), chunk("tial")], done=False)
    async with RawUpstream(write_then(head, "hang")) as up:
        async with AppServer(proxy_app(up.url, read_timeout=0.3)) as px:
            status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    err = assert_error_end(data)
    assert "TimeoutError" in err["message"] or "timed out" in err["message"].lower()
    assert assemble(data).content == "partial"


async def test_read_timeout_after_the_stream_has_flowed_a_while() -> None:
    """Chunks that keep coming, slower than the read timeout in all but
    total, then silence: the silence is what times out (``ReadWatch``, which
    takes over from aiohttp's per-read timer once the reply flows), and a
    slow but steady stream is not cut."""
    head = SSE_HEAD + sse([chunk(role="assistant")], done=False)

    async def script(w: asyncio.StreamWriter) -> None:
        w.write(head)
        await w.drain()
        for piece in ("one", " two", " three", " four"):
            await asyncio.sleep(0.15)  # 0.6 s in all, each gap under 0.3 s
            w.write(sse([chunk(piece)], done=False))
            await w.drain()
        # then nothing: the proxy must give up and close

    async with RawUpstream(script) as up:
        async with AppServer(proxy_app(up.url, read_timeout=0.3)) as px:
            t0 = time.monotonic()
            status, data = await post(px.url, body())
            waited = time.monotonic() - t0
        await up.closed()
    assert status == 200
    err = assert_error_end(data)
    assert "timed out" in err["message"].lower() or "TimeoutError" in err["message"]
    assert assemble(data).content == "one two three four"
    assert 0.6 + 0.3 <= waited < 0.6 + 0.3 + 1.0


# -- the upstream answers with an error -----------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_upstream_4xx_is_passed_on(status: int, stream: bool) -> None:
    async with FakeUpstream(Reply.error(status, "no such model", "model_not_found")) as up:
        async with AppServer(proxy_app(up.url)) as px:
            got, data = await post(px.url, body(stream))
        assert up.chat_requests[0].ended.is_set()
    assert got == status
    err = assert_openai_error(data)
    assert (err["message"], err["code"]) == ("no such model", "model_not_found")
    assert len(up.chat_requests) == 1  # a client error is not retried


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_upstream_5xx_and_429_after_retries_are_passed_on(status: int, stream: bool) -> None:
    reply = Reply.error(status, "overloaded")
    reply.headers = {"Retry-After": "7"}
    async with FakeUpstream(reply) as up, AppServer(proxy_app(up.url, retries=1)) as px:
        got, data = await post(px.url, body(stream))
    assert got == status
    assert assert_openai_error(data)["message"] == "overloaded"
    # retried once, then given up; a 500 is never asked again of the row
    # that answered it (upstream.pool: *Whose fault*)
    assert len(up.chat_requests) == (1 if status == 500 else 2)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("status", [404, 500])
async def test_upstream_error_that_is_not_json_becomes_openai_shaped(
    status: int, stream: bool
) -> None:
    html = Reply(status=status, body=b"<html><h1>Bad Gateway</h1></html>", content_type="text/html")
    async with FakeUpstream(html) as up, AppServer(proxy_app(up.url, retries=0)) as px:
        got, data = await post(px.url, body(stream))
    assert got == status
    err = assert_openai_error(data)
    assert str(status) in err["message"]


# -- the upstream sends a broken stream ------------------------------------------------


async def test_non_sse_body_is_an_error_not_a_finish() -> None:
    page = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n"
    page += b"<html><body>Welcome to nginx!</body></html>\n"
    async with RawUpstream(write_then(page)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    assert_error_end(data)


async def test_invalid_json_in_a_frame_is_a_protocol_error() -> None:
    raw = sse([chunk(role="assistant"), chunk("ok")], done=False) + b"data: {not json}\n\n"
    raw += sse([chunk(" more"), chunk(finish="stop")])
    async with FakeUpstream(Reply.stream(raw)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await asyncio.wait_for(up.chat_requests[0].ended.wait(), 2)
    assert status == 200
    err = assert_error_end(data)
    assert err["type"] == "upstream_protocol_error" and "not JSON" in err["message"]
    assert assemble(data).content == "ok"  # what came before is kept, nothing after


async def test_frame_over_the_size_limit_is_an_error_and_closes() -> None:
    # One event that never ends: 5 MiB of a data line, over the 4 MiB limit.
    head = SSE_HEAD + sse([chunk(role="assistant"), chunk("a")], done=False)
    head += b'data: {"x": "' + b"y" * (5 * 1024 * 1024)
    async with RawUpstream(write_then(head, "hang")) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    err = assert_error_end(data)
    assert "larger than" in err["message"]
    assert len(data) < 64 * 1024  # the oversized frame never reached the client


async def test_stream_without_done_is_an_error() -> None:
    raw = SSE_HEAD + text_stream(["par", "tial"], done=False)
    async with RawUpstream(write_then(raw)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    # the upstream even sent finish_reason "stop": without [DONE] the
    # proxy cannot know the stream is whole, so the client gets an error
    # after the upstream's own finish chunk, and no [DONE]
    a = assemble(data)
    assert a.errors and not a.done and "before [DONE]" in a.errors[-1]["message"]


@pytest.mark.parametrize("end", ["close", "abort"])
async def test_stream_that_stops_mid_frame(end: str) -> None:
    raw = SSE_HEAD + sse([chunk(role="assistant"), chunk("par")], done=False)
    raw += b'data: {"id": "chatcmpl-HALF", "choices": [{"index": 0, "del'
    async with RawUpstream(write_then(raw, end)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    assert_error_end(data)
    assert assemble(data).content == "par"
    assert b"HALF" not in data  # the half frame is not passed on


async def test_chunked_body_cut_mid_chunk() -> None:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    payload = sse([chunk(role="assistant"), chunk("par")], done=False)
    raw = head + f"{len(payload):x}\r\n".encode() + payload + b"\r\n" + b"400\r\ndata: {"
    async with RawUpstream(write_then(raw, "close")) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    assert_error_end(data)


HELD_CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A'


@pytest.mark.parametrize("end", ["close", "abort", "hang"])
async def test_stream_that_stops_inside_a_held_call(end: str) -> None:
    raw = SSE_HEAD + sse(
        [chunk(role="assistant", content=""), chunk("<tool_call>"), chunk(HELD_CALL[11:])],
        done=False,
    )
    async with RawUpstream(write_then(raw, end)) as up:
        async with AppServer(proxy_app(up.url, read_timeout=0.3)) as px:
            status, data = await post(px.url, tools_body())
        await up.closed()
    assert status == 200
    err = assert_error_end(data)
    a = assemble(data)
    # never a half call handed to the agent as if it were whole
    assert not a.tool_calls
    # the held text is either released as text or named by the error
    assert HELD_CALL in a.content or err["message"]


async def test_upstream_error_event_mid_stream_is_passed_on_and_ended() -> None:
    err = {"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}}
    raw = sse([chunk(role="assistant"), chunk("part")], done=False)
    raw += b"data: " + orjson.dumps(err) + b"\n\n"
    async with FakeUpstream(Reply.stream(raw)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body())
    assert status == 200
    a = assemble(data)
    assert a.errors[0]["message"] == "CUDA out of memory"
    assert not a.done and a.finish_reason is None


# -- the client goes away ---------------------------------------------------------------


async def _open_and_drop(url: str, payload: Any, read_until: bytes | None, wait: float) -> bytes:
    """POST, read until ``read_until`` appears (or nothing), wait, then drop
    the connection without reading the rest. Returns what was read."""
    got = b""
    async with aiohttp.ClientSession() as s:
        r = await asyncio.wait_for(s.post(url + "/chat/completions", json=payload), CLIENT_WAIT)
        if read_until is not None:
            while read_until not in got:
                got += await asyncio.wait_for(r.content.readany(), CLIENT_WAIT)
        await asyncio.sleep(wait)
        r.close()
    return got


@pytest.mark.parametrize("stream", [True, False])
async def test_client_disconnect_before_the_upstream_answered(stream: bool) -> None:
    async with (
        RawUpstream(write_then(b"", "hang", delay=30)) as up,
        AppServer(proxy_app(up.url)) as px,
    ):

        async def client() -> None:
            async with (
                aiohttp.ClientSession() as s,
                s.post(px.url + "/chat/completions", json=body(stream)) as r,
            ):
                await r.read()

        task = asyncio.create_task(client())
        await asyncio.sleep(0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        t0 = time.monotonic()
        conn = await up.closed(within=2)
    assert conn.eof_at is not None and conn.eof_at - t0 < 1.0


def held_call_upstream(tail: bytes) -> Script:
    """Role chunk, a call split over two frames, then ``tail`` forever
    (each time with a fresh number so no repetition cutter fires)."""

    async def script(w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + sse([chunk(role="assistant", content="")], done=False))
        await w.drain()
        for piece in ("<tool_call>", HELD_CALL[11:]):
            await asyncio.sleep(0.02)
            w.write(sse([chunk(piece)], done=False))
            await w.drain()
        n = 0
        while True:
            await asyncio.sleep(0.02)
            n += 1
            w.write(tail.replace(b"#", str(n).encode()))
            await w.drain()

    return script


async def test_client_disconnect_while_a_call_is_held() -> None:
    async with (
        RawUpstream(held_call_upstream(sse([chunk("1#")], done=False))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        await _open_and_drop(px.url, tools_body(), None, 0.3)
        t0 = time.monotonic()
        conn = await up.closed()
    assert conn.eof_at is not None and conn.eof_at - t0 < 1.0


async def test_client_disconnect_after_a_held_call() -> None:
    close = sse([chunk('A1"}}</tool_call>')], done=False)
    more = sse([chunk(" and then word # of the story")], done=False)

    async def full(w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + sse([chunk(role="assistant", content="")], done=False))
        w.write(sse([chunk("<tool_call>"), chunk(HELD_CALL[11:])], done=False) + close)
        await w.drain()
        n = 0
        while True:
            await asyncio.sleep(0.02)
            n += 1
            w.write(more.replace(b"#", str(n).encode()))
            await w.drain()

    async with RawUpstream(full) as up, AppServer(proxy_app(up.url)) as px:
        got = await _open_and_drop(px.url, tools_body(), b"lookup_order", 0.1)
        t0 = time.monotonic()
        conn = await up.closed()
    assert b"lookup_order" in got
    assert conn.eof_at is not None and conn.eof_at - t0 < 1.0


async def test_client_disconnect_during_plain_stream_closes_upstream() -> None:
    async with (
        RawUpstream(held_call_upstream(sse([chunk(" word # ")], done=False))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        await _open_and_drop(px.url, body(), b"data:", 0.05)
        t0 = time.monotonic()
        conn = await up.closed()
    assert conn.eof_at is not None and conn.eof_at - t0 < 1.0


# -- a slow client: bounded buffering ----------------------------------------------------


class CountingUpstream:
    """An aiohttp upstream that streams distinct text chunks as fast as the
    proxy takes them, counting the bytes it managed to write."""

    def __init__(self) -> None:
        self.written = 0
        self.closed = asyncio.Event()
        self._server: AppServer | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            first = sse([chunk(role="assistant", content="")], done=False)
            await resp.write(first)
            self.written += len(first)
            n = 0
            while True:
                n += 1
                # distinct text (a repeated one would be cut as a loop)
                data = sse([chunk(f" {n} {os.urandom(400).hex()}")], done=False)
                await resp.write(data)
                self.written += len(data)
                if n % 16 == 0:
                    await asyncio.sleep(0)  # share the loop with proxy and client
        finally:
            self.closed.set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        return app


#: What may sit between a fast upstream and a stalled client: the kernel
#: socket buffers of both hops (Linux loopback autotunes them to a few MB)
#: plus aiohttp's bounded stream buffers. Measured: about 10 MB.
IN_FLIGHT_BOUND = 32 * 1024 * 1024


async def plateau(up: CountingUpstream, limit: float = 8.0) -> int:
    """Wait until the upstream has written nothing for 0.5 s (its writes
    are blocked: every buffer between it and the stalled client is full);
    return how much it wrote. Fails if it is still writing after ``limit``."""
    deadline = time.monotonic() + limit
    last = -1
    while up.written != last:
        assert time.monotonic() < deadline, f"still writing: {up.written} bytes"
        last = up.written
        await asyncio.sleep(0.5)
    return last


async def test_slow_client_gets_backpressure_not_buffering() -> None:
    up = CountingUpstream()
    async with AppServer(up.app()) as ups, AppServer(proxy_app(ups.url)) as px:
        async with aiohttp.ClientSession() as s:
            r = await s.post(px.url + "/chat/completions", json=body())
            await r.content.readany()
            stalled_at = await plateau(up)  # the client reads nothing meanwhile
            await asyncio.sleep(0.5)
            grew = up.written - stalled_at
            # then it reads on: the stream is intact and still going
            got = b""
            while len(got) < 200_000:
                part = await asyncio.wait_for(r.content.readany(), CLIENT_WAIT)
                assert part, "the stream ended"
                got += part
            r.close()
        await asyncio.wait_for(up.closed.wait(), 2)
    # Without backpressure the upstream would go on writing (hundreds of MB
    # a second on loopback) into a growing buffer of the proxy. With it, it
    # stops once the kernel socket buffers of both hops and aiohttp's
    # bounded stream buffers are full (about 10 MB on Linux loopback).
    assert stalled_at < IN_FLIGHT_BOUND, stalled_at
    assert stalled_at + grew < IN_FLIGHT_BOUND, grew
    assert got.startswith(b"data: {") or b"\n\ndata: {" in got


async def test_a_slow_client_is_not_an_upstream_read_timeout() -> None:
    """The client stops reading for longer than the read timeout: the proxy
    waits on its write to the client, reads nothing from the upstream
    meanwhile, and that pause is not the upstream's silence (``ReadWatch``
    counts no time spent writing). When the client reads on, the stream
    goes on, with no timeout error in it."""
    up = CountingUpstream()
    async with (
        AppServer(up.app()) as ups,
        AppServer(proxy_app(ups.url, read_timeout=0.3)) as px,
        aiohttp.ClientSession() as s,
    ):
        r = await s.post(px.url + "/chat/completions", json=body())
        await r.content.readany()
        stalled_at = await plateau(up)  # 0.5 s at least: every buffer full
        await asyncio.sleep(0.5)
        got = b""
        # past all that the buffers held: what the proxy read after its
        # write to the client went through again
        while len(got) < stalled_at + 1_000_000:
            part = await asyncio.wait_for(r.content.readany(), CLIENT_WAIT)
            assert part, "the stream ended"
            got += part
        r.close()
    assert b'{"error"' not in got


async def test_slow_client_while_output_is_held_is_bounded() -> None:
    # tools offered: the proxy holds output while a re-ask is possible, but
    # never more than MAX_HELD_BYTES; then backpressure as above
    from streamfix.server.caller.stream import MAX_HELD_BYTES

    up = CountingUpstream()
    async with AppServer(up.app()) as ups, AppServer(proxy_app(ups.url)) as px:
        async with aiohttp.ClientSession() as s:
            r = await s.post(px.url + "/chat/completions", json=tools_body())
            stalled_at = await plateau(up)
            got = await asyncio.wait_for(r.content.readany(), CLIENT_WAIT)
            r.close()
        await asyncio.wait_for(up.closed.wait(), 2)
    assert got
    assert stalled_at < IN_FLIGHT_BOUND + MAX_HELD_BYTES, stalled_at


# -- two clients racing on one upstream connection pool ----------------------------------


def echo_upstream() -> FakeUpstream:
    def reply(rec: Any) -> Reply:
        said = rec.body["messages"][-1]["content"]
        return Reply.stream(text_stream([said, " (echo)"]), delay=0.001)

    return FakeUpstream(handler=reply)


async def test_two_clients_racing_on_a_pool_of_one_get_their_own_replies() -> None:
    async with (
        echo_upstream() as up,
        AppServer(proxy_app(up.url, pool_limit=1, pool_wait=5)) as px,
    ):

        async def client(name: str) -> list[str]:
            out = []
            async with aiohttp.ClientSession() as s:
                for i in range(15):
                    msg = [{"role": "user", "content": f"{name}-{i}"}]
                    async with s.post(px.url + "/chat/completions", json=body(messages=msg)) as r:
                        out.append(assemble(await r.read()).content)
            return out

        a, b = await asyncio.wait_for(asyncio.gather(client("a"), client("b")), 20)
    assert a == [f"a-{i} (echo)" for i in range(15)]
    assert b == [f"b-{i} (echo)" for i in range(15)]
    assert all(r.ended.is_set() for r in up.chat_requests)


async def test_abandoned_stream_frees_its_pool_slot_for_the_other_client() -> None:
    head = sse([chunk(role="assistant"), chunk("a")], done=False)
    forever = Reply.stream(head, delay=0.01, repeat=b": still here\n\n")
    async with FakeUpstream() as up:
        up.push(forever)  # the first request hangs on; the second is served
        up.default = Reply.stream(text_stream(["second"]))
        async with AppServer(proxy_app(up.url, pool_limit=1, pool_wait=5)) as px:
            async with aiohttp.ClientSession() as s:
                r1 = await s.post(px.url + "/chat/completions", json=body())
                await r1.content.readany()

                async def second() -> tuple[int, bytes]:
                    return await post(px.url, body())

                task = asyncio.create_task(second())
                await asyncio.sleep(0.2)
                assert not task.done()  # waiting for the one slot
                r1.close()
                status, data = await task
            await asyncio.wait_for(up.chat_requests[0].ended.wait(), 2)
    assert status == 200 and assemble(data).content == "second"
    assert up.chat_requests[0].disconnected


# -- a bug of ours -------------------------------------------------------------------------


async def test_internal_error_mid_stream_is_an_error_event_and_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streamfix.session import SSESession

    real = SSESession.feed
    calls = 0

    def broken(self: SSESession, data: bytes) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("simulated bug")
        return real(self, data)

    monkeypatch.setattr(SSESession, "feed", broken)
    async with RawUpstream(held_call_upstream(sse([chunk(" word # ")], done=False))) as up:
        async with AppServer(proxy_app(up.url)) as px:
            status, data = await post(px.url, body())
        await up.closed()
    assert status == 200
    err = assert_error_end(data)
    assert "simulated bug" not in err["message"]  # no internals to the client


@pytest.mark.parametrize("stream", [True, False])
async def test_internal_error_before_the_reply_is_an_openai_500(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    from streamfix.chain import Chain
    from streamfix.session import SSESession

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(Chain, "complete", boom)
    monkeypatch.setattr(SSESession, "__init__", boom)
    reply = Reply.stream(text_stream(["ok"])) if stream else Reply.json({"choices": []})
    async with FakeUpstream(reply) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, body(stream))
        assert up.chat_requests[0].ended.is_set()
    assert status in (200, 500)
    if status == 500:
        err = assert_openai_error(data)
        assert err["type"] == "internal_error" and "simulated" not in err["message"]
    else:  # the stream had begun: an error event
        assert_error_end(data)


# -- a reply too large to hold --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["completion", "json_for_stream", "models"])
async def test_non_streamed_reply_over_the_limit_is_502(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from streamfix.server.caller import replies as replies_module

    monkeypatch.setattr(replies_module, "MAX_REPLY_BYTES", 100_000)
    big = {"choices": [{"index": 0, "message": {"content": "x" * 200_000}}]}
    reply = Reply.json(big)
    async with (
        FakeUpstream(reply, routes={"/v1/models": big}) as up,
        AppServer(proxy_app(up.url, retries=0)) as px,
    ):
        if kind == "models":
            async with aiohttp.ClientSession() as s, s.get(px.url + "/models") as r:
                status, data = r.status, await r.read()
        else:
            status, data = await post(px.url, body(stream=kind == "json_for_stream"))
    assert status == 502
    assert "reply larger than" in assert_openai_error(data)["message"]


# -- --request-timeout -----------------------------------------------------------------------------


async def test_request_timeout_before_the_reply_began_is_a_504() -> None:
    hang = Reply(parts=[b'{"id": "x", '], content_type="application/json", end="hang")
    async with FakeUpstream(hang) as up, AppServer(proxy_app(up.url, request_timeout=0.3)) as px:
        t0 = time.monotonic()
        status, data = await post(px.url, body(stream=False))
        took = time.monotonic() - t0
        await asyncio.wait_for(up.requests[-1].ended.wait(), 5)
    assert status == 504 and 0.3 <= took < 3
    assert orjson.loads(data)["error"]["code"] == "request_timeout"
    assert up.requests[-1].disconnected  # the upstream request was closed


async def test_request_timeout_mid_stream_ends_with_an_error_event() -> None:
    """A reply that streams on and on (slowly, so the silence timeout never
    fires) is bounded as a whole: the client gets what came, then an error
    event, and the upstream request is closed."""
    slow = Reply.stream(sse([chunk(role="assistant"), chunk("Once ")], done=False), delay=0.05)
    slow.repeat = b"".join(sse([chunk(f"{w} ")], done=False) for w in ("upon", "a", "time"))
    async with FakeUpstream(slow) as up, AppServer(proxy_app(up.url, request_timeout=0.5)) as px:
        status, data = await post(px.url, body())
        await asyncio.wait_for(up.requests[-1].ended.wait(), 5)
    got = assemble(data)
    assert status == 200 and got.content.startswith("Once upon a time")
    assert not got.done and got.errors[-1]["code"] == "request_timeout"
    assert up.requests[-1].disconnected


class DropsEveryRequest(TcpUpstream):
    """An upstream that is down: it reads each request and closes the
    connection without a reply, counting the chat requests it met."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await self.read_request(reader)
            if head.startswith(b"POST "):
                self.posts += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _sdk_attempts(retries: int, sdk_retries: int, stream: bool) -> tuple[int, Any]:
    """Upstream requests one OpenAI SDK call makes through the proxy, and
    the error it raised."""
    import openai

    async with (
        DropsEveryRequest() as up,
        AppServer(proxy_app(up.url, retries=retries)) as px,
        openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=sdk_retries) as oai,
    ):
        with pytest.raises(openai.APIStatusError) as err:
            await oai.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream=stream,
            )
        return up.posts, err.value


@pytest.mark.parametrize("stream", [True, False])
async def test_a_failure_streamfix_retried_is_not_retried_by_the_sdk(stream: bool) -> None:
    """An upstream down: streamfix's own rounds (``retries`` 1: two rounds),
    then a 502 with ``x-should-retry: false``; the SDK (two retries by
    default) asks no more, so the upstream meets streamfix's attempts only."""
    alone, _ = await _sdk_attempts(1, 0, stream)
    posts, err = await _sdk_attempts(1, 2, stream)
    assert err.status_code == 502
    assert err.response.headers["x-should-retry"] == "false"
    assert posts == alone >= 2  # not three times as many


async def test_a_failure_streamfix_did_not_retry_is_left_to_the_sdk() -> None:
    """``--retries 0`` on one row: one attempt, no header; the SDK's own
    retries are the only ones, as the policy says (docs/guarantees.md)."""
    alone, _ = await _sdk_attempts(0, 0, False)
    posts, err = await _sdk_attempts(0, 1, False)
    assert err.status_code == 502 and "x-should-retry" not in err.response.headers
    assert posts == 2 * alone
