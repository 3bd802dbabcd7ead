"""One repaired SSE stream, sans-I/O: bytes from the upstream in, bytes for
the client out. The async mounts (``fix_sse``, the proxy, the middlewares)
are thin loops around this class.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from .chain import KEEPALIVE, PASS, PASS_ONLY, Chain, Out
from .chunks import _decode, decode_view
from .context import Context, Report
from .errors import UpstreamProtocolError
from .sse import DONE, DONE_EVENT, SSEDecoder, SSEEvent, encode_comment, encode_data


def error_event(message: str, type_: str = "upstream_error", code: str | None = None) -> bytes:
    """An OpenAI-shaped error as an SSE event: the OpenAI SDK raises it as
    an ``APIError`` instead of treating the stream as a normal end."""
    err: dict[str, Any] = {"message": message, "type": type_, "code": code}
    return encode_data(orjson.dumps({"error": err}))


_KEEPALIVE_BYTES = encode_comment()


class _NeverIdle:
    """Stands in for the decoder once the stream is over: the fast path's
    first test then fails, and ``feed`` returns nothing."""

    idle = False


_NEVER_IDLE = _NeverIdle()


class SSESession:
    """Repair one chat-completion SSE stream.

    ``feed(data)`` takes bytes exactly as read from the network and returns
    the bytes to send on (possibly empty); ``close()`` is called once the
    upstream has ended. ``stopped`` turns true when the chain ended the turn
    early (a loop was cut): stop reading and close the upstream request; the
    returned bytes already end the stream properly. ``report`` says what
    was repaired.
    """

    def __init__(self, request: dict[str, Any] | None = None, **options: Any) -> None:
        self.ctx = Context.of(request, options)
        self.chain = Chain(self.ctx)
        self._decoder = SSEDecoder(self.ctx.options.max_event_bytes)
        #: The decoder, or ``_NEVER_IDLE`` once finished: one attribute
        #: test on the hot path covers both (see ``feed``).
        self._idle_decoder: SSEDecoder | _NeverIdle = self._decoder
        self._finished = False
        #: The upstream sent ``data: [DONE]``.
        self.saw_done = False
        #: Output of a read whose later event was broken (see ``fail``).
        self._salvage = b""

    @property
    def finished(self) -> bool:
        """True once the stream is over for the client ([DONE] sent, a cut,
        or an error): later input is ignored."""
        return self._finished

    @finished.setter
    def finished(self, value: bool) -> None:
        self._finished = value
        self._idle_decoder = _NEVER_IDLE if value else self._decoder

    @property
    def report(self) -> Report:
        return self.ctx.report

    @property
    def stopped(self) -> bool:
        return self.chain.stopped

    def feed(self, data: bytes) -> bytes:
        """Raises UpstreamProtocolError on a broken stream; see ``fail``."""
        if (
            self._idle_decoder.idle
            and data.startswith(b"data: {")
            and data.endswith(b"\n\n")
            and data.find(b"\r", 7) < 0
        ):
            # The fast paths: this read is whole single-line JSON events,
            # LF only, nothing buffered (what token-by-token servers send).
            # Same result as the general path, minus the framing work.
            if data.find(b"\n", 7) == len(data) - 2:  # exactly one event
                return self._event(data[6:-2], data)
            return self._batch(data)
        if self.finished:
            return b""
        return self._events(self._decoder.feed(data))

    def _event(self, payload: bytes, raw: bytes) -> bytes:
        """One single-line JSON event (``raw`` is its bytes, terminator
        included) through the chain."""
        try:
            view = _decode(payload)
        except msgspec.ValidationError:
            view = decode_view(payload)  # the loose reading
        except msgspec.DecodeError:
            return self._events(self._decoder.feed(raw))  # its error
        outs = self.chain.feed(view, payload)
        if outs is PASS_ONLY:
            return raw
        out = self._encode(outs, raw)
        if self.chain.stopped:
            out += self._stop()
        return out

    def _batch(self, data: bytes) -> bytes:
        """Several events in one read: each single-line JSON event takes the
        fast path; from the first other block on (``[DONE]``, a comment,
        a multi-line event) the rest goes through the decoder, in order."""
        out: list[bytes] = []
        pos = 0
        for block in data[:-2].split(b"\n\n"):
            end = pos + len(block) + 2
            if self._finished:
                break
            try:
                if not block.startswith(b"data: {") or b"\n" in block:
                    out.append(self._events(self._decoder.feed(data[pos:])))
                    break
                out.append(self._event(block[6:], data[pos:end]))
            except UpstreamProtocolError:
                # The events before the broken one are not lost (``fail``).
                self._salvage = b"".join(out) + self._salvage
                raise
            pos = end
        return b"".join(out)

    def _stop(self) -> bytes:
        self.finished = True
        return self._encode(self.chain.close(), b"") + DONE_EVENT

    def close(self) -> bytes:
        """The upstream ended. Flushes what is held. Adds no ``[DONE]`` the
        upstream did not send (the I/O layer decides what a truncated
        stream means)."""
        if self.finished:
            return b""
        events = self._decoder.close()
        if events and not events[-1].raw.endswith(b"\n\n"):
            # The upstream's last event had no blank line after it. Passed
            # on as is, a client drops it (WHATWG: an unfinished event at
            # end of stream is discarded), and bytes sent after it (held
            # text, an error event) would merge into it: end it properly.
            body = events[-1].raw.rstrip(b"\r\n")
            events[-1].raw = body + b"\n\n" if body else b""
        out = self._events(events)
        if not self.finished:
            out += self._encode(self.chain.close(), b"")
        return out

    def fail(self, exc: Exception) -> bytes:
        """End the stream because of ``exc`` (a protocol error, an upstream
        that died): release what can be released, then an error event."""
        if self.finished:
            return b""
        self.finished = True
        try:
            flushed = self._encode(self.chain.close(), b"")
        except Exception:  # the chain is already in a broken state
            flushed = b""
        kind = (
            "upstream_protocol_error"
            if isinstance(exc, UpstreamProtocolError)
            else "upstream_error"
        )
        salvage, self._salvage = self._salvage, b""
        return salvage + flushed + error_event(str(exc) or type(exc).__name__, kind)

    def _events(self, events: list[SSEEvent]) -> bytes:
        out: list[bytes] = []
        chain = self.chain
        for ev in events:
            if self.finished:
                break
            data = ev.data
            if data is None:
                out.append(ev.raw)
                continue
            if data == DONE:
                self.saw_done = True
                out.append(self._encode(chain.close(), b""))
                out.append(ev.raw)
                self.finished = True
                continue
            try:
                view = decode_view(data)
            except UpstreamProtocolError:
                # What the good events before it produced is not lost:
                # ``fail`` sends it ahead of the error event.
                self._salvage = b"".join(out)
                raise
            outs = chain.feed(view, data)
            if outs is PASS_ONLY:
                out.append(ev.raw)
            else:
                out.append(self._encode(outs, ev.raw))
            if chain.stopped:
                out.append(self._stop())
        return b"".join(out)

    @staticmethod
    def _encode(outs: list[Out], raw: bytes) -> bytes:
        parts: list[bytes] = []
        for o in outs:
            if o is PASS:
                parts.append(raw)
            elif o is KEEPALIVE:
                parts.append(_KEEPALIVE_BYTES)
            else:
                parts.append(encode_data(orjson.dumps(o)))
        return b"".join(parts)
