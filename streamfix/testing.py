"""The property checks streamfix runs on itself, for plugin authors.

Call them from your own tests (pytest or not: each raises
``AssertionError`` with the first counterexample, and needs nothing but
streamfix). ``request`` and ``**options`` are what ``fix_sse`` takes:
pass your step as ``transforms=[MyStep]``; a format is registered for the
duration of a ``with registered(my_module):`` block.

- ``check_split_invariant(text_or_stream, request)``: the reply comes out
  the same however the stream is cut: the content re-chunked at every
  point and one character per chunk (how the model's tokens fall), and the
  SSE bytes read at every offset and one byte per read (how the network
  falls, UTF-8 sequences split between reads included).
- ``check_passthrough(texts, request)``: plain prose and code pass
  byte-identical, cut anywhere: the upstream's own bytes out when no tools
  are offered; the same text, byte for byte, when they are.
- ``check_stream_equals_whole(text_or_stream, request)``: the streamed
  reply equals ``fix_completion`` of the same reply sent whole.
- ``cuts_strategy(data)``: a hypothesis strategy of read cuts of ``data``
  (hypothesis is imported only when it is called), for
  ``check_cuts(stream, cuts, request)``.

Helpers: ``sse_stream(pieces)`` builds an upstream stream, ``run`` feeds
reads through ``SSESession`` synchronously, ``reply`` assembles what an
OpenAI SDK client sees.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import orjson

from .chain import Chain
from .context import Context
from .seen import assemble
from .session import SSESession, chunk_event

#: Plain prose and code that every chain, with any plugin, must pass
#: byte-identical (tools offered or not): braces, brackets, tags in code,
#: a JSON example in a fence, shifts, arrows, non-ASCII text.
PROSE: tuple[str, ...] = (
    "The capital of France is Paris. It has about two million inhabitants.",
    "Sure! Here are three ideas:\n\n1. Walk along the river.\n2. Visit a museum.\n"
    "3. Try a café — the croissants are great.\n",
    "In C you shift with `x << 2`, and in C++ you print with `std::cout << x;`.\n",
    "```python\ndef area(r: float) -> float:\n    return 3.14159 * r ** 2  # {not a call}\n```\n",
    'The config looks like this:\n\n```json\n{"debug": true, "level": [1, 2, 3]}\n```\n',
    "function f(a) { return a.map((x) => x * 2); } // arrow => fine\n",
    "Use <b>bold</b> or <em>emphasis</em> in HTML; a <div> holds blocks.",
    "Résumé, naïve, 東京, Ελληνικά, emoji 🙂 and maths: a < b > c, {x | x > 0}.",
    "Note: call me later. The weather (sunny, 21 °C) is nice; search: none needed.",
)

#: The request of the checks that need tools offered (``register``'s
#: measured check among them).
CHECK_REQUEST: dict[str, Any] = {
    "model": "check",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        },
    ],
}


class Reply(NamedTuple):
    """What a client assembles from a reply (call ids left out: they are
    made up anew for each lifted call)."""

    content: str
    reasoning: str
    calls: tuple[tuple[str, Any], ...]
    finish: str | None
    errors: tuple[str, ...]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return chunk_event(delta, finish, "check")


def sse_stream(pieces: Sequence[str], finish: str = "stop", done: bool = True) -> bytes:
    """An upstream stream: a role chunk, one chunk per piece of content, a
    finish chunk, ``[DONE]``."""
    out = [_chunk({"role": "assistant", "content": ""})]
    out.extend(_chunk({"content": p}) for p in pieces)
    out.append(_chunk({}, finish))
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def run(
    reads: bytes | Sequence[bytes], request: dict[str, Any] | None = None, **options: Any
) -> bytes:
    """``reads`` through ``SSESession`` (what ``fix_sse`` does, without a
    loop): the bytes the client gets."""
    if isinstance(reads, bytes):
        reads = [reads]
    session = SSESession(request, **options)
    out = []
    for data in reads:
        out.append(session.feed(data))
        if session.finished:
            break
    out.append(session.close())
    return b"".join(out)


def reply(data: bytes) -> Reply:
    """What an OpenAI SDK client assembles from ``data`` (SSE bytes)."""
    seen = assemble(data)
    calls = []
    for _, c in sorted(seen.calls.items()):
        try:
            args: Any = orjson.loads(c["arguments"] or "{}")
        except orjson.JSONDecodeError:
            args = c["arguments"]
        calls.append((c["name"], args))
    return Reply(seen.content, seen.reasoning, tuple(calls), seen.finish, tuple(seen.errors))


def _text_of(stream: str | bytes) -> tuple[str | None, bytes]:
    if isinstance(stream, str):
        return stream, sse_stream([stream])
    return None, stream


def _byte_cuts(data: bytes, limit: int | None) -> Iterator[list[bytes]]:
    """``data`` cut once at every offset (at most ``limit`` offsets, spread
    evenly), then one byte per read."""
    n = len(data)
    points = range(1, n)
    if limit is not None and n - 1 > limit:
        points = range(1, n, -(-(n - 1) // limit))
    yield from ([data[:p], data[p:]] for p in points)
    yield [data[i : i + 1] for i in range(n)]


def _fail(what: str, cut: Any, got: Reply, want: Reply) -> AssertionError:
    return AssertionError(
        f"{what}\n  cut:  {cut!r}\n  got:  {got}\n  want: {want}"
        if len(repr(cut)) < 400
        else f"{what}\n  cut:  {repr(cut)[:400]}…\n  got:  {got}\n  want: {want}"
    )


def check_split_invariant(
    stream: str | bytes,
    request: dict[str, Any] | None = None,
    max_cuts: int | None = 2000,
    **options: Any,
) -> Reply:
    """The reply to ``stream`` (a reply's content text, or upstream SSE
    bytes) is the same however it is cut (see the module docstring).
    Returns it; raises ``AssertionError`` at the first cut that differs.
    ``max_cuts`` bounds the single cuts tried per axis (None: all)."""
    text, data = _text_of(stream)
    want = reply(run(data, request, **options))
    if text is not None:
        n = len(text)
        points = range(1, n)
        if max_cuts is not None and n - 1 > max_cuts:
            points = range(1, n, -(-(n - 1) // max_cuts))
        for pieces in (*([text[:i], text[i:]] for i in points), list(text)):
            got = reply(run(sse_stream(pieces), request, **options))
            if got != want:
                raise _fail("the reply changed when the content was chunked so", pieces, got, want)
    for reads in _byte_cuts(data, max_cuts):
        got = reply(run(reads, request, **options))
        if got != want:
            raise _fail("the reply changed when the stream was read so", reads, got, want)
    return want


def check_cuts(
    stream: str | bytes, cuts: Sequence[int], request: dict[str, Any] | None = None, **options: Any
) -> Reply:
    """One property case: the reply to ``stream`` read in pieces cut at
    ``cuts`` (byte offsets) equals the reply read whole."""
    _, data = _text_of(stream)
    want = reply(run(data, request, **options))
    points = sorted({c for c in cuts if 0 < c < len(data)})
    reads = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    got = reply(run(reads, request, **options))
    if got != want:
        raise _fail("the reply changed when the stream was read so", reads, got, want)
    return want


def cuts_strategy(data: str | bytes, max_cuts: int = 16) -> Any:
    """A hypothesis strategy of byte offsets at which to cut ``data`` (its
    SSE bytes, when it is text) between reads, for ``check_cuts``.
    Imports hypothesis when called."""
    from hypothesis import strategies as st

    _, raw = _text_of(data)
    return st.lists(st.integers(min_value=1, max_value=max(1, len(raw) - 1)), max_size=max_cuts)


def passthrough_failures(
    texts: Sequence[str] = PROSE,
    request: dict[str, Any] | None = None,
    cuts: str = "all",
    frames: bool | None = None,
    **options: Any,
) -> list[tuple[str, str]]:
    """The texts of ``texts`` that do not pass byte-identical, with what
    the client got of each. With no tools offered the stream's bytes must
    come out as they came (the fast path); with tools, the text the client
    reads (blanks before a possible call are held a moment, so frames may
    differ). ``frames`` True or False asks for the bytes or only the
    text whatever the tools (a step that holds text a moment, like the
    redaction example, changes frames but not text). ``cuts``: how each is chunked: ``"words"`` (at
    each blank, and whole; cheap), ``"all"`` (also at every character and
    one character per chunk)."""
    bad: list[tuple[str, str]] = []
    for text in texts:
        chunkings: list[list[str]] = [[text], re.findall(r"\S+\s*|\s+", text)]
        if cuts == "all":
            chunkings.append(list(text))
            chunkings.extend([text[:i], text[i:]] for i in range(1, len(text)))
        exact = not (request or {}).get("tools") if frames is None else frames
        for pieces in chunkings:
            data = sse_stream(pieces)
            out = run(data, request, **options)
            if out == data:
                continue
            got = reply(out)
            if exact or got != reply(data):
                bad.append((text, got.content if got.content != text else f"{out[:300]!r}"))
                break
    return bad


def check_passthrough(
    texts: Sequence[str] = PROSE,
    request: dict[str, Any] | None = None,
    frames: bool | None = None,
    **options: Any,
) -> None:
    """Plain prose and code pass byte-identical, however the content is
    chunked (``passthrough_failures``; ``frames``: see there). Default
    texts: ``PROSE``."""
    bad = passthrough_failures(texts, request, "all", frames, **options)
    if bad:
        text, got = bad[0]
        raise AssertionError(f"plain text changed:\n  sent: {text!r}\n  got:  {got!r}")


def check_stream_equals_whole(
    stream: str | bytes, request: dict[str, Any] | None = None, **options: Any
) -> Reply:
    """The streamed reply equals ``fix_completion`` of the same reply
    sent whole (the upstream's content, reasoning and finish joined into
    one ``chat.completion``). Returns the streamed reply."""
    _, data = _text_of(stream)
    streamed = reply(run(data, request, **options))
    upstream = assemble(data)
    message: dict[str, Any] = {"role": "assistant", "content": upstream.content}
    if upstream.reasoning:
        message["reasoning_content"] = upstream.reasoning
    completion = {
        "id": "chatcmpl-check",
        "object": "chat.completion",
        "created": 1,
        "model": "check",
        "choices": [{"index": 0, "message": message, "finish_reason": upstream.finish}],
    }
    fixed = Chain(Context.of(request, options)).complete(completion)
    msg = fixed["choices"][0]["message"]
    calls = tuple(
        (c["function"]["name"], orjson.loads(c["function"]["arguments"] or "{}"))
        for c in msg.get("tool_calls") or ()
    )
    whole = Reply(
        msg.get("content") or "",
        msg.get("reasoning_content") or msg.get("reasoning") or "",
        calls,
        fixed["choices"][0].get("finish_reason"),
        (),
    )
    if whole != streamed:
        raise AssertionError(
            f"streamed and whole differ:\n  streamed: {streamed}\n  whole:    {whole}"
        )
    return streamed


@contextlib.contextmanager
def registered(*items: Any, check: bool = True) -> Iterator[Any]:
    """``formats.register(*items)`` for the block, taken back after it."""
    from .formats.registry import register, unregister

    plugin = register(*items, check=check)
    try:
        yield plugin
    finally:
        unregister(plugin)


__all__ = [
    "CHECK_REQUEST",
    "PROSE",
    "Reply",
    "check_cuts",
    "check_passthrough",
    "check_split_invariant",
    "check_stream_equals_whole",
    "cuts_strategy",
    "passthrough_failures",
    "registered",
    "reply",
    "run",
    "sse_stream",
]
