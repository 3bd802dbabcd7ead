"""The legacy text-completions reply (``POST /v1/completions``), sans-I/O.

A text completion has no tools, roles or reasoning, so of the chat chain's
repairs only one applies: a choice whose text falls into a loop is cut by
the repetition cutter (``transforms/repetition.py``), as the chat chain cuts
it: the text is kept up to where the cutter says, the choice ends with
``finish_reason: "length"`` and ``"streamfix": {"cut": "repetition",
"period": N}``. The cutter is driven through the interface the chain uses
(``feed_text``, then ``feed`` on a decline, ``close``), one per choice
index. Nothing else of a chunk is read: a chunk that needs no change goes
out as the upstream's own bytes, and a changed one keeps every field but
the cut choice's ``text``, ``finish_reason`` and ``streamfix``.

``CompletionSession`` is ``SSESession`` for this API (bytes in, bytes out,
``finished``, ``stopped``, ``saw_done``, ``fail``); ``complete`` and
``fix_text_completion`` take a non-streamed reply through the same
per-choice code, so a whole reply is cut exactly as a stream of it in one
chunk would be.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import orjson

from . import jsoncodec
from .chunks import _as_int, _as_str
from .context import Context, Report
from .delta import Delta
from .errors import UpstreamProtocolError
from .session import failure_event
from .sse import DONE, DONE_EVENT, SSEDecoder, SSEEvent, encode_data, end_last_event
from .transforms.repetition import RepetitionCutter

#: Choice indices watched per reply (OpenAI allows ``n`` up to 128; a
#: batch of prompts multiplies it). Each costs a cutter, whose tail is
#: bounded; choices past this pass through unwatched, and the session then
#: never ends the stream early (an unwatched choice may still be running).
MAX_CHOICES: Final = 256


class _TextChoice(msgspec.Struct, gc=False):
    """The fields of a completion choice this module owns."""

    index: int | None = None  # None: its position in ``choices``
    text: str | None = None
    finish_reason: str | None = None


class _TextChunk(msgspec.Struct, gc=False):
    choices: list[_TextChoice | None] | None = None
    error: Any = None


_decode = msgspec.json.Decoder(_TextChunk).decode

#: A choice that a cut already ended: what the upstream sends for it later
#: is dropped (``_Choice.take``'s callers compare by identity).
_DROP: Final = Delta()


def _view_of(obj: Any) -> _TextChunk:
    """The view of a decoded chunk or completion, read loosely (a server
    that sends ``"index": "0"``); ``choices`` stays aligned with the
    object's, None for an entry that is not an object."""
    if not isinstance(obj, dict):
        raise UpstreamProtocolError(f"chunk is not a JSON object: {str(obj)[:200]}")
    raw = obj.get("choices")
    choices: list[_TextChoice | None] | None = None
    if isinstance(raw, list):
        choices = []
        for pos, ch in enumerate(raw):
            if not isinstance(ch, dict):
                choices.append(None)
                continue
            text = ch.get("text")
            choices.append(
                _TextChoice(
                    index=_as_int(ch.get("index"), pos),
                    text=text if isinstance(text, str) else None,
                    finish_reason=_as_str(ch.get("finish_reason")),
                )
            )
    return _TextChunk(choices=choices, error=obj.get("error"))


def _decode_chunk(payload: bytes) -> _TextChunk:
    """The owned fields of one streamed chunk. Raises UpstreamProtocolError
    when it is not a JSON object."""
    try:
        return _decode(payload)
    except msgspec.ValidationError:
        try:
            return _view_of(jsoncodec.loads_lenient(payload))
        except orjson.JSONDecodeError as exc:  # pragma: no cover - decode() saw JSON
            raise UpstreamProtocolError(f"chunk is not JSON: {exc}") from None
    except msgspec.DecodeError as exc:
        # JSON only the SDKs' lenient reading accepts (a ``-Infinity``
        # logprob, a lone surrogate) is read as they read it.
        try:
            return _view_of(jsoncodec.loads_lenient(payload))
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError(
                f"chunk is not JSON: {exc}; data: {payload[:200]!r}"
            ) from None


def expected_choices(request: dict[str, Any] | None) -> int:
    """How many choices the reply has, as the request asks: ``n`` for each
    prompt (``prompt`` may be a batch: a list of strings or of token
    lists; a list of token ids is one prompt)."""
    if not request:
        return 1
    n = request.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        n = 1
    prompt = request.get("prompt")
    batch = 1
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        batch = len(prompt)
    return n * batch


class _Choice:
    """One choice index: its cutter, and whether it has ended."""

    __slots__ = ("cut", "cutter", "ended")

    def __init__(self, ctx: Context) -> None:
        self.cutter = RepetitionCutter(ctx)
        self.ended = False
        self.cut = False

    def take(self, text: str, finish: str | None, closing: bool) -> Delta | None:
        """This choice's ``text`` of one chunk (``closing``: its last, with
        the upstream's ``finish``) through the cutter, as the chat chain's
        pipeline takes a delta. None when the choice goes out unchanged,
        else the Delta to send instead."""
        cutter = self.cutter
        if not closing and cutter.feed_text(text):  # the plain-text lane
            return None
        d = Delta(content=text, finish_reason=finish)
        if closing:
            cutter.close(d)
        else:
            cutter.feed(d)  # the lane declined this very text
        if closing or d.stop:
            self.ended = True
            self.cut = d.stop
        if d.content == text and d.finish_reason == finish and not d.ext:
            return None
        return d

    def end(self) -> Delta | None:
        """The stream ended with this choice open: close its cutter; what
        it releases, if anything (the cutter holds nothing today)."""
        d = Delta()
        self.cutter.close(d)
        self.ended = True
        self.cut = d.stop
        return d if d.content or d.ext or d.finish_reason else None


def _choice_obj(ch: dict[str, Any], d: Delta) -> dict[str, Any]:
    """The choice ``ch`` with the text and finish of ``d``; every other
    field as it came."""
    out = dict(ch)
    out["text"] = d.content or ""
    out["finish_reason"] = d.finish_reason
    if d.ext:
        out["streamfix"] = d.ext
    return out


def _rebuilt(obj: dict[str, Any], results: list[Delta | None]) -> dict[str, Any]:
    """``obj`` with its choices as ``results`` (aligned with them) say:
    None keeps one, ``_DROP`` leaves it out, a Delta rewrites it."""
    choices: list[Any] = []
    for ch, d in zip(obj["choices"], results, strict=True):
        if d is None:
            choices.append(ch)
        elif d is not _DROP:
            choices.append(_choice_obj(ch, d))
    out = dict(obj)
    out["choices"] = choices
    return out


class CompletionSession:
    """Cut looping choices in one text-completion reply.

    ``feed(data)`` takes bytes exactly as read from the network and returns
    the bytes to send on (possibly empty); ``close()`` once the upstream has
    ended; ``fail(exc)`` instead, to end the stream with an error event.
    ``feed`` raises UpstreamProtocolError on a broken stream (not SSE, a
    chunk that is not a JSON object, an event over the size limit): pass it
    to ``fail``. ``finished`` turns true once the stream is over for the
    client (``[DONE]`` or an error event went out; later input is ignored);
    ``stopped`` when that was because every choice has ended and one was
    cut: stop reading and close the upstream request, the returned bytes
    already end the stream with ``[DONE]``. ``report`` says what was cut.
    A session serves one reply: a stream, or one ``complete``.
    """

    def __init__(self, request: dict[str, Any] | None = None, **options: Any) -> None:
        self.ctx = Context.of(request, options)
        self._watch = self.ctx.options.repetition
        self._decoder = SSEDecoder(self.ctx.options.max_event_bytes)
        self._choices: dict[int, _Choice] = {}
        #: Choices the reply will have (the session ends early only once
        #: that many have ended), and how many of those seen are open.
        self._expected = expected_choices(request)
        self._open = 0
        self._any_cut = False
        self._unwatched = False  # a choice past MAX_CHOICES was seen
        #: The last chunk with choices, as the model for one we must make.
        self._template: bytes | None = None
        #: Output of a read whose later event was broken (see ``fail``).
        self._salvage = b""
        self.finished = False
        self.stopped = False
        #: The upstream sent ``data: [DONE]``.
        self.saw_done = False

    @property
    def report(self) -> Report:
        return self.ctx.report

    def finish(self) -> None:
        """The stream is over for the client (an error event was sent
        for it): later input is ignored."""
        self.finished = True

    # -- the choices -------------------------------------------------------

    def _choice(self, index: int) -> _Choice | None:
        st = self._choices.get(index)
        if st is None:
            if len(self._choices) >= MAX_CHOICES:
                self._unwatched = True
                return None
            st = self._choices[index] = _Choice(self.ctx)
            self._open += 1
        return st

    def _take(self, view: _TextChunk, final: bool = False) -> list[Delta | None] | None:
        """Each choice of one chunk (``final``: of a whole completion, each
        choice's last) through its cutter: per choice, aligned with them,
        what ``_rebuilt`` needs; None when the chunk goes out unchanged."""
        choices = view.choices
        if not choices or view.error is not None or not self._watch:
            return None
        results: list[Delta | None] | None = None
        for pos, cv in enumerate(choices):
            if cv is None:
                continue
            st = self._choice(pos if cv.index is None else cv.index)
            if st is None:
                continue
            if st.ended:
                # After a cut the choice says no more; after a normal
                # finish, whatever else comes for it goes on untouched.
                d = _DROP if st.cut else None
            else:
                finish = cv.finish_reason
                d = st.take(cv.text or "", finish, final or finish is not None)
                if st.ended:
                    self._open -= 1
                    self._any_cut = self._any_cut or st.cut
            if d is not None:
                if results is None:
                    results = [None] * len(choices)
                results[pos] = d
        return results

    def _over(self) -> bool:
        """Every choice has ended, and a cut ended one: the upstream has
        nothing more to send that the client will get."""
        return (
            self._any_cut
            and not self._open
            and not self._unwatched
            and len(self._choices) >= self._expected
        )

    # -- streaming ---------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Raises UpstreamProtocolError on a broken stream; see ``fail``."""
        if self.finished:
            return b""
        return self._events(self._decoder.feed(data))

    def close(self) -> bytes:
        """The upstream ended. Adds no ``[DONE]`` the upstream did not send
        (the I/O layer decides what a truncated stream means)."""
        if self.finished:
            return b""
        out = self._events(end_last_event(self._decoder.close()))
        return out if self.finished else out + self._flush()

    def fail(self, exc: Exception) -> bytes:
        """End the stream because of ``exc`` (a protocol error, an upstream
        that died): what the read before it produced, then an error event."""
        if self.finished:
            return b""
        self.finished = True
        try:
            flushed = self._flush()
        except Exception:  # the state is already broken
            flushed = b""
        salvage, self._salvage = self._salvage, b""
        return salvage + flushed + failure_event(exc)

    def _events(self, events: list[SSEEvent]) -> bytes:
        out: list[bytes] = []
        for ev in events:
            if self.finished:
                break
            try:
                out.append(self._event(ev))
            except UpstreamProtocolError:
                # What the good events before it produced is not lost:
                # ``fail`` sends it ahead of the error event.
                self._salvage = b"".join(out)
                raise
        return b"".join(out)

    def _event(self, ev: SSEEvent) -> bytes:
        data = ev.data
        if data is None:  # a comment
            return ev.raw
        if data == DONE:
            self.saw_done = True
            out = self._flush() + ev.raw
            self.finished = True
            return out
        view = _decode_chunk(data)
        results = self._take(view)
        if view.choices:
            self._template = data
        if results is None:
            out = ev.raw
        else:
            obj = _rebuilt(jsoncodec.loads_lenient(data), results)
            out = encode_data(jsoncodec.dumps(obj)) if obj["choices"] else b""
        if self._over():  # (a normal finish may end the last open choice)
            self.finished = self.stopped = True
            out += DONE_EVENT
        return out

    def _flush(self) -> bytes:
        """Close the cutters of the choices still open; a chunk for what
        they release (nothing, with today's cutter)."""
        choices: list[dict[str, Any]] = []
        for index, st in self._choices.items():
            if st.ended:
                continue
            self._open -= 1
            d = st.end()
            if d is not None:
                base = {"index": index, "text": "", "logprobs": None, "finish_reason": None}
                choices.append(_choice_obj(base, d))
        if not choices:
            return b""
        obj = jsoncodec.loads_lenient(self._template) if self._template is not None else {}
        top = {k: v for k, v in obj.items() if k not in ("choices", "usage")}
        top.setdefault("object", "text_completion")
        top["choices"] = choices
        return encode_data(jsoncodec.dumps(top))

    # -- non-streamed --------------------------------------------------------

    def complete(self, completion: dict[str, Any]) -> dict[str, Any]:
        """Cut looping choices of one whole ``text_completion``: each
        choice's text as one chunk that is also its last, so the result is
        what the streamed path gives for the reply sent as one chunk.
        Returns a new dict (the argument is not modified)."""
        results = self._take(_view_of(completion), final=True)
        if results is None:
            return dict(completion)
        return _rebuilt(completion, results)


def fix_text_completion(
    completion: dict[str, Any], request: dict[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """Cut looping choices of one non-streamed ``text_completion``
    (``CompletionSession.complete``; use that for the ``report``)."""
    return CompletionSession(request, **options).complete(completion)
