"""Server-sent events framing, sans-I/O.

The decoder turns raw bytes, chunked however the network chose, into whole
events, and keeps each event's exact upstream bytes so that an event nobody
changes can be forwarded as it came (the fast path). It follows the WHATWG
HTML "server-sent events" parsing rules (section 9.2.6): lines end in CRLF,
LF or CR; ``:`` starts a comment; ``data`` lines are joined with LF; a blank
line dispatches the event; a leading UTF-8 BOM is dropped.

Lines are split on bytes, before any UTF-8 decoding, so a multi-byte
character cut between two reads is never seen half-way (the line-end bytes
never occur inside a UTF-8 sequence). Payloads stay ``bytes``: the JSON
decoder reads them directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import UpstreamProtocolError

#: Largest event (all its lines, in bytes) the decoder will buffer. A real
#: chat-completion chunk is a few hundred bytes; even a whole non-streamed
#: tool call rarely passes 100 KiB. Past this the upstream is broken or
#: hostile, and holding more would only grow memory.
MAX_EVENT_BYTES = 4 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
DONE = b"[DONE]"


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event (or a block of comments with no data).

    ``raw`` is exactly what the upstream sent for it, terminator included.
    ``data`` is None when the block had no ``data`` field (a keep-alive
    comment, for instance); such a block is forwarded as ``raw``.
    """

    raw: bytes
    data: bytes | None = None
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    @property
    def is_done(self) -> bool:
        return self.data == DONE


class SSEDecoder:
    """Incremental SSE decoder: ``feed(bytes) -> list[SSEEvent]``, ``close()``."""

    __slots__ = ("_buf", "_general", "_max", "_started", "idle")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self._started = False
        # Once a CR is seen the cheap "split on LF LF" path is no longer
        # exact, and every later event goes through the general parser.
        self._general = False
        self._max = max_event_bytes
        #: Nothing buffered, past the stream's start, LF-only so far: the
        #: next read begins a fresh event (the session's fast path).
        self.idle = False

    def begin(self, data: bytes) -> bool:
        """At the stream's start, with ``data`` the first read: if it opens
        with an event (``data: {``, so no byte-order mark to drop), the
        stream counts as started and the decoder as idle, so the session
        may read this first read itself too. False otherwise (the decoder
        then reads it)."""
        if self._started or self._buf or not data.startswith(b"data: {"):
            return False
        self._started = self.idle = True
        return True

    def feed(self, data: bytes) -> list[SSEEvent]:
        buf = self._buf + data if self._buf else data
        if not self._started:
            if len(buf) < 3 and _BOM.startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[3:]
        if not self._general and b"\r" in data:
            self._general = True
        events = self._parse_general(buf) if self._general else self._parse_lf(buf)
        self.idle = not self._buf and not self._general
        if len(self._buf) > self._max:
            if events:
                # Hand out the complete events first; the oversized one is
                # still buffered and raises on the next call.
                return events
            size = len(self._buf)
            self._buf = b""
            raise self._too_large(size)
        return events

    def pending_end(self, data: bytes) -> int:
        """Where in ``data`` (the next read) the event whose start is
        buffered ends, just past its blank line; -1 when nothing is
        buffered, the event does not end in ``data``, or the stream is not
        LF-only (the session then feeds the whole read)."""
        buf = self._buf
        if not buf or self._general or not self._started:
            return -1
        if buf.endswith(b"\n") and data.startswith(b"\n"):
            return 1
        end = data.find(b"\n\n")
        return -1 if end < 0 else end + 2

    def complete(self, head: bytes) -> bytes:
        """The buffered start of an event plus ``head``, the bytes that end
        it (``pending_end``): the event's raw bytes, handed back to be
        read as a whole event; nothing is buffered after."""
        raw = self._buf + head
        self._buf = b""
        self.idle = True
        return raw

    def _too_large(self, size: int) -> UpstreamProtocolError:
        return UpstreamProtocolError(
            f"SSE event larger than {self._max} bytes ({size} buffered with no end of event)"
        )

    def close(self) -> list[SSEEvent]:
        """End of stream. A final event with no blank line after it is
        dispatched anyway (servers that close right after the last data line
        are common); a lone pending CR is a line end. Bytes that hold no
        event at all are returned as a raw block, so nothing is lost."""
        buf, self._buf = self._buf, b""
        if len(buf) > self._max:
            raise self._too_large(len(buf))
        body = buf.rstrip(b"\r\n")
        if not body:
            return [SSEEvent(buf)] if buf else []
        events = self._parse_general(body + b"\n\n")
        self._buf = b""
        if events:
            last = events[-1]
            # The terminator was ours, not the upstream's.
            last.raw = last.raw[:-2] + buf[len(body) :]
        return events

    # -- the two parsers ---------------------------------------------------

    def _parse_lf(self, buf: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        start = 0
        find = buf.find
        while True:
            if buf.startswith(b"\n", start):
                # A blank line before any field dispatches alone, as in
                # ``_parse_general`` (the framing must not depend on when a
                # CR first shows up in the stream).
                events.append(_parse_block(b"\n", []))
                start += 1
                continue
            end = find(b"\n\n", start)
            if end < 0:
                break
            end += 2
            block = buf[start:end]
            if block.startswith(b"data: ") and block.find(b"\n", 6) == end - start - 2:
                # The overwhelmingly common case: one `data: ` line.
                events.append(SSEEvent(block, block[6:-2]))
            else:
                events.append(_parse_block(block, block.split(b"\n")[:-2]))
            start = end
        self._buf = buf[start:] if start else buf
        return events

    def _parse_general(self, buf: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        start = 0  # start of the current event's raw bytes
        pos = 0  # start of the current line
        lines: list[bytes] = []
        n = len(buf)
        while pos < n:
            m = _LINE_END.search(buf, pos)
            if m is None:
                break
            if m.group() == b"\r" and m.end() == n:
                # CR at the very end: it may be the first half of a CRLF
                # still in flight. Wait for the next byte (or close()).
                break
            line = buf[pos : m.start()]
            pos = m.end()
            if line:
                lines.append(line)
                continue
            if lines or pos - start > 0:
                events.append(_parse_block(buf[start:pos], lines))
            lines = []
            start = pos
        self._buf = buf[start:]
        return events


def _parse_block(raw: bytes, lines: list[bytes]) -> SSEEvent:
    ev = SSEEvent(raw)
    data: list[bytes] | None = None
    for line in lines:
        if not line or line[0] == 0x3A:  # ":" comment
            continue
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            if data is None:
                data = []
            data.append(value)
        elif name == b"event":
            ev.event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                ev.id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            ev.retry = int(value)
    if data is not None:
        ev.data = b"\n".join(data)
    return ev


# -- encoder ---------------------------------------------------------------


def encode_data(payload: bytes) -> bytes:
    """One event whose data is ``payload`` (which must hold no line end:
    JSON from orjson never does)."""
    return b"data: " + payload + b"\n\n"


def encode_comment(text: str = "") -> bytes:
    """A comment block, used as a keep-alive; ignored by every SSE client."""
    return b": " + text.encode() + b"\n\n" if text else b":\n\n"


DONE_EVENT = b"data: [DONE]\n\n"


def end_last_event(events: list[SSEEvent]) -> list[SSEEvent]:
    """``events`` (a decoder's ``close``) with the last one ended by a
    blank line. An upstream's last event without one, passed on as is, is
    dropped by a client (WHATWG: an unfinished event at end of stream is
    discarded), and bytes sent after it (held text, an error event) would
    merge into it."""
    if events and not events[-1].raw.endswith(b"\n\n"):
        body = events[-1].raw.rstrip(b"\r\n")
        events[-1].raw = body + b"\n\n" if body else b""
    return events
