"""Almost-JSON in, strict JSON out, one piece at a time (sans-I/O).

``JsonRewriter`` reads the JSON value a model wrote for ``response_format``
and writes it back as strict JSON, token by token: every token that is
already JSON leaves as the model's own characters (a valid reply comes out
byte for byte), and only a broken token is rewritten. What it repairs is
what has one reading:

- a trailing comma before ``}`` or ``]`` (dropped) and a missing comma
  between two values on their own (inserted);
- single-quoted strings (``'it\\'s'`` -> ``"it's"``) and bare object keys
  (``{name: 1}``);
- Python's ``True`` / ``False`` / ``None``;
- ``//`` and ``/* */`` comments (dropped);
- invalid escapes (``\\*``, ``\\_``, ``\\$``: the backslash is kept as a
  character, ``"\\\\*"``, so the value holds exactly what the model wrote)
  and control characters inside strings (escaped);
- at ``close``: an open string and the open brackets closed. A key with
  no value yet, or a comma with nothing after it, is dropped.

Not repaired (``error`` says where it stopped): a bare word as a value
(``NaN``, ``undefined``, unquoted text), a double quote inside a
double-quoted string (``"he said "hi""``: where the string ends has no
one reading), a key with no value before ``}``, nesting past
``MAX_DEPTH``. From the error on, nothing more is read; ``close`` still
completes the syntax of what was released.

*Held.* Text is released once no later character can change it: a comma,
the key and colon after it, and a number or word until its end are held;
a string value's characters leave as they come (an escape waits for its
last character). So what ``feed`` has released plus what ``close`` adds is
always strict JSON, at any split of the input: the state is per character,
and runs of plain characters are taken with one regex match (cost O(piece)).
After the top-level value, blanks are released and the rest (``tail``)
is kept, not released: the caller drops a closing fence or prose.
"""

from __future__ import annotations

import re
from collections import Counter

#: Deepest nesting read; deeper is an error (a bound on the stack).
MAX_DEPTH = 512
#: Characters of text after the top-level value kept in ``tail``.
MAX_TAIL = 4096

# what is expected next
_VALUE, _KEY, _COLON, _AFTER, _DONE = range(5)

_WS = frozenset(" \t\r\n")
_WS_RUN = re.compile(r"[ \t\r\n]+")
_PLAIN = {'"': re.compile(r'[^"\\\x00-\x1f]+'), "'": re.compile(r"""[^'"\\\x00-\x1f]+""")}
_WORD_RUN = re.compile(r"[A-Za-z0-9_$.+\-]+")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?\Z")
_KEY_WORD = re.compile(r"[A-Za-z_$][\w$\-]*\Z")
_LITERALS = {"true": "true", "false": "false", "null": "null"}
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_ESCAPES = frozenset('"\\/bfnrtu')
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _complete_word(word: str) -> bool:
    return word in _LITERALS or word in _PY_LITERALS or _NUMBER.match(word) is not None


class JsonRewriter:
    """One JSON value, fed in pieces (see the module docstring)."""

    __slots__ = (
        "_closers",
        "_comment",
        "_esc",
        "_expect",
        "_key",
        "_pending",
        "_quote",
        "_word",
        "counts",
        "done",
        "error",
        "tail",
    )

    def __init__(self) -> None:
        self._expect = _VALUE
        #: The open containers' closing brackets, innermost last.
        self._closers: list[str] = []
        #: Held: a comma, the whitespace after it, a key and its colon.
        self._pending: list[str] = []
        self._quote = ""  # the open string's quote ("" outside a string)
        self._key = False  # the open string is a key (held in _pending)
        self._esc: str | None = None  # a backslash and what followed it, held
        self._word = ""  # a number or bare word being read, held
        self._comment = ""  # "", "/", "//", "/*", "/**"
        #: What was repaired, by kind (``json_comma``, ``json_quote`` …).
        self.counts: Counter[str] = Counter()
        self.done = False  # the top-level value is complete
        self.error: str | None = None  # where an unrepairable text stopped the read
        self.tail = ""  # text after the top-level value (at most MAX_TAIL)

    @property
    def open(self) -> bool:
        """A value has started and is not complete."""
        return not self.done and (bool(self._closers) or bool(self._quote) or bool(self._word))

    def feed(self, text: str) -> str:
        """Take ``text``; return what can be released now."""
        if self.error is not None:
            return ""
        if self.done:
            return self._after(text, [])
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            if self.done:
                self._after(text[i:], out)
                break
            if self._quote:
                i = self._string(text, i, out)
            elif self._comment:
                i = self._in_comment(text, i)
            elif self._word:
                m = _WORD_RUN.match(text, i)
                if m is not None:
                    self._word += m.group()
                    i = m.end()
                    continue
                self._end_word(out)
            else:
                i = self._token(text, i, out)
            if self.error is not None:
                break
        return "".join(out)

    def close(self, cut: bool = False) -> str:
        """The end of the reply: what completes the value (``cut``: the
        token limit ended it; the syntax is completed the same way, and
        counted as ``json_cut`` instead of ``json_closed``)."""
        out: list[str] = []
        if self.error is None and self._word:
            word = self._word
            if cut and self._expect != _KEY and not _complete_word(word):
                self._word = ""  # a number or word the limit cut: not guessed
                self._pending.clear()
            else:
                self._end_word(out)
        self._comment = ""
        if self.done:
            return "".join(out)
        kind = "json_cut" if cut else "json_closed"
        if self._quote:
            if self._key:
                self._pending.clear()
            else:
                out.append('"')
            self._quote = ""
            self._esc = None
            self.counts[kind] += 1
            if not self._key:
                self._expect = _AFTER
            self._key = False
        if self._pending:
            self._pending.clear()
            self.counts["json_dropped"] += 1
        if self._closers:
            out.extend(reversed(self._closers))
            self._closers.clear()
            self.counts[kind] += 1
            self.done = True
        elif self._expect == _AFTER:
            self.done = True
        return "".join(out)

    # -- pieces ----------------------------------------------------------

    def _after(self, text: str, out: list[str]) -> str:
        """Text after the top-level value: blanks right after it are
        released (valid JSON keeps them), anything from the first other
        character on is ``tail``."""
        if not self.tail:
            m = _WS_RUN.match(text)
            if m is not None:
                out.append(m.group())
                text = text[m.end() :]
        if text:
            self._add_tail(text)
        return "".join(out)

    def _add_tail(self, text: str) -> None:
        if len(self.tail) < MAX_TAIL:
            self.tail += text[: MAX_TAIL - len(self.tail)]

    def _fail(self, what: str) -> None:
        self.error = what
        self._word = ""

    def _emit(self, out: list[str], text: str) -> None:
        """Release ``text`` (a value's start or part), after what was held."""
        if self._pending:
            out.extend(self._pending)
            self._pending.clear()
        out.append(text)

    def _value_done(self) -> None:
        self._expect = _AFTER
        if not self._closers:
            self.done = True

    def _token(self, text: str, i: int, out: list[str]) -> int:
        """One token outside strings, words and comments, at ``text[i]``."""
        c = text[i]
        expect = self._expect
        if c in _WS:
            m = _WS_RUN.match(text, i)
            assert m is not None
            ws = m.group()
            if self._pending or expect in (_COLON,):
                self._pending.append(ws)
            else:
                out.append(ws)
            return m.end()
        if c == "/":
            self._comment = "/"
            return i + 1
        if expect == _AFTER:
            if c == ",":
                self._expect = _KEY if self._closers[-1] == "}" else _VALUE
                self._pending.append(",")
                return i + 1
            if c == self._closers[-1]:
                out.append(c)
                self._closers.pop()
                self._value_done()
                return i + 1
            if c in "\"'{[" or c.isalnum() or c == "-":
                # a value where a comma belongs: two values, each on its own
                self.counts["json_comma"] += 1
                self._expect = _KEY if self._closers[-1] == "}" else _VALUE
                self._pending.append(",")
                return i
            self._fail(f"{c!r} after a value")
            return i
        if c in "}]":
            if not self._closers or c != self._closers[-1]:
                self._fail(f"{c!r} with no {'{' if c == '}' else '['} open")
                return i
            if self._pending and self._pending[0] == ",":
                # a trailing comma: dropped, its blanks kept
                if any(p.lstrip(" \t\r\n") for p in self._pending[1:]):
                    self._fail("a key with no value")
                    return i
                self.counts["json_comma"] += 1
                out.extend(self._pending[1:])
                self._pending.clear()
            elif self._pending or expect == _COLON:
                self._fail("a key with no value")
                return i
            out.append(c)
            self._closers.pop()
            self._value_done()
            return i + 1
        if expect == _COLON:
            if c == ":":
                self._pending.append(":")
                self._expect = _VALUE
                return i + 1
            self._fail(f"{c!r} where a colon belongs")
            return i
        if expect == _KEY:
            if c in "\"'":
                self._open_string(c, key=True)
                return i + 1
            m = _WORD_RUN.match(text, i)
            if m is not None:
                self._word = m.group()
                return m.end()
            self._fail(f"{c!r} where a key belongs")
            return i
        # a value
        if c in "{[":
            if len(self._closers) >= MAX_DEPTH:
                self._fail("nesting deeper than the limit")
                return i
            self._emit(out, c)
            self._closers.append("}" if c == "{" else "]")
            self._expect = _KEY if c == "{" else _VALUE
            return i + 1
        if c in "\"'":
            self._open_string(c, key=False)
            self._emit(out, '"')
            return i + 1
        m = _WORD_RUN.match(text, i)
        if m is not None:
            self._word = m.group()
            return m.end()
        self._fail(f"{c!r} where a value belongs")
        return i

    def _open_string(self, quote: str, key: bool) -> None:
        self._quote = quote
        self._key = key
        if quote == "'":
            self.counts["json_quote"] += 1
        if key:
            self._pending.append('"')

    def _end_word(self, out: list[str]) -> None:
        """A number or bare word ended (a delimiter, or the reply)."""
        word, self._word = self._word, ""
        if self._expect == _KEY:
            if _KEY_WORD.match(word) is None:
                self._fail(f"{word[:40]!r} where a key belongs")
                return
            self.counts["json_key"] += 1
            self._pending.append(f'"{word}"')
            self._expect = _COLON
            return
        if word in _LITERALS or _NUMBER.match(word) is not None:
            self._emit(out, word)
        elif word in _PY_LITERALS:
            self.counts["json_literal"] += 1
            self._emit(out, _PY_LITERALS[word])
        else:
            self._fail(f"{word[:40]!r} is not a JSON value")
            return
        self._value_done()

    def _string(self, text: str, i: int, out: list[str]) -> int:
        """Inside a string, from ``text[i]``: the string's text (a key's to
        ``_pending``) with its repairs; past its end when it closes."""
        sink = self._pending if self._key else out
        quote = self._quote
        n = len(text)
        while i < n:
            if self._esc is not None:
                i = self._escape(text, i, sink)
                continue
            m = _PLAIN[quote].match(text, i)
            if m is not None:
                sink.append(m.group())
                i = m.end()
                continue
            c = text[i]
            if c == quote:
                sink.append('"')
                self._quote = ""
                if self._key:
                    self._key = False
                    self._expect = _COLON
                else:
                    self._value_done()
                return i + 1
            if c == "\\":
                self._esc = "\\"
                i += 1
            elif c == '"':  # inside a single-quoted string
                sink.append('\\"')
                i += 1
            else:  # a control character
                self.counts["json_control"] += 1
                sink.append(_CONTROL.get(c) or f"\\u{ord(c):04x}")
                i += 1
        return i

    def _escape(self, text: str, i: int, sink: list[str]) -> int:
        """A held escape (``self._esc``), continued with ``text[i]``."""
        esc = self._esc
        assert esc is not None
        c = text[i]
        if len(esc) == 1:
            if c == "u":
                self._esc = "\\u"
                return i + 1
            self._esc = None
            if c == "'":  # JavaScript's escape of a single quote
                if self._quote == '"':
                    self.counts["json_escape"] += 1
                sink.append("'")
            elif c in _ESCAPES:
                sink.append("\\" + c)
            else:
                # ``\*`` and the like: the backslash stays a character
                self.counts["json_escape"] += 1
                sink.append("\\\\")
                return i  # the character itself is read as text
            return i + 1
        if c in _HEX:
            esc += c
            if len(esc) == 6:
                self._esc = None
                sink.append(esc)
            else:
                self._esc = esc
            return i + 1
        # ``\u`` without four hex digits: the backslash stays a character
        self.counts["json_escape"] += 1
        self._esc = None
        sink.append("\\\\" + esc[1:])
        return i

    def _in_comment(self, text: str, i: int) -> int:
        state = self._comment
        if state == "/":
            c = text[i]
            if c == "/":
                self._comment = "//"
            elif c == "*":
                self._comment = "/*"
            else:
                self._comment = ""
                self._fail("a '/' outside a string")
                return i
            self.counts["json_comment"] += 1
            return i + 1
        if state == "//":
            j = text.find("\n", i)
            if j < 0:
                return len(text)
            self._comment = ""
            return j  # the newline is read as a blank
        # a block comment; "/**": a "*" was the last character
        if state == "/**" and text[i] == "/":
            self._comment = ""
            return i + 1
        j = text.find("*/", i)
        if j >= 0:
            self._comment = ""
            return j + 2
        self._comment = "/**" if text.endswith("*") else "/*"
        return len(text)
