"""The aiohttp mounts: repair chat completions inside an existing aiohttp
server or client, without a proxy.

``streamfix_middleware()`` is a *server* middleware. An app whose handler
streams OpenAI-style SSE (``web.StreamResponse``: ``prepare``, ``write``)
or returns a JSON ``web.Response`` for ``POST …/chat/completions`` gets
repaired output by adding it; handlers are unchanged::

    app = web.Application(middlewares=[streamfix_middleware()])

How: before the handler runs, the request's payload writer (what
``StreamResponse.prepare`` binds the response to, ``request.writer``) is
wrapped. The wrapper sees the status line and headers first
(``write_headers``), decides from them (200 + ``text/event-stream`` → the
SSE chain; 200 + JSON → one completion; anything else → bytes untouched),
then every ``write`` goes through ``streamfix.SSESession``. A JSON
``web.Response`` that the handler returns unprepared is repaired through
``streamfix.fix_completion`` before aiohttp sends it. Compression still
works: the wrapper sits before aiohttp's compressor.

When the chain ends the turn early (a loop cut, a broken stream), the
client's response is finished at once and the handler's next
``resp.write`` raises ``StreamCut``, a ``ConnectionResetError`` — exactly
what a handler sees when its client hangs up, so its existing disconnect
handling closes its upstream request. The middleware absorbs the
exception if the handler lets it propagate.

``streamfix_client_middleware()`` is a *client* middleware (aiohttp ≥ 3.12,
``ClientSession(middlewares=(...))``). Code that calls a backend itself and
reads ``resp.content`` (``iter_any``, ``iter_chunked``, ``readline``,
``async for line in resp.content``) or ``await resp.json()`` reads repaired
bytes. The tools come from the request body (``json=…`` or bytes
``data=…``). ``resp.content`` is replaced by a reader that pulls from the
original one only when the caller reads (no background task, so the
caller's own pace and cancellation apply); on a loop cut the upstream
connection is closed at once. ``resp.headers`` still show the upstream's
``Content-Length``, if it sent one, for a JSON body that was rewritten.

The repair report of a request is ``request[REPORT_KEY]`` (server) and
``report_of(resp)`` (client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.base_protocol import BaseProtocol
from aiohttp.client_exceptions import ClientConnectionResetError
from multidict import CIMultiDict

from . import jsoncodec
from .api import fix_completion
from .bodyreads import BodyReads
from .context import Options, Report
from .errors import TransformError, UpstreamProtocolError
from .session import SSESession

__all__ = [
    "REPORT_KEY",
    "StreamCut",
    "report_of",
    "streamfix_client_middleware",
    "streamfix_middleware",
]

#: The path both middlewares act on (any prefix: ``/v1``, ``/openai/v1``…).
CHAT_PATH_SUFFIX = "/chat/completions"
#: Largest non-streamed completion that is buffered to be repaired. A bigger
#: body is passed through unchanged rather than held in memory.
MAX_JSON_BYTES = 32 * 1024 * 1024
#: Buffer limit of the repaired client reader (aiohttp's default is 64 KiB;
#: a repaired event is at most a held call, bounded by the chain).
CLIENT_READER_LIMIT = 2**16

#: Where the server middleware stores the ``Report`` of a request.
REPORT_KEY: Any = (
    web.RequestKey("streamfix_report", Report) if hasattr(web, "RequestKey") else "streamfix_report"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


class StreamCut(ClientConnectionResetError):
    """Raised into a handler's ``resp.write`` once streamfix has ended the
    stream (a loop cut, a broken upstream stream): stop producing, close the
    upstream, as for a client that hung up."""


def _is_chat(method: str, path: str, suffix: str) -> bool:
    return method == hdrs.METH_POST and path.rstrip("/").endswith(suffix)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def _repair_json(raw: bytes, request: dict[str, Any], options: dict[str, Any]) -> bytes | None:
    """The repaired bytes of a non-streamed completion, or None to leave
    ``raw`` as it is (not a chat completion, not JSON)."""
    try:
        obj = jsoncodec.loads_lenient(raw)  # as the SDKs read it
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        return None
    try:
        return jsoncodec.dumps(fix_completion(obj, request, **options))
    except TransformError as exc:
        # A user step failed: the reply becomes an OpenAI-shaped error
        # (with status 500 where it is still unsent, ``_repair_response``).
        return jsoncodec.dumps({"error": {"message": str(exc), "type": "transform_error"}})


def _repair_sse_body(raw: bytes, request: dict[str, Any], options: dict[str, Any]) -> bytes:
    session = SSESession(request, **options)
    try:
        return session.feed(raw) + session.close()
    except UpstreamProtocolError as exc:
        return session.fail(exc)


# --------------------------------------------------------------------------
# Server middleware

_UNDECIDED, _PASS, _SSE, _JSON, _ENDED = range(5)


class _RepairingWriter(AbstractStreamWriter):
    """Wraps the request's payload writer: decides from the headers whether
    the body is repaired, then feeds the handler's writes through the
    chain. Everything else is delegated to the real writer."""

    def __init__(
        self,
        real: AbstractStreamWriter,
        session: SSESession,
        request: dict[str, Any],
        options: dict[str, Any],
    ) -> None:
        self._real = real
        self._session = session
        self._request = request
        self._options = options
        self._mode = _UNDECIDED
        self._deferred: tuple[str, CIMultiDict[str]] | None = None
        self._json: list[bytes] = []
        self._json_size = 0
        self.status = 200
        self._aiohttp_compresses = False
        #: The stream was ended early by the chain (a cut, a broken stream).
        self.cut = False

    # -- state the response reads and writes on its writer

    @property
    def buffer_size(self) -> int:
        return self._real.buffer_size

    @buffer_size.setter
    def buffer_size(self, value: int) -> None:
        self._real.buffer_size = value

    @property
    def output_size(self) -> int:
        return self._real.output_size

    @output_size.setter
    def output_size(self, value: int) -> None:
        self._real.output_size = value

    @property
    def length(self) -> int | None:
        return self._real.length

    @length.setter
    def length(self, value: int | None) -> None:
        self._real.length = value

    @property
    def transport(self) -> asyncio.WriteTransport | None:
        return self._real.transport

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        # aiohttp compresses after us: what we see stays plain.
        self._aiohttp_compresses = True
        self._real.enable_compression(encoding, strategy)

    def enable_chunking(self) -> None:
        self._real.enable_chunking()

    async def drain(self) -> None:
        await self._real.drain()

    def pass_through(self) -> None:
        """The handler's response is handled elsewhere (a ``web.Response``
        repaired before it was prepared): forward its bytes as they are."""
        if self._mode == _UNDECIDED:
            self._mode = _PASS

    # -- headers decide the mode

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        if self._mode == _ENDED:
            return
        parts = status_line.split(" ", 2)
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if self._mode == _UNDECIDED:
            media = _media_type(headers.get(hdrs.CONTENT_TYPE))
            encoded = hdrs.CONTENT_ENCODING in headers and not self._aiohttp_compresses
            if self.status != 200 or encoded:  # an error, or bytes already encoded
                self._mode = _PASS
            elif media == "text/event-stream":
                self._mode = _SSE
                if hdrs.CONTENT_LENGTH in headers:
                    # The repaired stream has another length: send it chunked
                    # (HTTP/1.1) or leave a fixed-length stream alone.
                    if status_line.startswith("HTTP/1.1"):
                        del headers[hdrs.CONTENT_LENGTH]
                        headers[hdrs.TRANSFER_ENCODING] = "chunked"
                        self._real.enable_chunking()
                        self._real.length = None
                    else:
                        self._mode = _PASS
            elif _is_json(media):
                self._mode = _JSON
                self._deferred = (status_line, headers)
                return  # sent with the repaired body, when its length is known
            else:
                self._mode = _PASS
        await self._real.write_headers(status_line, headers)

    def send_headers(self) -> None:
        if self._mode in (_JSON, _ENDED):
            return
        self._real.send_headers()

    # -- the body

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        mode = self._mode
        if mode == _SSE:
            session = self._session
            try:
                out = session.feed(bytes(chunk))
            except UpstreamProtocolError as exc:
                out = session.fail(exc)
            if out:
                await self._real.write(out)
            if session.finished and not session.saw_done:
                await self._end()
                raise StreamCut("streamfix ended the stream")
        elif mode in (_PASS, _UNDECIDED):
            await self._real.write(chunk)
        elif mode == _JSON:
            self._json.append(bytes(chunk))
            self._json_size += len(chunk)
            if self._json_size > MAX_JSON_BYTES:
                await self._flush_json_unchanged()
        elif self.cut:  # _ENDED after a cut: tell the handler to stop
            raise StreamCut("streamfix ended the stream")

    async def write_eof(self, chunk: bytes = b"") -> None:
        mode = self._mode
        if mode == _ENDED:
            return
        self._mode = _ENDED
        if mode == _SSE:
            session = self._session
            try:
                out = (session.feed(bytes(chunk)) if chunk else b"") + session.close()
            except UpstreamProtocolError as exc:
                out = session.fail(exc)
            await self._real.write_eof(out)
        elif mode == _JSON:
            raw = b"".join(self._json) + bytes(chunk)
            self._json.clear()
            fixed = _repair_json(raw, self._request, self._options)
            body = raw if fixed is None else fixed
            assert self._deferred is not None
            status_line, headers = self._deferred
            if fixed is not None and hdrs.CONTENT_LENGTH in headers:
                headers[hdrs.CONTENT_LENGTH] = str(len(body))
                self._real.length = len(body)
            await self._real.write_headers(status_line, headers)
            await self._real.write_eof(body)
        else:
            await self._real.write_eof(chunk)

    async def _flush_json_unchanged(self) -> None:
        assert self._deferred is not None
        self._mode = _PASS
        await self._real.write_headers(*self._deferred)
        data = b"".join(self._json)
        self._json.clear()
        await self._real.write(data)

    async def _end(self) -> None:
        """Finish the client's response now (after a cut)."""
        self.cut = True
        self._mode = _ENDED
        await self._real.write_eof()


def streamfix_middleware(*, path_suffix: str = CHAT_PATH_SUFFIX, **options: Any) -> Middleware:
    """An aiohttp server middleware that repairs the chat completions the
    app's handlers produce.

    ``path_suffix``: the requests acted on are ``POST`` to a path ending
    with it. ``options``: the fields of ``streamfix.Options`` (validated
    here, at start-up). Other routes, other methods and non-200 responses
    pass through untouched. The request body is read (and cached by
    aiohttp, so the handler reads it as usual) to learn the offered tools.
    """
    Options.of(options)  # fail at start-up on a misspelt option

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not _is_chat(request.method, request.path, path_suffix):
            return await handler(request)
        body = _json_object(await request.read())
        if body is None:  # not JSON: the handler answers it as it sees fit
            return await handler(request)
        session = SSESession(body, **options)
        request[REPORT_KEY] = session.report
        writer = _RepairingWriter(request.writer, session, body, options)
        request._payload_writer = writer  # what StreamResponse.prepare binds to
        try:
            resp = await handler(request)
        except StreamCut:
            if not writer.cut:
                raise
            # The handler let our stop signal through: the client's response
            # is already complete; give aiohttp a prepared stand-in to finish.
            return _Finished(writer.status)
        if isinstance(resp, web.Response) and not resp.prepared:
            writer.pass_through()
            _repair_response(resp, body, options)
        return resp

    return middleware


class _Finished(web.StreamResponse):
    """Stands for a response the middleware has already completed."""

    def __init__(self, status: int) -> None:
        super().__init__(status=status or 200)
        self._eof_sent = True  # nothing more to send

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        return None


def _repair_response(resp: web.Response, request: dict[str, Any], options: dict[str, Any]) -> None:
    """Repair an unprepared ``web.Response`` in place (a whole body)."""
    raw = resp.body
    if resp.status != 200 or not isinstance(raw, bytes | bytearray) or not raw:
        return
    if hdrs.CONTENT_ENCODING in resp.headers:
        return
    media = _media_type(resp.headers.get(hdrs.CONTENT_TYPE))
    new: bytes | None
    if _is_json(media):
        new = _repair_json(bytes(raw), request, options)
    elif media == "text/event-stream":
        new = _repair_sse_body(bytes(raw), request, options)
    else:
        return
    if new is not None and new != raw:
        resp.headers.popall(hdrs.CONTENT_LENGTH, None)
        resp.body = new
        if new.startswith(b'{"error":{') and b'"transform_error"' in new[:2048]:
            resp.set_status(500)


# --------------------------------------------------------------------------
# Client middleware


class _NoFlowControl(BaseProtocol):
    """The repaired reader is filled only when its reader asks, so it needs
    no transport flow control: pausing and resuming do nothing."""

    def pause_reading(self) -> None:
        return

    def resume_reading(self, resume_parser: bool = True) -> None:
        return


class _RepairedReader(aiohttp.StreamReader):
    """A ``StreamReader`` filled on demand from the upstream's reader
    through the chain. ``_wait`` is where every read method of
    ``StreamReader`` blocks when its buffer is empty; here it pulls."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        request: dict[str, Any],
        options: dict[str, Any],
        sse: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(_NoFlowControl(loop), CLIENT_READER_LIMIT, loop=loop)
        self._resp = resp
        self._source = BodyReads(resp.content)
        self._request = request
        self._options = options
        #: "sse" (through the chain), "json" (whole, then repaired) or
        #: "raw" (a JSON body too big to hold: handed on as it comes).
        self._mode = "sse" if sse else "json"
        self.session: SSESession | None = SSESession(request, **options) if sse else None
        self._pulling = False

    async def _wait(self, func_name: str) -> None:
        if self._pulling:
            raise RuntimeError(f"{func_name}() called while another coroutine is already reading")
        self._pulling = True
        try:
            if self._mode == "sse":
                await self._pull_sse()
            elif self._mode == "json":
                await self._pull_json()
            else:
                await self._pull_raw()
        finally:
            self._pulling = False

    async def _pull_sse(self) -> None:
        session = self.session
        assert session is not None
        while True:
            data = await self._source.read()
            try:
                out = session.feed(data) if data else session.close()
            except UpstreamProtocolError as exc:
                out = session.fail(exc)
            if out:
                self.feed_data(out)
            if not data:
                self.feed_eof()
                return
            if session.finished:
                self.feed_eof()
                if not session.saw_done:
                    # A loop cut or a broken stream: stop the upstream now.
                    conn = self._resp.connection
                    if conn is not None:
                        conn.close()
                return
            if out:
                return

    async def _pull_json(self) -> None:
        parts: list[bytes] = []
        size = 0
        while True:
            data = await self._source.read()
            if not data:
                break
            parts.append(data)
            size += len(data)
            if size > MAX_JSON_BYTES:  # too big to hold: hand it on as it is
                self._mode = "raw"
                self.feed_data(b"".join(parts))
                return
        raw = b"".join(parts)
        fixed = _repair_json(raw, self._request, self._options)
        out = raw if fixed is None else fixed
        if out:
            self.feed_data(out)
        self.feed_eof()

    async def _pull_raw(self) -> None:
        data = await self._source.read()
        if data:
            self.feed_data(data)
        else:
            self.feed_eof()


async def _client_body(req: aiohttp.ClientRequest) -> dict[str, Any] | None:
    body: Any = req.body
    if isinstance(body, aiohttp.payload.BytesPayload):
        raw = await body.as_bytes()
    elif isinstance(body, bytes | bytearray):
        raw = bytes(body)
    else:  # a stream, a form: not a chat-completion request we can read
        return None
    return _json_object(raw) if raw else None


def streamfix_client_middleware(
    *, path_suffix: str = CHAT_PATH_SUFFIX, **options: Any
) -> aiohttp.ClientMiddlewareType:
    """An aiohttp client middleware that repairs the chat completions the
    session receives (``ClientSession(middlewares=(streamfix_client_middleware(),))``).

    ``path_suffix``: requests acted on are ``POST`` to a URL path ending with
    it. ``options``: the fields of ``streamfix.Options``. Only 200 answers
    with ``text/event-stream`` (repaired as they are read) or JSON (repaired
    whole) are touched; everything else is returned as it came.
    """
    Options.of(options)

    async def middleware(
        req: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if not _is_chat(req.method, req.url.path, path_suffix):
            return await handler(req)
        body = await _client_body(req)
        resp = await handler(req)
        if body is None or resp.status != 200:
            return resp
        media = _media_type(resp.headers.get(hdrs.CONTENT_TYPE))
        if media == "text/event-stream":
            resp.content = _RepairedReader(resp, body, options, sse=True)
        elif _is_json(media):
            resp.content = _RepairedReader(resp, body, options, sse=False)
        return resp

    return middleware


def report_of(resp: aiohttp.ClientResponse) -> Report | None:
    """The repair report of a streamed response read through the client
    middleware (complete once the stream has been read), else None."""
    content = resp.content
    if isinstance(content, _RepairedReader) and content.session is not None:
        return content.session.report
    return None
