"""Python call syntax as models write it, read where ``ast`` refuses it.

Models trained on pythonic tool calls write what Python would not parse
but whose reading is certain: JSON's ``true``/``false``/``null`` inside
Python syntax (``toggle(enabled=true)``, ``{"on": true}`` as a value), a
Python keyword as an argument's name (``book(from="SFO", to="NYC")``),
sets (``tags={'urgent', 'bug'}``, read as a list), zero-padded integers
(``month=07`` is 7), a raw newline inside a string (a heredoc), and a
quote of the string's own kind inside it (``'sed -n '360,450p' f.py'``)
when those inner quotes pair up and each is followed by something that
cannot end an argument. vLLM's and Ollama's parsers read these.

Only literals are read: a name that is not a JSON or Python constant, an
operator, a bytes or f-string, a non-finite number is not a literal, and
the call is code (``None``). Nothing is evaluated.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["read_args", "read_calls"]


class _Bad(Exception):
    """The text is not a call made of literals."""


_CONSTANTS: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "true": True,
    "false": False,
    "null": None,
}
_IDENT = re.compile(r"[^\W\d]\w*")
_DOTTED = re.compile(r"[^\W\d][\w]*(?:\s*[.:]\s*[^\W\d]\w*)*")
_NUMBER = re.compile(
    r"[-+]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+"
    r"|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?)(?![\w.])"
)
_BLANKS = re.compile(r"\s*")
#: What may follow a string's closing quote: blanks, then the end of an
#: argument or of a container (or of the text).
_CLOSES = re.compile(r"\s*(?:[,)\]}:]|\Z)")
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "a": "\a",
    "0": "\0",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "\n": "",
}


class _Reader:
    __slots__ = ("i", "s")

    def __init__(self, s: str) -> None:
        self.s = s
        self.i = 0

    def blanks(self) -> None:
        m = _BLANKS.match(self.s, self.i)
        assert m is not None
        self.i = m.end()

    def peek(self) -> str:
        self.blanks()
        return self.s[self.i : self.i + 1]

    def take(self, c: str) -> None:
        if self.peek() != c:
            raise _Bad(f"expected {c!r}")
        self.i += 1

    def at_end(self) -> bool:
        return self.peek() == ""

    # -- calls ------------------------------------------------------------

    def call(self) -> tuple[str, list[Any], dict[str, Any]]:
        self.blanks()
        m = _DOTTED.match(self.s, self.i)
        if m is None:
            raise _Bad("no name")
        self.i = m.end()
        name = re.sub(r"\s+", "", m.group())
        self.take("(")
        positional, keywords = self.arguments(")")
        return name, positional, keywords

    def arguments(self, close: str) -> tuple[list[Any], dict[str, Any]]:
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        while self.peek() != close:
            m = _IDENT.match(self.s, self.i)
            if (
                m is not None
                and self.s[m.end() :].lstrip()[:1] == "="
                and (self.s[m.end() :].lstrip()[1:2] != "=")
            ):
                self.i = m.end()
                self.take("=")
                key = m.group()
                if key in keywords:
                    raise _Bad("repeated argument")
                keywords[key] = self.value()
            elif keywords:
                raise _Bad("positional after keyword")
            else:
                positional.append(self.value())
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != close:
                raise _Bad("expected , or )")
        self.i += 1
        return positional, keywords

    # -- values -----------------------------------------------------------

    def value(self) -> Any:
        c = self.peek()
        s, i = self.s, self.i
        if c == "[":
            self.i += 1
            return self.items("]")
        if c == "(":
            self.i += 1
            return self.items(")")
        if c == "{":
            self.i += 1
            return self.braces()
        m = _NUMBER.match(s, i)
        if m is not None:
            self.i = m.end()
            return _number(m.group())
        m = _IDENT.match(s, i)
        if m is not None:
            word = m.group()
            after = s[m.end() : m.end() + 1]
            if after in ("'", '"') and word.lower() in ("r", "u"):
                self.i = m.end()
                return self.string(raw=word.lower() == "r")
            if word in _CONSTANTS:
                self.i = m.end()
                return _CONSTANTS[word]
            raise _Bad("not a literal")
        if c in ("'", '"'):
            return self.string(raw=False)
        raise _Bad("not a literal")

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        while self.peek() != close:
            out.append(self.value())
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != close:
                raise _Bad(f"expected , or {close}")
        self.i += 1
        return out

    def braces(self) -> Any:
        """A dict (keys strings, or bare names as some models write them)
        or a set (a list: JSON has no sets)."""
        if self.peek() == "}":
            self.i += 1
            return {}
        first = self.key_or_value()
        if self.peek() != ":":
            out = [first[1]]
            while True:
                if self.peek() == ",":
                    self.i += 1
                if self.peek() == "}":
                    self.i += 1
                    return out
                out.append(self.value())
                if self.peek() not in (",", "}"):
                    raise _Bad("expected , or }")
        obj: dict[str, Any] = {}
        key = first
        while True:
            if not isinstance(key[1], str):
                raise _Bad("a key that is not a string")
            self.take(":")
            obj[key[1]] = self.value()
            if self.peek() == ",":
                self.i += 1
            if self.peek() == "}":
                self.i += 1
                return obj
            key = self.key_or_value()

    def key_or_value(self) -> tuple[bool, Any]:
        self.blanks()
        m = _IDENT.match(self.s, self.i)
        if m is not None and m.group() not in _CONSTANTS and self.s[m.end() :].lstrip()[:1] == ":":
            self.i = m.end()
            return True, m.group()
        return False, self.value()

    def string(self, raw: bool) -> str:
        s = self.s
        q = s[self.i]
        triple = s.startswith(q * 3, self.i)
        start = self.i + (3 if triple else 1)
        j = start
        inner = 0
        while True:
            k = s.find(q, j)
            if k < 0:
                raise _Bad("unterminated string")
            if _escaped(s, start, k):
                j = k + 1
                continue
            if triple:
                if s.startswith(q * 3, k):
                    body, self.i = s[start:k], k + 3
                    break
                j = k + 1
                continue
            if _CLOSES.match(s, k + 1) is not None:
                body, self.i = s[start:k], k + 1
                break
            inner += 1  # a quote of the same kind inside the string
            j = k + 1
        if inner % 2:
            raise _Bad("inner quotes that do not pair up: the reading is not certain")
        return body if raw else _unescape(body)


def _escaped(s: str, start: int, k: int) -> bool:
    n = 0
    while k - n - 1 >= start and s[k - n - 1] == "\\":
        n += 1
    return n % 2 == 1


_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.S)


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body

    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if len(e) > 1:
            code = int(e[1:], 16)
            if code > 0x10FFFF:
                raise _Bad("escape out of range")
            return chr(code)
        return _ESCAPES.get(e, m.group())  # an unknown escape stays as written

    return _ESCAPE.sub(one, body)


def _number(text: str) -> Any:
    t = text.replace("_", "")
    sign = -1 if t.startswith("-") else 1
    body = t.lstrip("+-")
    low = body.lower()
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if low.startswith(prefix):
            return sign * int(body[2:], base)
    if re.fullmatch(r"\d+", body):
        try:
            return sign * int(body)  # ``07`` is 7
        except ValueError:  # beyond Python's digit limit
            raise _Bad("too many digits") from None
    f = float(t)
    if not math.isfinite(f):
        raise _Bad("JSON has no infinite number")
    return f


def read_args(src: str) -> tuple[list[Any], dict[str, Any]] | None:
    """The literal arguments written between a call's parentheses, or None."""
    r = _Reader(src)
    try:
        got = r.arguments("")
    except (_Bad, RecursionError, ValueError, OverflowError):
        return None
    return got


#: The end of one call of a list and the start of the next: where reading
#: starts again after a call that does not read.
_NEXT_CALL = re.compile(r"\)\s*,\s*(?=[^\W\d][\w.]*\s*\()")

Call = tuple[str, list[Any], dict[str, Any]]


def read_calls(text: str) -> list[Call | None] | None:
    """The calls of a Python list of calls (or of one bare call), each
    read on its own: one that does not read is None in its place (its
    siblings still count). None when the text is not such a list."""
    s = text.strip()
    if not s.startswith("["):
        r = _Reader(s)
        try:
            one = r.call()
            if not r.at_end():
                return None
        except (_Bad, RecursionError, ValueError, OverflowError):
            return None
        return [one]
    if not s.endswith("]"):
        return None
    body = s[1:-1]
    out: list[Call | None] = []
    r = _Reader(body)
    if r.at_end():
        return None
    while not r.at_end():
        at = r.i
        try:
            out.append(r.call())
            if r.peek() == ",":
                r.i += 1
            elif not r.at_end():
                raise _Bad("expected , between calls")
            continue
        except (_Bad, RecursionError, ValueError, OverflowError):
            pass
        nxt = _NEXT_CALL.search(body, at)
        out.append(None)
        if nxt is None:
            break
        r.i = nxt.end()
    return out
