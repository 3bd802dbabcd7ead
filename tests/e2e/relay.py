"""A recording relay: an aiohttp app between streamfix and the real server.

It forwards every request and the server's reply byte for byte, and keeps
a copy (``Exchange``), so that a test can compare what a client got
through streamfix with what the server sent *for the same request* (this
server's output varies between requests even at temperature 0).

It also sees how the reply ended: read to the end (``complete``), or the
downstream side (streamfix) went away first (``downstream_gone``), in
which case the relay closes its connection to the server at once, as
streamfix closed its own: that is how a cut reaches the server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tests.support.streamutil import Assembled, assemble

#: Request and response headers a relay must not copy (hop-by-hop, or
#: describing the body framing, which aiohttp redoes).
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}
)


@dataclass
class Exchange:
    method: str
    path: str
    request: bytes
    status: int | None = None
    content_type: str = ""
    response: bytearray = field(default_factory=bytearray)
    #: (seconds since start, bytes) per read from the server.
    reads: list[tuple[float, int]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    complete: bool = False  # the server's reply was read to its end
    downstream_gone: bool = False  # streamfix closed before the end
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def body(self) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(self.request)
        return obj

    @property
    def streamed(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    def json(self) -> Any:
        return orjson.loads(bytes(self.response))

    def assembled(self) -> Assembled:
        """The server's stream as a client would assemble it."""
        return assemble(bytes(self.response))

    def content(self) -> str:
        """The reply's text, streamed or not."""
        if self.streamed:
            return self.assembled().content
        return str(self.json()["choices"][0]["message"].get("content") or "")

    def wait(self, timeout: float = 30.0) -> Exchange:
        if not self.done.wait(timeout):
            raise AssertionError(f"relay: {self.path} did not end within {timeout} s")
        return self


class RecordingRelay:
    """``app`` forwards to ``target`` (the server's root URL); ``exchanges``
    holds one ``Exchange`` per request, in order."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._session: aiohttp.ClientSession | None = None
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self.app.on_cleanup.append(self._close)

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def mark(self) -> int:
        """A position; ``chats_since(mark)`` lists what came after it."""
        with self._lock:
            return len(self.exchanges)

    def chats_since(self, mark: int, wait: bool = True) -> list[Exchange]:
        """The chat-completion exchanges after ``mark`` (probes left out)."""
        return self.since(mark, "/chat/completions", wait)

    def since(self, mark: int, path_end: str, wait: bool = True) -> list[Exchange]:
        """The exchanges after ``mark`` whose path ends with ``path_end``."""
        with self._lock:
            found = [e for e in self.exchanges[mark:] if e.path.endswith(path_end)]
        if wait:
            for e in found:
                e.wait()
        return found

    def only_chat_since(self, mark: int) -> Exchange:
        found = self.chats_since(mark)
        assert len(found) == 1, f"expected one upstream request, got {len(found)}"
        return found[0]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._session is None:
            # A new connection to the server per request: after an empty
            # stream, llama-cpp-python closes that connection a moment
            # later, and a pooled one reused in that moment would fail in
            # the relay (a 500 that streamfix never caused).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
            )
        body = await request.read()
        ex = Exchange(request.method, request.path, body)
        with self._lock:
            self.exchanges.append(ex)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        up: aiohttp.ClientResponse | None = None
        try:
            up = await self._session.request(
                request.method, self.target + request.path_qs, data=body, headers=headers
            )
            ex.status = up.status
            ex.content_type = up.headers.get("Content-Type", "")
            resp = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in _HOP},
            )
            await resp.prepare(request)
            async for data in up.content.iter_any():
                ex.response += data
                ex.reads.append((time.monotonic() - ex.started, len(data)))
                try:
                    await resp.write(data)
                except (ConnectionError, aiohttp.ClientConnectionResetError):
                    ex.downstream_gone = True
                    break
            else:
                ex.complete = True
                await resp.write_eof()
            return resp
        except asyncio.CancelledError:
            ex.downstream_gone = True  # handler_cancellation: the peer hung up
            raise
        finally:
            if up is not None:
                up.close()  # an unfinished reply: drop the server connection now
            ex.ended = time.monotonic()
            ex.done.set()
