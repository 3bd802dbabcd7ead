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
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from . import plugins  # noqa: F401  (hands register its measured check)
from .chain import Chain
from .context import Context
from .formats.registry import register, unregister
from .passthrough import (
    CHECK_REQUEST,
    PROSE,
    Reply,
    passthrough_failures,
    reply,
    run,
    sse_stream,
)
from .seen import assemble


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
