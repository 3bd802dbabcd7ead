"""Residue stripper: the backstop that keeps raw call syntax from users.

Runs last, after the tool-tag detector (parse before stripping: the
detector has already lifted every call it could), and only when the
request offered tools: a reply to a request without tools is never
rewritten. It removes from ``content`` only what is unmistakably markup:

- **special tokens**, leaked by a server that does not skip them: any
  ``<|…|>`` token, or one barred so by another character a family
  declares (``Residue.bars``), up to ``MAX_TOKEN`` characters, no spaces
  (a turn header with the role line after it),
  ``<name|>``, and the tokens the families declare
  in ``formats/`` (``RESIDUE``: bracketed control tokens such as
  ``[NAME]``, bare words such as ``<name>``, other whole
  tokens);
- **unmatched wrapper tags** (the families' ``Residue.wrappers``): a
  closing ``</tool_call>``, ``</function>``… with no opening tag before it
  in the reply, and an opening one with nothing but whitespace after it at
  the end of the reply. That is all it
  takes of a region that never became a call: the marker itself at most,
  never the text after it. An opening tag followed by text ("models wrap
  each call in <tool_call> tags, and …") is a mention and stays, with its
  text (the detector released it: ``detect.py``, "A mention is not a
  call");
- **empty fences** left behind by a lifted call: a ```` ``` ```` /
  ```` ```json ```` fence with only whitespace inside. Its close is as
  long as its opening, at most: the rest of a longer run (the next
  block's opening glued to it) is text, and is looked at again.

In the reasoning it removes only the tokens a family declares debris
there too (``Residue.in_reasoning``: Cohere's ``<co>``/``</co: 0:[1]>``),
holding a tail that may still grow into one.

Never ordinary prose or code: nothing inside a fenced code block or inline
code is touched (``codespans``), a token right after a backtick is kept,
and a tag that is not a known wrapper (``<div>``) is just text.

Incremental and split-invariant: ``<|im_`` + ``end|>`` is still stripped.
Only a bounded suffix that could still become a pattern is held back
(``MAX_TOKEN``), plus, while undecided, an opening fence or wrapper tag
followed by whitespace (``MAX_PENDING``); all of it is resolved at close.
Plain text with no ``<``, ``[`` or backtick passes as the same object.

Every strip is counted as ``stripped.<kind>`` (``special_token``,
``wrapper_tag``, ``empty_fence``); a stripped token the detector had
counted as unrecognised markup is taken off that count (``Report.handled``):
the reply's report says each token was handled once, one way. ``saw_output`` (any non-blank text or
call) lets the chain report a reply left empty as "empty after repair".
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from ..context import Context
from ..delta import Delta, take_each
from ..formats.base import Residue
from ..formats.registry import all_reasoning, all_residue, on_change
from .codespans import CodeSpans

#: Longest special token body (``<|reserved_special_token_250|>`` is 27).
MAX_TOKEN: Final = 64
#: Longest undecided region held: an opening fence and its info string,
#: or an opening wrapper tag, followed by whitespace. Past it, the region is
#: treated as the start of real content and released.
MAX_PENDING: Final = 256

#: What the families declare as leftover markup (``formats.base.Residue``:
#: wrapper tags, bracketed control tokens, bare-word tokens, other tokens).
_FAMILIES = all_residue()
WRAPPERS = frozenset(_FAMILIES.wrappers)
BRACKET_TOKENS = frozenset(_FAMILIES.brackets)
NAMED_TOKENS = frozenset(_FAMILIES.words)

#: Plain-text pieces batched before their line/last-character state is
#: updated (bounded memory; see ``ResidueStripper._settle``).
MAX_UNSETTLED: Final = 64

_T = str(MAX_TOKEN)


def _barred(families: Residue, body: str, close: str) -> str:
    """``<BAR body BAR>`` for each bar (``close``: what may follow the body)."""
    alts = []
    for b in families.barring():
        e = re.escape(b)
        alts.append(e + r"[^\s" + e + r"<>]{" + body + "}" + e + close)
    return "|".join(alts)


def _cand(families: Residue) -> re.Pattern[str]:
    return re.compile(
        "<(?:" + _barred(families, "1," + _T, ">") + ")"
        r"|\[(/?[A-Z_]{2,24})\]"
        r"|<(/?)([A-Za-z_:]{1,24})(?:=[^<>\n]{1,"
        + _T
        + r"}|\|)?>"
        + (f"|(?P<token>{'|'.join(families.tokens)})" if families.tokens else "")
        + r"|`{3,}"
        # An opening ``<NAME=`` whose value a ``<`` breaks (``<function=<<not
        # xml>>``, a region given back): an opener all the same, so the
        # ``</NAME>`` after it is matched, not stripped. Only once the ``<``
        # is in: before, the tag may still close (held, ``_partial``).
        + r"|<(?P<loose>[A-Za-z_:]{1,24})=(?=[^<>\n]{0,"
        + _T
        + r"}<)"
    )


def _partial(families: Residue) -> re.Pattern[str]:
    """A suffix that could still grow into a candidate (held back)."""
    return re.compile(
        "<(?:"
        + _barred(families, "0," + _T, "?")
        + r"|/?[A-Za-z_:]{0,24}(?:=[^<>\n]{0,"
        + _T
        + r"}|\|)?"
        r")?\Z"
        r"|\[/?[A-Z_]{0,24}\Z"
        r"|`{1,2}\Z" + "".join("|" + t for t in families.partials)
    )


_CAND = _cand(_FAMILIES)
_PARTIAL = _partial(_FAMILIES)
#: Tokens that are debris in the reasoning too (``Residue.in_reasoning``),
#: and the ends of a reasoning text that may still grow into one.
_IN_REASONING = re.compile("|".join(_FAMILIES.in_reasoning)) if _FAMILIES.in_reasoning else None
_IN_REASONING_PARTIAL = (
    re.compile("|".join(_FAMILIES.in_reasoning_partials))
    if _FAMILIES.in_reasoning_partials
    else None
)
BARS = _FAMILIES.barring()
#: Turn headers the families declare (``Residue.headers``): stripped with
#: the role line after them, as a stray "assistant" would show users.
HEADERS = frozenset(_FAMILIES.headers)
_ROLES = ("system", "user", "assistant", "tool", "developer")
_ROLE = re.compile("(?:" + "|".join(_ROLES) + ")\n")
_ROLE_MAX = max(len(r) for r in _ROLES) + 1
_ROLE_PREFIXES = frozenset(r[:k] for r in (x + "\n" for x in _ROLES) for k in range(len(r)))
_TRIGGER = re.compile(r"[<\[`]")


@lru_cache(maxsize=1)
def _channel_ends() -> dict[str, tuple[str, ...]]:
    """The families' channel end markup (``formats.base.Reasoning.ends``,
    e.g. ``<|close|>response<|sep|>``) by its first token: stripped
    whole, as a turn header's role line is."""
    ends: dict[str, list[str]] = {}
    for r in all_reasoning():
        for e in r.ends:
            m = _CAND.match(e)
            if m is not None:
                ends.setdefault(m.group(), []).append(e)
    return {k: tuple(sorted(v, key=len, reverse=True)) for k, v in ends.items()}


_NON_WS = re.compile(r"\S")


class ResidueStripper:
    """Strips leftover markup from content (see module doc)."""

    __slots__ = (
        "_code",
        "_held",
        "_in_fence",
        "_last",
        "_line_head",
        "_opened",
        "_rheld",
        "_saw_output",
        "_saw_text",
        "_trim",
        "_trim_from",
        "_unsettled",
        "ctx",
    )

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._held = ""  # text not yet released; starts at an undecided spot
        self._rheld = ""  # reasoning not yet released (``Residue.in_reasoning``)
        self._in_fence = False  # inside a fenced code block
        self._code = CodeSpans()  # inline code (and blocks) in what went out
        self._line_head = True  # only blanks since the last newline
        self._last = ""  # the last character released
        self._opened: dict[str, int] = {}  # wrapper tags opened and kept
        self._saw_output = False
        #: A non-blank character reached the client (calls aside: the
        #: blanks after a call the reply starts with are layout too).
        self._saw_text = False
        #: Markup stripped with nothing visible before it: the blanks after
        #: it are layout, dropped until the text (``_trim_from``: from which
        #: piece of the scan's output on).
        self._trim = False
        self._trim_from = 0
        #: Text released on the plain-text lane and not yet taken into
        #: ``_line_head``/``_last``/``_saw_output`` (done when next needed,
        #: or every ``MAX_UNSETTLED`` pieces, so the lane stays cheap).
        self._unsettled: list[str] = []

    @property
    def saw_output(self) -> bool:
        """A non-blank character or a call reached the client."""
        self._settle()
        return self._saw_output

    def _settle(self) -> None:
        if self._unsettled:
            text = "".join(self._unsettled)
            self._unsettled.clear()
            self._released(text)

    def feed_text(self, text: str) -> bool:
        """The plain-text lane (``delta.TextLane``): True, with the text
        taken in, when it cannot concern us (nothing held, no ``<``, ``[``
        or backtick); else False, having changed nothing."""
        if self._held or self._trim or "<" in text or "[" in text or "`" in text:
            return False  # (``_TRIGGER``, spelled out: cheaper per chunk)
        pending = self._unsettled
        pending.append(text)
        if len(pending) >= MAX_UNSETTLED:
            self._settle()
        return True

    def feed_texts(self, texts: list[str], joined: str) -> int:
        """A run of texts for the lane: taken as one piece (``_settle``
        joins the pieces anyway), or one by one if any concerns us."""
        return len(texts) if self.feed_text(joined) else take_each(self.feed_text, texts)

    def feed_reasoning(self, text: str) -> bool:
        """The reasoning lane (``delta.TextLane``): a reasoning-only delta
        concerns the stripper only when it holds text (``_run`` may then
        release it), or may hold a token that is debris there too
        (``Residue.in_reasoning``: only with a ``<``)."""
        return not (self._held or self._rheld or (_IN_REASONING is not None and "<" in text))

    def feed_reasonings(self, texts: list[str], joined: str) -> int:
        return len(texts) if self.feed_reasoning(joined) else take_each(self.feed_reasoning, texts)

    def feed(self, d: Delta) -> None:
        self._run(d, False)

    def close(self, d: Delta) -> None:
        self._run(d, True)

    def _run(self, d: Delta, final: bool) -> None:
        self._settle()
        if _IN_REASONING is not None and (self._rheld or d.reasoning):
            d.reasoning = self._reasoning(d.reasoning, final)
        c = d.content
        if not self._held and not self._trim and (not c or _TRIGGER.search(c) is None):
            if c:
                self._released(c)
        else:
            out = self._scan(self._held + (c or ""), final)
            if self._trim:
                out = self._trimmed(out)
            self._released(out)
            if out or c is not None:
                d.content = out
        if d.calls:
            self._saw_output = True

    def _trimmed(self, out: str) -> str:
        """``out`` without the blanks that follow markup the content starts
        with (``_trim``); the first text ends the trimming."""
        head, tail = out[: self._trim_from], out[self._trim_from :].lstrip()
        self._trim_from = 0
        if tail:
            self._trim = False
        return head + tail

    def _reasoning(self, text: str | None, final: bool) -> str | None:
        """The reasoning text without the tokens that are debris there too;
        a tail that may still become one is held (to the end, at most)."""
        assert _IN_REASONING is not None and _IN_REASONING_PARTIAL is not None
        s = self._rheld + (text or "")
        self._rheld = ""
        if not final:
            m = _IN_REASONING_PARTIAL.search(s, max(0, len(s) - MAX_TOKEN - 8))
            if m is not None and m.start() < len(s):
                self._rheld, s = s[m.start() :], s[: m.start()]
        out, n = _IN_REASONING.subn("", s)
        if n:
            self.ctx.report.count("stripped.special_token", n)
        return out if (out or text is not None) else None

    def _released(self, text: str) -> None:
        if not text:
            return
        self._code.note(text)
        if not self._saw_text and not text.isspace():
            self._saw_output = self._saw_text = True
        nl = text.rfind("\n")
        if nl >= 0:
            self._line_head = nl == len(text) - 1 or not text[nl + 1 :].strip(" \t")
        elif self._line_head:
            self._line_head = not text.strip(" \t")
        self._last = text[-1]

    def _count(self, kind: str) -> None:
        self.ctx.report.count("stripped." + kind)

    def _scan(self, text: str, final: bool) -> str:
        out: list[str] = []
        pos = 0  # text[:pos] is decided (released or stripped)
        seen = 0  # text[:seen] has been looked at: never held again
        self._held = ""
        start = 0  # where the next candidate is searched from
        # Code spans in what goes out, up to ``text[noted]``: stripped
        # markup is skipped (its backticks are not the user's).
        code = CodeSpans()
        code.inside, code.tick_end = self._code.inside, self._code.tick_end
        noted = 0
        while (m := _CAND.search(text, start)) is not None:
            start = m.end()
            i = m.start()
            if i < pos:
                continue  # inside a region already decided
            noted = max(noted, pos)
            if noted < i:
                code.note(text[noted:i])
                noted = i
            seen = m.end()
            g = m.group()
            if g[0] == "`":
                if not self._fence_at_line_head(out, text[pos:i]):
                    continue
                if self._in_fence:
                    self._in_fence = False
                    continue
                verdict = self._opening_fence(text, m.end(), len(g), final)
                if verdict is None:  # undecided: hold from the fence
                    out.append(text[pos:i])
                    self._held = text[i:]
                    return "".join(out)
                if verdict < 0:  # a real code block
                    self._in_fence = True
                    continue
                # Its indentation stays: it may have gone out already.
                out.append(text[pos:i])
                pos = start = verdict  # the rest of a longer run is looked at
                self._count("empty_fence")
                continue
            if (
                self._in_fence
                or (text[i - 1] if i > pos else self._last_out(out)) == "`"
                or code.inside
            ):
                continue
            kind = self._kind(m)
            if kind is None:
                continue
            if kind == "loose":
                name = m.group("loose")
                self._opened[name] = self._opened.get(name, 0) + 1
                continue
            if kind == "open":
                after = _NON_WS.search(text, m.end())
                if after is not None or len(text) - i > MAX_PENDING:
                    name = m.group(3)
                    self._opened[name] = self._opened.get(name, 0) + 1
                    continue
                out.append(text[pos:i])
                if final:  # an opening tag with nothing after it: debris
                    self._count("special_token" if m.group(3) == "s" else "wrapper_tag")
                    self.ctx.report.handled(m.group())
                    out.append(text[m.end() :])
                    return "".join(out)
                self._held = text[i:]
                return "".join(out)
            if kind == "close":
                name = m.group(3)
                n = self._opened.get(name, 0)
                if n:
                    self._opened[name] = n - 1
                    continue
                kind = "special_token" if name == "s" else "wrapper_tag"
            end = m.end()
            tails = _channel_ends().get(m.group())
            if tails:
                whole = next((e for e in tails if text.startswith(e, i)), None)
                if whole is not None:
                    end = i + len(whole)
                    kind = "channel_markup"
                elif not final and any(e.startswith(text[i:]) for e in tails):
                    out.append(text[pos:i])  # undecided: hold from the token
                    self._held = text[i:]
                    return "".join(out)
            if m.group() in HEADERS:
                # ChatML's turn header: the role line after it is debris too.
                rest = text[end : end + _ROLE_MAX]
                role = _ROLE.match(rest)
                if role is not None:
                    end += role.end()
                elif not final and rest in _ROLE_PREFIXES:
                    out.append(text[pos:i])  # undecided: hold from the token
                    self._held = text[i:]
                    return "".join(out)
            out.append(text[pos:i])
            pos = end
            if not self._saw_text and not self._trim:
                sofar = "".join(out)
                if _NON_WS.search(sofar) is None:
                    self._trim, self._trim_from = True, len(sofar)
            self._count(kind)
            self.ctx.report.handled(m.group())  # stripped: not unrecognised
        if not final:
            hold = self._partial_start(text, max(pos, seen))
            if hold < len(text):
                self._held = text[hold:]
                text = text[:hold]
        out.append(text[pos:])
        return "".join(out)

    def _last_out(self, out: list[str]) -> str:
        """The last character that goes out before the text being decided:
        stripped markup is not "a backtick before a token" (a fence stripped
        in the same piece as the token, as in a piece before it)."""
        for piece in reversed(out):
            if piece:
                return piece[-1]
        return self._last

    @staticmethod
    def _kind(m: re.Match[str]) -> str | None:
        """What a candidate match is: ``special_token``, ``open``,
        ``loose`` (an opener its value breaks), ``close``, or None
        (ordinary text)."""
        g = m.group()
        if m.group("loose"):
            return "loose" if m.group("loose") in WRAPPERS else None
        if g[1] in BARS or g.endswith("|>") or m.group("token"):
            # <|token|>, a token barred so by a family's bar, <tool_call|>,
            # a token a family declares
            return "special_token"
        if g[0] == "[":
            return "special_token" if m.group(1) in BRACKET_TOKENS else None
        name = m.group(3)
        if name in NAMED_TOKENS and not m.group(2) and "=" not in g:
            return "special_token"
        if name not in WRAPPERS:
            return None
        if m.group(2):
            return "close" if "=" not in g else None
        return "open"

    def _fence_at_line_head(self, out: list[str], before: str) -> bool:
        """Whether a fence starts its line in what goes out: ``out`` (this
        scan's output so far) then ``before`` (the text kept up to the
        fence). Stripped markup does not count: ``<|tool_result|>`` then a
        fence opens a code block, as it does when the token arrives in a
        chunk of its own (the result must not depend on the split)."""
        for piece in (before, *reversed(out)):
            nl = piece.rfind("\n")
            if piece[nl + 1 :].strip(" \t"):
                return False
            if nl >= 0:
                return True
        return self._line_head

    def _opening_fence(self, text: str, end: int, opener: int, final: bool) -> int | None:
        """After an opening fence of ``opener`` backticks ending at ``end``:
        -1 for a real code block, the end of an empty fence to strip, or
        None (undecided)."""
        nl = text.find("\n", end)
        if nl < 0 or nl - end > MAX_TOKEN:
            # An info line longer than MAX_TOKEN: code, whether its end is
            # in sight yet or not (the same at any split).
            if nl >= 0 or final or len(text) - end > MAX_TOKEN:
                return -1
            return None
        k = _NON_WS.search(text, nl + 1)
        if k is None:
            if final:  # an opener with nothing after it
                return len(text)
            return None if len(text) - end <= MAX_PENDING else -1
        j = k.start()
        if text.startswith("```", j):
            # The closing fence is as long as the opening one, at most: a
            # longer run's rest is text (``````` ``````python ```````: this
            # fence's close glued to the next one's opening). Undecided
            # while the run may still go on.
            close = j + 3
            stop = j + max(3, opener)
            while close < stop and close < len(text) and text[close] == "`":
                close += 1
            if close == len(text) < stop and not final:
                return None if len(text) - end <= MAX_PENDING else close
            return close
        if text[j] == "`" and not final and len(text) - j < 3:
            return None
        return -1

    @staticmethod
    def _partial_start(text: str, pos: int) -> int:
        """Where a held-back suffix starts (``len(text)`` when none)."""
        lo = max(pos, len(text) - MAX_TOKEN - 4)
        best = len(text)
        for ch in "<[`":
            i = text.rfind(ch, lo)
            if i >= 0 and i < best and _PARTIAL.match(text, i) is not None:
                best = i
        if best < len(text) and text[best] == "`":
            while best > pos and text[best - 1] == "`":
                best -= 1
        return best


def _families_changed() -> None:
    """A format plugin was registered or taken back (``registry.on_change``):
    the tables above are made again from the families' declarations."""
    global _FAMILIES, WRAPPERS, BRACKET_TOKENS, NAMED_TOKENS, HEADERS, _CAND, _PARTIAL, BARS
    _FAMILIES = all_residue()
    WRAPPERS = frozenset(_FAMILIES.wrappers)
    BRACKET_TOKENS = frozenset(_FAMILIES.brackets)
    NAMED_TOKENS = frozenset(_FAMILIES.words)
    HEADERS = frozenset(_FAMILIES.headers)
    _CAND = _cand(_FAMILIES)
    _PARTIAL = _partial(_FAMILIES)
    BARS = _FAMILIES.barring()
    _channel_ends.cache_clear()


on_change(_families_changed)
