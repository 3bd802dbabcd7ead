"""Incremental end-of-region finders shared by the format modules.

Each is fed a region's text piece by piece and never rescans what it has
seen: ``UntilMarker`` keeps only ``len(close) - 1`` characters of overlap;
``Balanced`` keeps its string/escape/depth state between pieces and skips
to the next interesting character with a compiled regex (C speed).
"""

from __future__ import annotations

import re

from .base import ABORT, EndFinder


def end_of_first(s: str, closes: tuple[str, ...]) -> int:
    """The offset just past the earliest of ``closes`` in ``s``, or -1."""
    best = -1
    for c in closes:
        i = s.find(c)
        if i >= 0 and (best < 0 or i + len(c) < best):
            best = i + len(c)
    return best


class UntilMarker:
    """The region ends just after the first of ``closes`` (e.g. ``</tool_call>``)."""

    __slots__ = ("_closes", "_keep", "_skip", "_tail")

    def __init__(self, *closes: str, skip: int = 0) -> None:
        self._closes = closes
        self._keep = max(len(c) for c in closes) - 1
        self._tail = ""
        self._skip = skip  # characters of the opening marker not to search

    def feed(self, text: str) -> int | None:
        if self._skip:
            take = min(self._skip, len(text))
            self._skip -= take
            text_off = take
        else:
            text_off = 0
        s = self._tail + text[text_off:]
        base = len(self._tail)
        best = end_of_first(s, self._closes)
        if best >= 0:
            return best - base + text_off
        self._tail = s[-self._keep :] if self._keep else ""
        return None


_INTERESTING = re.compile(r"""["'\\{}\[\]()]""")
_OPEN = "{[("
_CLOSE = "}])"


class Balanced:
    """The region ends where brackets opened after ``skip`` characters
    close again: a JSON value, a Python literal, or a call's ``(...)``.

    Strings in double or (``quotes="\\"'"``) single quotes are skipped,
    with backslash escapes. ``first`` restricts what may come first after
    optional whitespace (anything else: ``ABORT``); ``max_depth`` bounds
    nesting (deeper: ``ABORT``).
    """

    __slots__ = ("_depth", "_esc", "_first", "_max_depth", "_quote", "_quotes", "_skip", "_started")

    def __init__(
        self, skip: int = 0, first: str | None = None, quotes: str = "\"'", max_depth: int = 64
    ) -> None:
        self._skip = skip
        self._depth = 0
        self._quote = ""  # the quote we are inside, or ""
        self._esc = False
        self._started = False
        self._first = first
        self._quotes = quotes
        self._max_depth = max_depth

    def feed(self, text: str) -> int | None:
        i = 0
        n = len(text)
        if self._skip:
            i = min(self._skip, n)
            self._skip -= i
        if not self._started and self._first is not None:
            while i < n and text[i].isspace():
                i += 1
            if i < n:
                if text[i] not in self._first:
                    return ABORT
                self._first = None
        search = _INTERESTING.search
        while i < n:
            if self._quote:
                if self._esc:
                    self._esc = False
                    i += 1
                    continue
                m = search(text, i)
                if m is None:
                    return None
                c = m.group()
                i = m.end()
                if c == "\\":
                    self._esc = True
                elif c == self._quote:
                    self._quote = ""
                continue
            m = search(text, i)
            if m is None:
                return None
            c = m.group()
            i = m.end()
            if c in _OPEN:
                self._depth += 1
                self._started = True
                if self._depth > self._max_depth:
                    return ABORT
            elif c in _CLOSE:
                self._depth -= 1
                if self._depth <= 0 and self._started:
                    return i
            elif c in self._quotes:
                self._quote = c
        return None


class BalancedLine:
    """``Balanced``, then the rest of the line must be blank: a call written
    as one line of code (``lookup_order(order_id="D-4")``) ends its line;
    ``lookup_order(id) returns…`` in prose does not, and is ``ABORT``-ed
    as soon as the next non-blank character shows it. The region ends at
    the newline (blanks before it belong to the region, the newline stays
    text), wherever the pieces were cut."""

    __slots__ = ("_closed", "_inner")

    def __init__(self, skip: int = 0, quotes: str = "\"'") -> None:
        self._inner = Balanced(skip=skip, quotes=quotes)
        self._closed = False

    def feed(self, text: str) -> int | None:
        start = 0
        if not self._closed:
            end = self._inner.feed(text)
            if end is None or end == ABORT:
                return end
            self._closed = True
            start = end
        m = _BLANKS.match(text, start)
        assert m is not None
        i = m.end()
        if i == len(text):
            return None  # blank so far: the next piece (or the end) decides
        return i if text[i] == "\n" else ABORT


_BLANKS = re.compile(r"[ \t\r]*")


def split_values(text: str) -> list[str] | None:
    """Consecutive bracketed values in ``text`` (``{…} {…}`` or ``{…}\\n{…}``),
    separated only by blanks or commas. None if anything else is there."""
    out: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and (text[i].isspace() or text[i] == ","):
            i += 1
        if i >= n:
            return out or None
        if text[i] not in "{[":
            return None
        end = Balanced().feed(text[i:])
        if end is None or end == ABORT:
            return None
        out.append(text[i : i + end])
        i += end


class FirstNonBlank:
    """Wraps a finder: the first non-blank character after ``skip``
    characters must be one of ``allowed`` (else ``ABORT`` at once). Lets a
    format that holds a region to its closing tag give up early on prose
    (``<response>`` followed by XML instead of JSON)."""

    __slots__ = ("_allowed", "_decided", "_inner", "_skip")

    def __init__(self, inner: EndFinder, skip: int, allowed: str) -> None:
        self._inner = inner
        self._skip = skip
        self._allowed = allowed
        self._decided = False

    def feed(self, text: str) -> int | None:
        if not self._decided:
            i = min(self._skip, len(text))
            self._skip -= i
            m = _SPACES.match(text, i)
            assert m is not None
            j = m.end()
            if j < len(text):
                if text[j] not in self._allowed:
                    return ABORT
                self._decided = True
        return self._inner.feed(text)


_SPACES = re.compile(r"\s*")
