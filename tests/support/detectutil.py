"""Helpers for the detector's tests: run content through the whole chain
synchronously (``SSESession``), whole, split at every character boundary,
one character at a time, or at byte cuts chosen by hypothesis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamfix.context import Report
from streamfix.session import SSESession

from .streamutil import SHAPES_REQUEST, Assembled, assemble, split_at, text_stream


def run_parts(
    parts: Sequence[bytes], request: dict[str, Any] | None = SHAPES_REQUEST, **opts: Any
) -> tuple[Assembled, Report]:
    s = SSESession(request, **opts)
    out = b"".join(s.feed(p) for p in parts) + s.close()
    return assemble(out), s.report


def run_pieces(
    pieces: Sequence[str],
    request: dict[str, Any] | None = SHAPES_REQUEST,
    finish: str = "stop",
    **opts: Any,
) -> tuple[Assembled, Report]:
    return run_parts([text_stream(pieces, finish)], request, **opts)


def result(a: Assembled) -> tuple[str, str, list[tuple[str, Any]], str | None]:
    return (a.content, a.reasoning, a.calls(), a.finish_reason)


def splits(text: str) -> list[list[str]]:
    """The text whole, cut once at every boundary, and one char per piece."""
    out = [[text], list(text)]
    out.extend([text[:i], text[i:]] for i in range(1, len(text)))
    return out


def check_split_invariant(
    text: str, request: dict[str, Any] | None = SHAPES_REQUEST, finish: str = "stop"
) -> tuple[str, str, list[tuple[str, Any]], str | None]:
    """Run every split of ``text``; assert identical results; return it."""
    whole = result(run_pieces([text], request, finish)[0])
    for pieces in splits(text):
        got = result(run_pieces(pieces, request, finish)[0])
        assert got == whole, (pieces, got, whole)
    return whole


def check_byte_cuts(
    text: str,
    cuts: Sequence[int],
    request: dict[str, Any] | None = SHAPES_REQUEST,
    finish: str = "stop",
) -> None:
    """The SSE stream of ``text`` (one chunk per character), cut at byte
    offsets: same result as whole."""
    whole = result(run_pieces([text], request, finish)[0])
    data = text_stream(list(text), finish)
    got = result(run_parts(split_at(data, [c % (len(data) + 1) for c in cuts]), request)[0])
    assert got == whole
