"""The streamed response to the client: prepared once, written through a
front door's encoder, and held back while the request may still be asked
again (bounded, with keep-alive comments meanwhile).

*The client's name for the model.* A reply's ``model`` is the server's
name for it (with llama-cpp-python, a file path), where the client asked
for an alias (``name=`` rows) or any name (a catch-all row). ``ModelName``
says it as the client asked: it learns the server's name from the first
``"model": "…"`` written and then replaces that field's bytes in each
write (one ``bytes.replace``; the sequence ``"model":"`` with bare quotes
cannot occur inside a JSON string, where quotes are escaped). Where the
names are equal it switches itself off and the bytes leave untouched."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from ...wire import Encoder
from .. import record
from ..upstream.secrets import Secrets, StreamScrub

#: Repaired bytes held back while a re-ask is still possible. A reply
#: whose held part grows past this is committed (streamed as is): holding
#: more would delay a long prose answer for nothing and grow memory.
MAX_HELD_BYTES = 256 * 1024

#: Seconds between keep-alive comments sent while output is held, well
#: under the usual 60 s idle timeouts of load balancers and clients
#: (``--keepalive-interval``). They are the only ones the client gets: the
#: proxy's stream sessions run without the chain's own comment per held
#: chunk (``exchange.chain_options``), which came fifteen in a row for one
#: call written as text.
KEEPALIVE_INTERVAL = 5.0

_KEEPALIVE = b": keep-alive\n\n"

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


_MODEL_FIELD = re.compile(rb'"model"(\s*):(\s*)"((?:[^"\\]|\\.)*)"')


class ModelName:
    """Each write's ``"model"`` field said as the client named the model
    (see the module doc). ``None`` from ``of`` when the client named none."""

    __slots__ = ("alias", "pairs", "same")

    def __init__(self, alias: str) -> None:
        self.alias = orjson.dumps(alias)
        #: (the field's bytes as the server writes it, as the client asked),
        #: in the server's spacing and the compact one of rebuilt chunks.
        self.pairs: tuple[tuple[bytes, bytes], ...] = ()
        #: The server's name is the client's: nothing to do.
        self.same = False

    @classmethod
    def of(cls, model: Any) -> ModelName | None:
        return cls(model) if isinstance(model, str) and model else None

    def __call__(self, data: bytes) -> bytes:
        if not self.pairs:
            if self.same:
                return data
            m = _MODEL_FIELD.search(data)
            if m is None:
                return data
            name = b'"' + m.group(3) + b'"'
            if name == self.alias:
                self.same = True
                return data
            pairs = {m.group(0): b'"model"%s:%s%s' % (m.group(1), m.group(2), self.alias)}
            pairs[b'"model":' + name] = b'"model":' + self.alias
            self.pairs = tuple(pairs.items())
        for old, new in self.pairs:
            data = data.replace(old, new)
        return data


class ClientGone(Exception):
    """Writing to the client failed: it went away."""


class _Response(web.StreamResponse):
    """The stream's response: at its end, the bytes kept back in case they
    began a key (``ClientStream.scrub``) go out, redacted."""

    def __init__(self, stream: ClientStream) -> None:
        super().__init__(status=200)
        self._stream = stream

    async def write_eof(self, data: bytes = b"") -> None:
        stream = self._stream
        rest = stream.scrub.close() if stream.scrub is not None else b""
        if rest:
            if stream.encoder is not None:
                rest = stream.encoder.feed(rest)
            data = rest + data
        await super().write_eof(data)


class ClientStream:
    """The streamed response to the client, with a hold-back buffer."""

    __slots__ = (
        "committed",
        "encoder",
        "held",
        "held_bytes",
        "keepalive",
        "last_write",
        "recording",
        "redact",
        "rename",
        "request",
        "resp",
        "scrub",
    )

    def __init__(
        self,
        request: web.Request,
        encoder: Encoder | None = None,
        redact: Callable[[bytes], bytes] | None = None,
        rename: ModelName | None = None,
        keepalive: float | None = None,
    ) -> None:
        self.request = request
        #: Seconds between keep-alives (None: ``KEEPALIVE_INTERVAL``; 0: none).
        self.keepalive = keepalive
        #: The reply's ``model`` said as the client asked (``ModelName``);
        #: None once the names turned out equal, or for a front door's
        #: encoder, which writes the client's name itself.
        self.rename = rename if encoder is None else None
        #: Upstream keys out of everything written (``Table.redact``): an
        #: upstream may echo its key in an error event inside the stream.
        #: None when no key is configured: the bytes go out untouched.
        self.redact = redact
        #: The same over writes and events: a key split between two is kept
        #: back until it can be redacted whole (``secrets.StreamScrub``).
        self.scrub = StreamScrub(redact) if isinstance(redact, Secrets) else None
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
        resp = _Response(self) if self.scrub is not None else web.StreamResponse()
        for k, v in extra.items():
            resp.headers.add(k, v)
        resp.headers.update(SSE_HEADERS)
        self.resp = resp
        try:
            await resp.prepare(self.request)
        except ConnectionResetError as exc:
            raise ClientGone from exc

    async def write(self, data: bytes) -> None:
        assert self.resp is not None
        rename = self.rename
        if rename is not None:
            data = rename(data)
            if rename.same:
                self.rename = None
        if self.scrub is not None:
            data = self.scrub.feed(data)
            if not data:
                return
        elif self.redact is not None:
            data = self.redact(data)
        # A recording keeps the chat side (a front door's bytes are made
        # from it): what replay can compare with (``record.py``).
        chat = data
        if self.encoder is not None:
            data = self.encoder.feed(data)
            if not data:
                if self.recording is not None:
                    self.recording.to_client(chat)
                return
        try:
            await self.resp.write(data)
        except ConnectionResetError as exc:
            raise ClientGone from exc
        self.last_write = time.monotonic()
        if self.recording is not None:
            self.recording.to_client(chat)

    def gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def hold(self, data: bytes) -> None:
        self.held.append(data)
        self.held_bytes += len(data)

    async def keepalive_if_due(self) -> None:
        """A keep-alive when nothing was written for the interval."""
        interval = KEEPALIVE_INTERVAL if self.keepalive is None else self.keepalive
        if interval > 0 and time.monotonic() - self.last_write >= interval:
            await self.write(_KEEPALIVE)
            # a door's encoder may turn it into nothing: the wait starts over anyway
            self.last_write = time.monotonic()

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
