"""Incremental end-of-region finders shared by the format modules.

Each is fed a region's text piece by piece and never rescans what it has
seen: ``UntilMarker`` keeps only ``len(close) - 1`` characters of overlap;
``Balanced`` keeps its string/escape/depth state between pieces and skips
to the next interesting character with a compiled regex (C speed);
``Structural`` runs a small table of states (outside a value, inside a JSON
string, inside an XML value, just after a closing tag) so that a closing
token written inside a value is data, as the engines' structural parsers
read it (vLLM ``qwen3coder_tool_parser.py``; canitoolcall's
``marker-in-arguments`` fixtures). ``TOOL_CALL_TABLE`` is the shared end
rule of ``<tool_call>`` regions.
"""

from __future__ import annotations

import functools
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


def skipped(skip: int, text: str) -> tuple[int, int]:
    """A finder reads after its opening marker, which may come over several
    pieces: (the marker's characters still to skip after ``text``, where
    ``text``'s own characters begin)."""
    if not skip:
        return 0, 0
    i = min(skip, len(text))
    return skip - i, i


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


#: ``Structural`` table entries. A scan state is a list of ``(pattern,
#: next)``: the earliest match of any pattern (a regex) moves to ``next``
#: (``END``: the region ends after the match). A peek state is a ``Peek``:
#: it looks at what follows blanks.
END = ""


class Peek:
    """A state that decides by the first non-blank text: the first of
    ``tokens`` (``(literal, next, consume)``) that starts there moves to
    ``next``, past the token when ``consume``, else leaving it to be read
    again in ``next``; any other text moves to ``default``, unread. A
    token that ends the region unread must be one character: the region
    cannot end before text an earlier piece brought."""

    __slots__ = ("default", "tokens")

    def __init__(self, default: str, *tokens: tuple[str, str, bool]) -> None:
        assert all(len(t) == 1 for t, n, consume in tokens if n == END and not consume)
        self.default = default
        self.tokens = tokens


_LEAD_BLANKS = re.compile(r"\s*")


class Structural:
    """An end finder that knows where it stands: a table of states (see
    ``END`` and ``Peek``) read after ``skip`` characters, starting in
    ``start``. It lets a closing token inside a string or a parameter value
    be data: in the value's state that token is not looked for.

    Cost O(len(piece)): one regex search per token met, a kept tail shorter
    than the longest token, no text seen twice beyond that tail."""

    __slots__ = ("_keep", "_rx", "_skip", "_state", "_table", "_tail")

    def __init__(
        self, skip: int, start: str, table: dict[str, list[tuple[str, str]] | Peek]
    ) -> None:
        self._skip = skip
        self._state = start
        self._table = table
        self._tail = ""
        scans = tuple((k, tuple(v)) for k, v in table.items() if isinstance(v, list))
        self._rx, self._keep = _compiled(scans)

    def feed(self, text: str) -> int | None:
        start = 0
        if self._skip:
            start = min(self._skip, len(text))
            self._skip -= start
        base = len(self._tail) - start
        buf = self._tail + text[start:] if start else self._tail + text
        self._tail = ""
        pos = 0
        table = self._table
        while True:
            state = table[self._state]
            if isinstance(state, Peek):
                m = _LEAD_BLANKS.match(buf, pos)
                assert m is not None
                i = m.end()
                if i == len(buf):
                    return None
                for tok, nxt, consume in state.tokens:
                    if buf.startswith(tok, i):
                        pos = i + len(tok) if consume else i
                        if nxt == END:
                            return pos - base
                        self._state = nxt
                        break
                else:
                    rest = buf[i:]
                    if any(tok.startswith(rest) for tok, _, _ in state.tokens):
                        self._tail = rest  # a token may be cut here: wait
                        return None
                    self._state = state.default
                    pos = i
                continue
            rx, nexts = self._rx[self._state]
            m = rx.search(buf, pos)
            if m is None:
                keep = self._keep[self._state]
                self._tail = buf[max(pos, len(buf) - keep) :] if keep else ""
                return None
            nxt = nexts[m.lastindex - 1 if m.lastindex else 0]
            pos = m.end()
            if nxt == END:
                return pos - base
            self._state = nxt


_MAX_TOKEN = 64


@functools.lru_cache(maxsize=64)
def _compiled(
    scans: tuple[tuple[str, tuple[tuple[str, str], ...]], ...],
) -> tuple[dict[str, tuple[re.Pattern[str], tuple[str, ...]]], dict[str, int]]:
    rxs: dict[str, tuple[re.Pattern[str], tuple[str, ...]]] = {}
    keeps: dict[str, int] = {}
    for name, entries in scans:
        rxs[name] = (
            re.compile("|".join(f"({p})" for p, _ in entries)),
            tuple(n for _, n in entries),
        )
        keeps[name] = max(_longest(p) for p, _ in entries) - 1
    return rxs, keeps


def _longest(pattern: str) -> int:
    """The longest text ``pattern`` matches (the patterns here are escaped
    literals or ``\\\\[\\s\\S]``: bounded, no repetition)."""
    n = len(re.sub(r"\\.|\[[^\]]*\]", "x", pattern))
    assert n <= _MAX_TOKEN, pattern
    return n


def literal(token: str) -> str:
    """A ``Structural`` scan pattern for ``token`` as written."""
    return re.escape(token)


#: In a JSON string: an escape pair (skipped whole) or the closing quote.
JSON_ESCAPE = r"\\[\s\S]"


TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TC = literal(TOOL_CALL_CLOSE)

#: The end rule of a ``<tool_call>`` region, shared by the formats that
#: open with it (Hermes JSON, Qwen3-Coder XML, GLM). The first non-blank
#: character tells the body's syntax, and a ``</tool_call>`` that stands
#: inside a value is data (the tokenizer writes it as the marker token even
#: there; only the structure tells them apart):
#:
#: - JSON (``{``, ``[``, a fence): inside a string. A raw newline cannot be
#:   in a JSON string, so ``\n</tool_call>`` ends the region even there (a
#:   broken quote does not hold the rest of the reply).
#: - Qwen3 XML (``<``): inside a ``<parameter=…>`` value, whose
#:   ``</parameter>`` counts only when ``<parameter=``, ``</function>`` or
#:   ``</tool_call>`` follows it (vLLM ``qwen3coder_tool_parser.py``,
#:   ``_find_true_param_end``); a value whose ``</parameter>`` never came
#:   ends at ``</function>`` followed by ``</tool_call>``.
#: - GLM (a name): inside ``<arg_value>…</arg_value>``; a value whose
#:   close never came ends at ``</tool_call>`` followed (after blanks) by
#:   ``<``, the next call's opening (vLLM issue #57826; vLLM's Qwen3 parser
#:   looks for the whole ``<tool_call>``, but a finder cannot end its region
#:   before text an earlier piece already held), or at the end of the stream.
TOOL_CALL_TABLE: dict[str, list[tuple[str, str]] | Peek] = {
    "start": Peek(
        "glm", ("{", "json", False), ("[", "json", False), ("`", "json", False), ("<", "xml", False)
    ),
    "json": [(literal('"'), "json_str"), (_TC, END)],
    "json_str": [
        (JSON_ESCAPE, "json_str"),
        (literal('"'), "json"),
        (literal("\n" + TOOL_CALL_CLOSE), END),
    ],
    "xml": [(literal("<parameter="), "xml_value"), (_TC, END)],
    "xml_value": [
        (literal("</parameter>"), "xml_after_value"),
        (literal("</function>"), "xml_after_function"),
    ],
    "xml_after_value": Peek(
        "xml_value",
        ("<parameter=", "xml", False),
        ("</function>", "xml", False),
        (TOOL_CALL_CLOSE, END, True),
    ),
    "xml_after_function": Peek("xml_value", (TOOL_CALL_CLOSE, END, True)),
    "glm": [(literal("<arg_value>"), "glm_value"), (_TC, END)],
    "glm_value": [(literal("</arg_value>"), "glm"), (_TC, "glm_after_close")],
    "glm_after_close": Peek("glm_value", ("<", END, False)),
}


def tool_call_end(skip: int) -> Structural:
    """The end finder of a ``<tool_call>`` region (``TOOL_CALL_TABLE``)."""
    return Structural(skip, "start", TOOL_CALL_TABLE)
