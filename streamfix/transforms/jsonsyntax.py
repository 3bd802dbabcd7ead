"""Almost-JSON in, strict JSON out, one piece at a time (sans-I/O).

``JsonRewriter`` reads the JSON value a model wrote for ``response_format``
and writes it back as strict JSON, token by token: every token that is
already JSON leaves as the model's own characters (a valid reply comes out
byte for byte), and only a broken token is rewritten. What it repairs is
what has one reading:

- a trailing comma before ``}`` or ``]``, a leading one after ``[`` or
  ``{`` (dropped), a missing comma between two values on their own and a
  missing colon between a key and its value after a blank (inserted);
- single-quoted strings (``'it\\'s'`` -> ``"it's"``), curly quotes as
  delimiters (``“k”``), bare object keys (``{name: 1}``, ``{5: "x"}``);
- ``True`` / ``False`` / ``None`` and the literals in any case (``TRUE``,
  ``Null``); numbers spelled ``1_000``, ``.25``, ``1.``;
- Python tuples: ``(1, 2)`` and ``()`` are arrays, ``(1)`` inside a value
  is ``1`` (held until the first comma or the ``)`` says which);
- ``"a" + "b"`` (one string); ``//`` and ``/* */`` comments (dropped);
  Unicode blanks between tokens (NBSP, zero-width, BOM: dropped);
- a ``"`` inside a string: held until the next character that is not a
  blank says whether it ends the string (``_held_quote``): before what can
  follow a string there it does; before a letter, digit or punctuation it is
  a quote inside (``"[LINK]("https://e.com")"``), escaped;
- invalid escapes (``\\*``, ``\\_``, ``\\$``: the backslash is kept as a
  character, ``"\\\\*"``, so the value holds exactly what the model wrote)
  and control characters inside strings (escaped);
- a ``}``/``]`` of an outer container where an inner one is missing (the
  inner ones closed), if nothing but the end follows; a fence where a comma
  or a closer belongs (the value ends; ``close`` completes it);
- at ``close``: the open brackets closed, a trailing comma dropped.

Not repaired (``error`` says where it stopped): a bare word as a value
(``NaN``, ``undefined``, unquoted text); a ``"`` that could end the string
or sit inside it (``""x"``, ``"a,"b"``, ``["a" b", "c"]``, inner quotes and
then another string); ``(1)`` as the whole reply; C's escapes (``\\a``,
``\\x``, ``\\0``); a key with no value before ``}``; nesting past
``MAX_DEPTH``. At ``close`` of a reply that stopped (not ``cut``): a
string still open, a key with no value, a comment over closing brackets
(the syntax is completed, and it is an error: where it ended is a guess).
From the error on, nothing more is read; ``close`` still completes the
syntax of what was released.

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
#: Unicode blanks a model puts between tokens (no JSON blank): dropped.
_USPACE = frozenset("\xa0\u1680\u180e\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008")
_USPACE |= frozenset("\u2009\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff")
#: A string's opening quote -> its closing one (curly quotes as delimiters).
_CLOSING = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_PLAIN = {
    '"': re.compile(r'[^"\\\x00-\x1f]+'),
    "'": re.compile(r"""[^'"\\\x00-\x1f]+"""),
    "\u201d": re.compile('[^\u201d"\\\\\\x00-\\x1f]+'),
    "\u2019": re.compile('[^\u2019"\\\\\\x00-\\x1f]+'),
}
_WORD_RUN = re.compile(r"[A-Za-z0-9_$.+\-]+")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?\Z")
# digit separators, no digit before or after the point: 1_000, .25, 1.
_LOOSE_NUMBER = re.compile(r"-?(?:\d+(?:_\d+)*)?(?:\.(?:\d+(?:_\d+)*)?)?(?:[eE][-+]?\d+)?\Z")
_KEY_WORD = re.compile(r"[A-Za-z_$][\w$\-]*\Z")
_KEY_NUMBER = re.compile(r"-?\d+(?:\.\d+)?\Z")
_LITERALS = {"true": "true", "false": "false", "null": "null"}
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_ESCAPES = frozenset('"\\/bfnrtu')
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HEX = frozenset("0123456789abcdefABCDEF")
#: Escapes of C and Python with a meaning of their own (bell, NUL, hex …):
#: keeping the backslash as a character would be a guess.
_FOREIGN_ESCAPES = frozenset("av0ex")
#: In a comment the reply ends in: it swallowed brackets or members.
_COMMENT_CLOSERS = re.compile(r'[\]}"]')


def _complete_word(word: str) -> bool:
    return word in _LITERALS or word in _PY_LITERALS or _NUMBER.match(word) is not None


def _loose_number(word: str) -> str | None:
    """``word`` as a JSON number when only its spelling is off (digit
    separators, ``.25``, ``1.``), else None."""
    if not any(c.isdigit() for c in word) or _LOOSE_NUMBER.match(word) is None:
        return None
    s = word.replace("_", "")
    sign = "-" if s.startswith("-") else ""
    s = s[len(sign) :]
    if s.startswith("."):
        s = "0" + s
    s = re.sub(r"\.(?!\d)", ".0", s)
    s = sign + s
    return s if _NUMBER.match(s) is not None else None


def _in_string(text: str) -> str:
    """Blanks written into a string: control characters escaped."""
    return "".join(_CONTROL.get(c, c) for c in text)


class JsonRewriter:
    """One JSON value, fed in pieces (see the module docstring)."""

    __slots__ = (
        "_cclose",
        "_closers",
        "_comment",
        "_esc",
        "_expect",
        "_fenced",
        "_fresh",
        "_gbuf",
        "_inner",
        "_key",
        "_mismatch",
        "_pending",
        "_pidx",
        "_pkind",
        "_qhold",
        "_quote",
        "_scomma",
        "_slast",
        "_snl",
        "_undecided",
        "_word",
        "counts",
        "done",
        "error",
        "tail",
        "tokens",
    )

    def __init__(self) -> None:
        self._expect = _VALUE
        #: The open containers' closing brackets, innermost last (``)``: a tuple).
        self._closers: list[str] = []
        #: Held: a comma, the whitespace after it, a key and its colon.
        self._pending: list[str] = []
        self._quote = ""  # the open string's closing quote ("" outside a string)
        self._qhold = ""  # a '"' in a string and the blanks after it, not decided yet
        self._key = False  # the open string is a key (held in _pending)
        self._esc: str | None = None  # a backslash and what followed it, held
        self._word = ""  # a number or bare word being read, held
        self._comment = ""  # "", "/", "//", "/*", "/**"
        self._cclose = False  # the open comment holds a closer or a quote
        self._inner = 0  # quotes inside the open string so far
        self._slast = ""  # the open string's last character that is not a blank
        self._snl = False  # a raw new line since the last character that is not a blank
        self._scomma = False  # the string's last character is a comma
        self._fresh = False  # a container just opened: nothing in it yet
        self._fenced = False  # a fence came before the closing brackets
        self._mismatch = False  # a closer closed more than the innermost container
        #: Per open ``(``: "?" (tuple or a parenthesised value, undecided),
        #: "t" (a tuple: an array), "s" (one value); and its place in _gbuf.
        self._pkind: list[str] = []
        self._pidx: list[int] = []
        self._undecided = 0
        #: Output held while a ``(`` is undecided ("[" or "" at its place).
        self._gbuf: list[str] = []
        #: What was repaired, by kind (``json_comma``, ``json_quote`` …).
        self.counts: Counter[str] = Counter()
        self.done = False  # the top-level value is complete
        self.error: str | None = None  # where an unrepairable text stopped the read
        self.tail = ""  # text after the top-level value (at most MAX_TAIL)
        self.tokens = 0  # tokens read (a start that fails at its first is prose)

    @property
    def open(self) -> bool:
        """A value has started and is not complete."""
        return not self.done and (bool(self._closers) or bool(self._quote) or bool(self._word))

    def feed(self, text: str) -> str:
        """Take ``text``; return what can be released now."""
        if self.error is not None:
            return ""
        if self.done or self._fenced:
            return self._after(text, [])
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            if self.done or self._fenced:
                self._after(text[i:], out)
                break
            sink = self._gbuf if self._undecided else out
            if self._quote:
                i = self._string(text, i, sink)
            elif self._comment:
                i = self._in_comment(text, i)
            elif self._word:
                m = _WORD_RUN.match(text, i)
                if m is not None:
                    self._word += m.group()
                    i = m.end()
                    continue
                self._end_word(sink)
            else:
                i = self._token(text, i, sink)
            if not self._undecided and self._gbuf:
                out.extend(self._gbuf)
                self._gbuf.clear()
            if self.error is not None:
                break
        return "".join(out)

    def close(self, cut: bool = False) -> str:
        """The end of the reply: what completes the value (``cut``: the
        token limit ended it; the syntax is completed the same way, and
        counted as ``json_cut`` instead of ``json_closed``). A reply that
        stopped inside a string, a key or a comment is completed the same
        way and is an ``error``: where it ended is a guess."""
        out: list[str] = []
        sink = self._gbuf if self._undecided else out
        if self.error is None and self._qhold:
            self._end_string(sink)  # a '"' at the very end ends the string
        if self.error is None and self._word:
            word = self._word
            if cut and self._expect != _KEY and not _complete_word(word):
                self._word = ""  # a number or word the limit cut: not guessed
                self._pending.clear()
            else:
                self._end_word(sink)
        if self._comment in ("//", "/*", "/**") and self._cclose and not cut:
            self._fail("a comment runs to the end of the reply, over the closing brackets")
        self._comment = ""
        if self._undecided:
            for j, kind in enumerate(self._pkind):
                if kind == "?":
                    self._gbuf[self._pidx[j]] = "["
                    self._pkind[j] = "t"
            self._undecided = 0
        if self._gbuf:
            out.extend(self._gbuf)
            self._gbuf.clear()
        if self.done:
            return "".join(out)
        kind = "json_cut" if cut else "json_closed"
        if self._quote:
            if self._key:
                self._pending.clear()
            else:
                out.append('"')
            self._quote = ""
            self._qhold = ""
            self._esc = None
            self.counts[kind] += 1
            if not cut:
                self._fail("the reply stopped inside a string")
            if not self._key:
                self._expect = _AFTER
            self._key = False
        if self._pending:
            if not cut and any(p.strip(" \t\r\n,") for p in self._pending):
                self._fail("a key with no value at the end")
            self._pending.clear()
            self.counts["json_dropped"] += 1
        if self._closers:
            out.extend("]" if c == ")" else c for c in reversed(self._closers))
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
        if not self.tail and not self._fenced:
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
        if self.error is None:
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

    def _decide(self, kind: str) -> None:
        """The innermost ``(`` is a tuple (``t``) or one value (``s``)."""
        if self._pkind[-1] == "?":
            self.counts["json_tuple"] += 1
            self._gbuf[self._pidx[-1]] = "[" if kind == "t" else ""
            self._pkind[-1] = kind
            self._undecided -= 1

    def _after_comma(self) -> None:
        top = self._closers[-1]
        if top == ")":
            self._decide("t")
        self._expect = _KEY if top == "}" else _VALUE
        self._pending.append(",")

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
        if c in _USPACE:
            self.counts["json_space"] += 1
            return i + 1
        if c == "/":
            self._comment = "/"
            return i + 1
        if self._mismatch:
            self._fail("text after a closing bracket that closed more than one container")
            return i
        if c == "`" and self._closers and expect == _AFTER:
            # a closing fence before the closing brackets: the value ends here
            self._fenced = True
            self._add_tail(text[i:])
            return len(text)
        fresh, self._fresh = self._fresh, False
        if c == "," and fresh and expect in (_VALUE, _KEY):
            self.counts["json_comma"] += 1  # a leading comma: dropped
            self._fresh = True
            return i + 1
        if expect == _AFTER:
            if c == ",":
                self._after_comma()
                return i + 1
            if c in "}])":
                return self._close_bracket(c, i, out)
            if c in "\"'{[(\u201c\u2018" or c.isalnum() or c == "-":
                # a value where a comma belongs: two values, each on its own
                self.counts["json_comma"] += 1
                self._after_comma()
                return i
            self._fail(f"{c!r} after a value")
            return i
        if c in "}])":
            return self._close_bracket(c, i, out)
        if expect == _COLON:
            if c == ":":
                self._pending.append(":")
                self._expect = _VALUE
                return i + 1
            if (c in "\"'{[(-\u201c\u2018" or c.isalnum()) and self._pending[-1].isspace():
                # a value after the key and a blank: the key's colon is missing
                self.counts["json_colon"] += 1
                self._pending.insert(len(self._pending) - 1, ":")
                self._expect = _VALUE
                return i
            self._fail(f"{c!r} where a colon belongs")
            return i
        if expect == _KEY:
            if c in _CLOSING:
                self._open_string(c, key=True)
                return i + 1
            m = _WORD_RUN.match(text, i)
            if m is not None:
                self._word = m.group()
                return m.end()
            self._fail(f"{c!r} where a key belongs")
            return i
        # a value
        if c in "{[(":
            if len(self._closers) >= MAX_DEPTH:
                self._fail("nesting deeper than the limit")
                return i
            self.tokens += 1
            self._fresh = True
            if c == "(":
                # a Python tuple: an array, or one value in parentheses;
                # which is known at its first comma or its end
                self._emit(out, "")
                self._pidx.append(len(self._gbuf))
                self._gbuf.append("")
                self._pkind.append("?")
                self._undecided += 1
                self._closers.append(")")
                self._expect = _VALUE
                return i + 1
            self._emit(out, c)
            self._closers.append("}" if c == "{" else "]")
            self._expect = _KEY if c == "{" else _VALUE
            return i + 1
        if c in _CLOSING:
            self._open_string(c, key=False)
            self._emit(out, '"')
            return i + 1
        m = _WORD_RUN.match(text, i)
        if m is not None:
            self._word = m.group()
            return m.end()
        self._fail(f"{c!r} where a value belongs")
        return i

    def _close_bracket(self, c: str, i: int, out: list[str]) -> int:
        """``}``, ``]`` or ``)``: the innermost container closes (and a
        trailing comma before it is dropped); a ``}``/``]`` that belongs to
        an outer container closes the ones inside it too."""
        if not self._closers:
            self._fail(f"{c!r} with nothing open")
            return i
        if self._pending and self._pending[0] == ",":
            # a trailing comma: dropped, its blanks kept
            if any(p.lstrip(" \t\r\n") for p in self._pending[1:]):
                self._fail("a key with no value")
                return i
            self.counts["json_comma"] += 1
            out.extend(self._pending[1:])
            self._pending.clear()
        elif self._pending or self._expect == _COLON:
            self._fail("a key with no value")
            return i
        top = self._closers[-1]
        if c == top:
            if c == ")":
                if len(self._closers) == 1 and self._pkind[-1] == "?" and self._expect != _VALUE:
                    # ``(1)`` alone: Python's value, or a tuple missing its comma
                    self._fail("one value in parentheses as the whole reply")
                    return i
                self._decide("t" if self._expect == _VALUE else "s")
                out.append("]" if self._pkind.pop() == "t" else "")
                self._pidx.pop()
            else:
                out.append(c)
            self._closers.pop()
            self._value_done()
            return i + 1
        if (
            c != ")"
            and self._expect != _KEY
            and c in self._closers
            and ")" not in self._closers[self._closers.index(c) :]
        ):
            at = len(self._closers) - 1 - self._closers[::-1].index(c)
            out.extend(reversed(self._closers[at:]))
            del self._closers[at:]
            self.counts["json_bracket"] += 1
            self._mismatch = True
            self._value_done()
            return i + 1
        self._fail(f"{c!r} where {top!r} belongs")
        return i

    def _open_string(self, quote: str, key: bool) -> None:
        self.tokens += 1
        self._inner = 0
        self._slast = ""
        self._snl = False
        self._scomma = False
        self._quote = _CLOSING[quote]
        self._key = key
        if quote != '"':
            self.counts["json_quote"] += 1
        if key:
            self._pending.append('"')

    def _end_word(self, out: list[str]) -> None:
        """A number or bare word ended (a delimiter, or the reply)."""
        word, self._word = self._word, ""
        if self._expect == _KEY:
            if _KEY_WORD.match(word) is None and _KEY_NUMBER.match(word) is None:
                self._fail(f"{word[:40]!r} where a key belongs")
                return
            self.tokens += 1
            self.counts["json_key"] += 1
            self._pending.append(f'"{word}"')
            self._expect = _COLON
            return
        if word in _LITERALS or _NUMBER.match(word) is not None:
            self._emit(out, word)
        elif word in _PY_LITERALS:
            self.counts["json_literal"] += 1
            self._emit(out, _PY_LITERALS[word])
        elif word.lower() in _LITERALS:
            self.counts["json_literal"] += 1  # TRUE, False, Null
            self._emit(out, word.lower())
        else:
            number = _loose_number(word)
            if number is None:
                self._fail(f"{word[:40]!r} is not a JSON value")
                return
            self.counts["json_number"] += 1
            self._emit(out, number)
        self.tokens += 1
        self._value_done()

    def _end_string(self, sink: list[str]) -> None:
        """The open string ends (at its closing quote, or a held ``"``
        decided to be one); blanks held after a ``"`` are read as blanks."""
        held, self._qhold = self._qhold[1:], ""
        sink.append('"')
        self._quote = ""
        if self._key:
            self._key = False
            self._expect = _COLON
        else:
            self._value_done()
        if held:
            if self.done:
                self._after(held, sink)
            else:
                self._token(held, 0, sink)

    def _held_quote(self, text: str, i: int, sink: list[str]) -> int:
        """After a ``"`` inside a double-quoted string: whether it ends the
        string is decided by the next character that is not a blank. It
        ends it before what can follow a string there (a comma, a colon,
        the innermost container's closer, another quote after blanks, a
        comment, a fence, a new line); before ``+`` and a quote the two
        strings are one (``"a" + "b"``); before anything else (a letter, a
        digit, punctuation) it is a quote inside the string, escaped and
        counted ``json_inner_quote``."""
        held = self._qhold
        n = len(text)
        while i < n:
            c = text[i]
            if c in _WS:
                held += c
                i += 1
                continue
            if "+" in held:
                if c == '"':
                    self.counts["json_concat"] += 1
                    self._qhold = ""
                    return i + 1
                break  # the '+' was text of the string
            if c == "+" and not self._key:
                held += c
                i += 1
                continue
            blank = len(held) > 1
            top = self._closers[-1] if self._closers else ""
            follows = (
                (c in ",:" and bool(top)) or (c in "}])" and c == top) or c in "/`" or "\n" in held
            )
            # another value where a comma or a colon belongs
            missing = (
                c == '"'
                or (blank and c in "'\u201c\u2018{[(")
                or (blank and (c.isdigit() or c == "-" or (self._key and c.isalpha())))
            )
            self._qhold = held
            if follows or missing:
                if missing and self._inner:
                    self._fail("a quote that may end the string or be inside it")
                    return i
                self._end_string(sink)
                return i
            if not self._slast or self._snl or self._scomma or self._slast in "/\\":
                # ``""value"``, ``"a,"b"``: a string ended with its next one's
                # opening quote missing, as likely as a quote inside it
                self._fail("a quote that may end the string or be inside it")
                return i
            if blank and top and self._inner % 2 == 0:
                # ``["a" b", "c"]``: the next value's opening quote missing?
                self._fail("a quote that may end the string or be inside it")
                return i
            break
        else:
            self._qhold = held
            return i
        # a quote inside the string
        self._qhold = ""
        self._inner += 1
        self._slast = '"'
        self.counts["json_inner_quote"] += 1
        sink.append('\\"' + _in_string(held[1:]))
        return i

    def _string(self, text: str, i: int, out: list[str]) -> int:
        """Inside a string, from ``text[i]``: the string's text (a key's to
        ``_pending``) with its repairs; past its end when it closes."""
        sink = self._pending if self._key else out
        quote = self._quote
        n = len(text)
        while i < n:
            if self._qhold:
                i = self._held_quote(text, i, sink)
                if not self._quote or self.error is not None:
                    return i
                continue
            if self._esc is not None:
                i = self._escape(text, i, sink)
                continue
            m = _PLAIN[quote].match(text, i)
            if m is not None:
                got = m.group()
                sink.append(got)
                last = got.rstrip()
                if last:
                    self._slast = last[-1]
                    self._snl = False
                self._scomma = got[-1] == ","
                i = m.end()
                continue
            c = text[i]
            if c == quote:
                if quote == '"':
                    self._qhold = '"'
                    i += 1
                    continue
                self._end_string(sink)
                return i + 1
            if c == "\\":
                self._slast = c
                self._esc = "\\"
                i += 1
            elif c == '"':  # inside a single- or curly-quoted string
                self._slast = c
                sink.append('\\"')
                i += 1
            else:  # a control character
                self._snl = self._snl or c == "\n"
                self._scomma = False
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
            elif c in _FOREIGN_ESCAPES:
                self._fail(f"an escape JSON does not have: \\{c}")
                return i
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
            self._cclose = False
            return i + 1
        if state == "//":
            j = text.find("\n", i)
            if j < 0:
                self._cclose = self._cclose or _COMMENT_CLOSERS.search(text, i) is not None
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
        self._cclose = self._cclose or _COMMENT_CLOSERS.search(text, i) is not None
        return len(text)
