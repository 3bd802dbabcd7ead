"""One repaired SSE stream, sans-I/O: bytes from the upstream in, bytes for
the client out. The async mounts (``fix_sse``, the proxy, the middlewares)
are thin loops around this class.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from typing import Any

import msgspec
import orjson

from . import jsoncodec
from .chain import DEFER, FORGET, KEEPALIVE, PASS, PASS_ONLY, RELEASE, Chain, Out
from .chunks import CONTENT, ChoiceView, ChunkView, _decode, decode_view, plain_text
from .context import Context, Report
from .errors import TransformError, UpstreamProtocolError
from .sse import (
    DONE,
    DONE_EVENT,
    SSEDecoder,
    SSEEvent,
    encode_comment,
    encode_data,
    end_last_event,
)

log = logging.getLogger("streamfix")


def error_event(message: str, type_: str = "upstream_error", code: str | None = None) -> bytes:
    """An OpenAI-shaped error as an SSE event: the OpenAI SDK raises it as
    an ``APIError`` instead of treating the stream as a normal end."""
    err: dict[str, Any] = {"message": message, "type": type_, "code": code}
    return encode_data(orjson.dumps({"error": err}))


def chunk_event(
    delta: dict[str, Any], finish: str | None = None, model: str = "streamfix"
) -> bytes:
    """One ``chat.completion.chunk`` of a single choice as an SSE event, as
    an OpenAI-compatible server writes it (the demo's scripted upstream,
    ``streamfix.testing``'s streams)."""
    obj = {
        "id": f"chatcmpl-{model}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return encode_data(orjson.dumps(obj))


_KEEPALIVE_BYTES = encode_comment()


def failure_event(exc: Exception) -> bytes:
    """The error event that ends a stream the upstream broke (``exc``)."""
    if isinstance(exc, TransformError):
        kind = "transform_error"
    elif isinstance(exc, UpstreamProtocolError):
        kind = "upstream_protocol_error"
    else:
        kind = "upstream_error"
    return error_event(str(exc) or type(exc).__name__, kind)


class _NeverIdle:
    """Stands in for the decoder once the stream is over: the fast path's
    first test then fails, and ``feed`` returns nothing."""

    idle = False


_NEVER_IDLE = _NeverIdle()

#: A ``"content"`` (or reasoning) key whose value is a string
#: (``SSESession._decoded_run``).
_STRING_TEXT = re.compile(rb'"(?:content|reasoning_content|reasoning)":\s*"').search
#: Bytes that end a JSON string or need unescaping, and bytes JSON forbids
#: raw in a string (a raw CR or LF would also be an SSE line end).
_NOT_PLAIN_STRING = re.compile(rb'[\x00-\x1f"\\]').search
#: Shapes learned per stream before learning slows down (``_learn``), and
#: how often it is tried after that, in events decoded.
_EAGER_LEARNS = 4
_LEARN_EVERY = 32
#: Runs of shaped events tried per read (``SSESession._run``). Each try
#: looks at the rest of the read, so this bounds the work on a read where
#: shaped events alternate with others to a few passes over it.
_RUNS_PER_READ = 4
#: A run is tried only where the read has room for this many more events
#: of the shape: below that, one event at a time costs less (bench.chain).
_RUN_MIN = 6
#: A decoded run (``SSESession._decoded_run``) is tried only where this
#: much of the read is left: about four events of a few hundred bytes.
_DECODED_RUN_BYTES = 1024


class _Shape:
    """The bytes around the content of one plain-text event of this stream.

    Servers send every plain-text chunk of a stream with the same bytes
    around the content (``data: {"id":"chatcmpl-1",…"delta":{"content":"``
    and ``"},"logprobs":null,"finish_reason":null}]}\n\n``). An event that
    starts and ends with the bytes of one the chain has already decoded,
    and whose middle is one JSON string, decodes to the same view with
    another content: it needs no JSON decode and no SSE framing, only the
    string. ``_learn`` makes one from a decoded event.
    """

    __slots__ = (
        "end",
        "index",
        "key",
        "payload",
        "prefix",
        "reasoning",
        "sep",
        "size",
        "start",
        "suffix",
        "twice",
    )

    def __init__(self, prefix: bytes, suffix: bytes, index: int, key: str = CONTENT) -> None:
        self.prefix = prefix
        self.suffix = suffix
        #: The learned event's JSON, the chain's original for every event
        #: of the shape: they differ only in the content, which the chain
        #: owns and never takes from the original (so no copy per event).
        self.payload = (prefix + suffix)[6:-2]
        self.start = len(prefix)
        self.end = len(suffix)
        self.size = self.start + self.end  # the shortest event of the shape
        self.twice = 2 * self.size  # the shortest read of two events of it
        self.index = index  # the choice the content belongs to
        #: The field the text is in: ``content``, or a reasoning field
        #: (``reasoning_content``, ``reasoning``: the reasoning lane's).
        self.key = key
        self.reasoning = key != CONTENT  # (a bool: tested per event)
        #: The bytes between two contents of the shape, from one event into
        #: the next: no content holds them (they have a line end).
        self.sep = suffix + prefix

    @classmethod
    def learn(cls, raw: bytes, index: int, content: str, key: str = CONTENT) -> _Shape | None:
        """The shape of ``raw``, one single-line event whose view is plain
        ``content`` of choice ``index`` in the field ``key``; None when the
        content's place in the bytes is not certain (the key twice, spaces
        before the colon, an escaped quote in it)."""
        # The only token of the key (a key: in a string its quotes would be
        # escaped), so the string after it is the delta's text.
        token = b'"' + key.encode() + b'"'
        at = raw.find(token + b":")
        if at < 0 or raw.count(token) != 1:
            return None
        start = at + len(token) + 1
        while raw[start : start + 1] in (b" ", b"\t"):
            start += 1
        if raw[start : start + 1] != b'"':
            return None
        end = raw.find(b'"', start + 1)
        try:
            if end < 0 or orjson.loads(raw[start : end + 1]) != content:
                return None
        except orjson.JSONDecodeError:
            return None
        return cls(raw[: start + 1], raw[end:], index, key)


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
        #: True once the stream is over for the client (see ``finish``).
        #: A plain attribute: the I/O loops read it after every read.
        self.finished = False
        #: The upstream sent ``data: [DONE]``.
        self.saw_done = False
        #: Output of a read whose later event was broken (see ``fail``).
        self._salvage = b""
        #: The learned shape of plain-text events, or None (``_Shape``).
        #: Only set while the decoder is idle and the stream not finished.
        self._shape: _Shape | None = None
        self._learned: _Shape | None = None
        self._learns = 0
        self._misses = 0  # events decoded since learning slowed down
        #: Events the chain keeps back whole (``DEFER``), as they came.
        self._kept: deque[bytes] = deque()

    def finish(self) -> None:
        """The stream is over for the client (``[DONE]`` sent, a cut, an
        error): later input is ignored."""
        self.finished = True
        self._idle_decoder = _NEVER_IDLE
        self._shape = None

    @property
    def report(self) -> Report:
        return self.ctx.report

    @property
    def stopped(self) -> bool:
        return self.chain.stopped

    def feed(self, data: bytes) -> bytes:
        """Raises UpstreamProtocolError on a broken stream; see ``fail``. A
        user step that raises (``TransformError``) ends the stream here:
        what was repaired so far, then an error event (``fail``)."""
        try:
            shape = self._shape
            if (
                shape is not None
                and data.startswith(shape.prefix)
                and data.endswith(shape.suffix)
                and (n := len(data)) >= shape.size
                and (n < shape.twice or data.find(b"\n", shape.start) == n - 2)
            ):
                # The fastest path: one plain-text event of the learned shape.
                # (A read of several is at least twice the shape's size, and
                # has a line end before its last two bytes: it goes to
                # ``_batch``.)
                outs = self._shaped(data, 0, n, shape)
                if outs is not None:
                    return data if outs is PASS_ONLY else self._sent(outs, data)
            if (
                (self._idle_decoder.idle or (not self.finished and self._decoder.begin(data)))
                and data.startswith(b"data: {")
                and data.find(b"\r", 7) < 0
            ):
                # The fast paths: this read starts with a single-line JSON event,
                # LF only, nothing buffered (what token-by-token servers send).
                # Same result as the general path, minus the framing work.
                if data.endswith(b"\n\n"):
                    if data.find(b"\n", 7) == len(data) - 2:  # exactly one event
                        out = self._event(data, 0, len(data))
                        return data if out is None else out
                    return self._batch(data)
                # A large read that ends inside an event: the whole events
                # first, then the rest through the decoder, which keeps it.
                cut = data.rfind(b"\n\n") + 2
                if cut > 2:
                    return self._then(self._batch(data[:cut]), data[cut:])
            if self.finished:
                return b""
            end = self._decoder.pending_end(data)
            if end > 0:
                # A read that ends the event the previous one began: that event
                # whole, then the rest. Read as one where the rest may hold a
                # run (``_RUN_MIN``): the completed event joins it.
                raw = self._decoder.complete(data[:end])
                shape = self._shape = self._learned
                if shape is not None and len(data) - end >= _RUN_MIN * shape.size:
                    return self.feed(raw + data[end:])
                return self._then(self.feed(raw), data[end:])
            return self._events(self._fed(data))
        except TransformError as exc:
            return self.fail(exc)

    def _then(self, out: bytes, rest: bytes) -> bytes:
        """``out``, then what the rest of the same read gives. If the rest
        is broken, ``out`` is not lost (``fail`` sends it first)."""
        if self.finished or not rest:
            return out
        try:
            return out + self.feed(rest)
        except (UpstreamProtocolError, TransformError):
            self._salvage = out + self._salvage
            raise

    def _fed(self, data: bytes) -> list[SSEEvent]:
        """``data`` through the SSE decoder, which may then hold a partial
        event: the learned shape applies only while it holds none."""
        events = self._decoder.feed(data)
        idle = self._decoder.idle and not self.finished
        self._shape = self._learned if idle else None
        return events

    def _shaped(self, data: bytes, pos: int, end: int, shape: _Shape) -> list[Out] | None:
        """What the chain returns for ``data[pos:end]``, which starts with
        the shape's prefix and ends with its suffix (the caller checked), if
        it is one event of the shape (read without a JSON decode); None if
        it is not (or its choice has no plain-text lane now): decode it."""
        # The middle must be exactly one JSON string (not several events,
        # another structure, invalid UTF-8); most need no unescaping.
        mid = data[pos + shape.start : end - shape.end]
        try:
            if _NOT_PLAIN_STRING(mid) is None:
                text = mid.decode()
            elif b"\n" in mid:
                return None  # several events (a line end is never in a string)
            else:
                text = orjson.loads(b'"' + mid + b'"')
                if not isinstance(text, str):
                    return None
        except (UnicodeDecodeError, orjson.JSONDecodeError):
            return None
        if shape.reasoning:
            return self.chain.feed_reasoning(shape.index, text, shape.key, shape.payload)
        return self.chain.feed_plain(shape.index, text, shape.payload)

    def _event(self, data: bytes, pos: int, end: int) -> bytes | None:
        """The single-line JSON event ``data[pos:end]`` (terminator
        included), decoded, through the chain: the bytes to send for it,
        or None to send it unchanged."""
        payload = data[pos + 6 : end - 2]
        try:
            view = _decode(payload)
        except msgspec.ValidationError:
            view = decode_view(payload)  # the loose reading
        except msgspec.DecodeError:
            return self._events(self._fed(data[pos:end]))  # its error
        outs = self.chain.feed(view, payload)
        if self._learns < _EAGER_LEARNS or self._learn_due():
            self._learn(view, data[pos:end])
        return None if outs is PASS_ONLY else self._sent(outs, data[pos:end])

    def _learn_due(self) -> bool:
        """Once the first ``_EAGER_LEARNS`` shapes are learned, learning is
        tried once in ``_LEARN_EVERY`` decoded events: a server whose
        every chunk differs around the content (a per-chunk nonce) then
        costs little."""
        self._misses += 1
        return self._misses % _LEARN_EVERY == 0

    def _learn(self, view: ChunkView, raw: bytes) -> None:
        """Learn the shape of ``raw`` if it is a plain-text event (eagerly
        at first: a stream's shape changes when its reasoning ends, say)."""
        plain = plain_text(view)
        if plain is None or self.finished or not self.chain.has_lane(plain[0], plain[2]):
            return
        self._learns += 1
        shape = _Shape.learn(raw, *plain)
        if shape is not None:
            self._learned = self._shape = shape

    def _sent(self, outs: list[Out], raw: bytes) -> bytes:
        """The bytes for what the chain returned for the event ``raw``."""
        out = self._encode(outs, raw)
        if self.chain.stopped:
            out += self._stop()
        return out

    def _batch(self, data: bytes) -> bytes:
        """Several events in one read (``data`` ends with a blank line):
        each single-line JSON event takes the fast path; from the first
        other block on (``[DONE]``, a comment, a multi-line event) the rest
        goes through the decoder, in order. Runs of events sent unchanged
        go out as one slice of ``data``."""
        out: list[bytes] = []
        run = pos = 0  # data[run:pos]: events to send unchanged, not yet in out
        size = len(data)
        runs = _RUNS_PER_READ
        try:
            while pos < size and not self.finished:
                shape = self._shape
                if (
                    runs
                    and shape is not None
                    and size - pos >= _RUN_MIN * shape.size
                    and data.startswith(shape.prefix, pos)
                    and self.chain.has_lane(shape.index, shape.key)
                ):
                    runs -= 1
                    got = self._run(data, pos, shape)
                elif (
                    runs
                    and self._learns >= _EAGER_LEARNS
                    and size - pos >= _DECODED_RUN_BYTES
                    and (shape is None or not data.startswith(shape.prefix, pos))
                ):
                    runs -= 1
                    got = self._decoded_run(data, pos)
                else:
                    got = None
                if got is not None:
                    pos, changed = got
                    for start, stop, raw in changed:
                        out.append(data[run:start])
                        out.append(raw)
                        run = stop
                    continue
                # The event's first line end (``data`` ends with a blank
                # line, so there is one): a single-line event ends there.
                nl = data.find(b"\n", pos)
                end = nl + 2
                single = data[nl + 1] == 10  # no second line
                outs = None
                if (
                    single
                    and shape is not None
                    and end - pos >= shape.size
                    and data.startswith(shape.prefix, pos)
                    and data.endswith(shape.suffix, pos, end)
                ):
                    outs = self._shaped(data, pos, end, shape)
                if outs is not None:
                    sent = None if outs is PASS_ONLY else self._sent(outs, data[pos:end])
                elif single and data.startswith(b"data: {", pos):
                    sent = self._event(data, pos, end)
                else:
                    out.append(data[run:pos])
                    rest = data[pos:]
                    run = pos = size
                    out.append(self._events(self._fed(rest)))
                    break
                if sent is not None:
                    out.append(data[run:pos])
                    out.append(sent)
                    run = end
                pos = end
        except (UpstreamProtocolError, TransformError):
            # The events before the broken one are not lost (``fail``).
            self._salvage = b"".join(out) + data[run:pos] + self._salvage
            raise
        if run < pos:
            out.append(data[run:pos])
        return b"".join(out)

    def _run(
        self, data: bytes, pos: int, shape: _Shape
    ) -> tuple[int, list[tuple[int, int, bytes]]] | None:
        """A run of events of the learned shape from ``data[pos]`` (which
        starts with its prefix) through the chain at once: where the run
        ends, and the events in it not sent unchanged (start, end, bytes to
        send instead). None if fewer than two events there are of the shape
        with a middle that has no quote: the caller takes the next alone.

        The run is found and read with a few calls over the whole read, not
        a few per event: its end is found from the read's end (the last
        boundary between two events of the shape, ``shape.sep``, and the
        event after it if it is one of the shape too); its middles are cut
        from its lines; rebuilding the run from them and comparing proves
        that every event in it is one of the shape; and one JSON decode of
        the middles as a list reads them. A middle with no quote byte is one
        JSON string exactly when the list decodes to as many strings as
        there are middles (a trailing backslash would merge two), and then
        the texts are what ``_shaped`` reads one by one."""
        last = data.rfind(shape.sep, pos)
        if last < 0:
            return None
        end = last + shape.end
        # The event after that boundary, if it is one of the shape too (its
        # first line end is its suffix's: ``data`` ends with a blank line).
        stop = data.find(b"\n", end) + 2
        if data[stop - 1] == 10 and data.endswith(shape.suffix, end, stop):
            end = stop
        region = data[pos:end]
        # One event per line pair (the event, then its blank line).
        lines = region.split(b"\n")
        start, stop = shape.start, 2 - shape.end
        parts = [line[start:stop] for line in lines[0:-1:2]]
        n = len(parts)
        if n < 2 or region != shape.prefix + shape.sep.join(parts) + shape.suffix:
            return None  # not all of the shape (or not one event per line pair)
        middles = b'","'.join(parts)
        if middles.count(b'"') != 2 * n - 2:
            return None  # a quote in a middle: not certainly one string
        try:
            texts = orjson.loads(b'["' + middles + b'"]')
        except orjson.JSONDecodeError:
            return None
        if len(texts) != n:
            return None
        taken, changes = self.chain.feed_plain_run(
            shape.index, texts, "".join(texts), shape.payload, key=shape.key
        )
        size = shape.size
        if not changes and taken == n:
            return end, []
        starts = [pos]
        for part in parts[:taken]:
            starts.append(starts[-1] + size + len(part))
        return starts[taken], self._sent_run(data, starts, changes)

    def _sent_run(
        self, data: bytes, starts: list[int], changes: list[tuple[int, list[Out]]]
    ) -> list[tuple[int, int, bytes]]:
        """``_sent`` for the changed events of a run (event ``i`` is
        ``data[starts[i]:starts[i + 1]]``). The chain is asked whether it
        stopped once, after the whole run: a cut can only be in the last
        change (the chain takes nothing after it), so only that one ends
        the stream."""
        sent = [
            (starts[i], starts[i + 1], self._encode(outs, data[starts[i] : starts[i + 1]]))
            for i, outs in changes
        ]
        if sent and self.chain.stopped:
            start, stop, raw = sent[-1]
            sent[-1] = (start, stop, raw + self._stop())
        return sent

    def _decoded_run(
        self, data: bytes, pos: int
    ) -> tuple[int, list[tuple[int, int, bytes]]] | None:
        """``_run`` for a stream whose events differ around the content
        (per-token logprobs, a nonce: no shape is learned): the plain-text
        events from ``data[pos]`` on, each decoded, through the chain at
        once. Same return as ``_run``; None unless at least two are.

        The run is the single-line ``data: {`` events up to the first that
        is not plain text of one choice (or does not decode strictly): each
        one is exactly what ``_event`` would have fed to ``feed_plain``, so
        the chain sees the same texts, with each event's own bytes as the
        original for any it changes. Only the event that ends the run is
        decoded twice (here, then one by one); a first event without a
        string ``"content"`` (or reasoning) is not decoded here at all (a
        call stream would otherwise be decoded twice). All the run's texts
        are of one field (content, or a reasoning field: one lane)."""
        if _STRING_TEXT(data, pos, data.find(b"\n", pos)) is None:
            return None  # the first is no plain text (a call, …)
        lines = data[pos:].split(b"\n")  # ``data`` ends with a blank line
        payloads: list[bytes] = []
        for line, blank in zip(lines[0:-1:2], lines[1::2], strict=False):
            if blank or not line.startswith(b"data: {"):
                break  # not a single-line JSON event
            payloads.append(line[6:])
        if len(payloads) < 2:
            return None
        # Decoded one at a time up to the first that ends the run: the
        # events after it are left undecoded for the path that takes them.
        views: list[ChunkView] = []
        texts: list[str] = []
        index, key = -1, CONTENT
        try:
            for view in map(_decode, payloads):
                plain = plain_text(view)
                if plain is None or (index >= 0 and (plain[0] != index or plain[2] != key)):
                    break
                index, key = plain[0], plain[2]
                views.append(view)
                texts.append(plain[1])
        except msgspec.MsgspecError:
            pass  # that one goes one by one: decoded loosely, or its error
        n = len(texts)
        if n < 2 or not self.chain.has_lane(index, key):
            return None
        choices: list[ChoiceView] = [v.choices[0] for v in views]  # type: ignore[index]
        taken, changes = self.chain.feed_plain_run(
            index, texts, "".join(texts), payloads[0], payloads, choices, key
        )
        starts = [pos]
        for payload in payloads[:taken]:
            starts.append(starts[-1] + len(payload) + 8)  # "data: ", "\n\n"
        sent = self._sent_run(data, starts, changes)
        # Learning goes on as ``_learn_due`` paces it, from the run's last
        # event taken: a stream whose chunks stop differing gets its shape.
        misses, self._misses = self._misses, self._misses + taken
        if taken and misses // _LEARN_EVERY != self._misses // _LEARN_EVERY:
            self._learn(views[taken - 1], data[starts[taken - 1] : starts[taken]])
        return starts[taken], sent

    def _stop(self) -> bytes:
        self.finish()
        return self._encode(self.chain.close(), b"") + DONE_EVENT

    def close(self) -> bytes:
        """The upstream ended. Flushes what is held. Adds no ``[DONE]`` the
        upstream did not send (the I/O layer decides what a truncated
        stream means)."""
        if self.finished:
            return b""
        try:
            out = self._events(end_last_event(self._decoder.close()))
            if not self.finished:
                out += self._encode(self.chain.close(), b"")
        except TransformError as exc:
            return self.fail(exc)
        return out

    def fail(self, exc: Exception) -> bytes:
        """End the stream because of ``exc`` (a protocol error, an upstream
        that died): release what can be released, then an error event."""
        if self.finished:
            return b""
        if isinstance(exc, TransformError):
            log.error("%s", exc, exc_info=exc)  # the client gets it as an error event
        self.finish()
        try:
            flushed = self._encode(self.chain.close(), b"")
        except Exception:  # the chain is already in a broken state
            flushed = b""
        salvage, self._salvage = self._salvage, b""
        return salvage + flushed + failure_event(exc)

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
                self.finish()
                continue
            try:
                view = decode_view(data)
                outs = chain.feed(view, data)
            except (UpstreamProtocolError, TransformError):
                # What the good events before it produced is not lost:
                # ``fail`` sends it ahead of the error event.
                self._salvage = b"".join(out)
                raise
            if outs is PASS_ONLY:
                out.append(ev.raw)
            else:
                out.append(self._encode(outs, ev.raw))
            if chain.stopped:
                out.append(self._stop())
        return b"".join(out)

    def _encode(self, outs: list[Out], raw: bytes) -> bytes:
        """The bytes for what the chain returned for the event ``raw``:
        ``PASS`` is ``raw`` itself, ``DEFER`` keeps it back, ``RELEASE``
        sends the oldest event kept back (its own bytes), ``FORGET`` drops
        them (the chunks after it stand for those events)."""
        parts: list[bytes] = []
        for o in outs:
            if o is PASS:
                parts.append(raw)
            elif o is KEEPALIVE:
                parts.append(_KEEPALIVE_BYTES)
            elif o is DEFER:
                self._kept.append(raw)
            elif o is RELEASE:
                parts.append(self._kept.popleft())
            elif o is FORGET:
                self._kept.clear()
            else:
                parts.append(encode_data(jsoncodec.dumps(o)))
        return b"".join(parts)
