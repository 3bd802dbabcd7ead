"""Markdown fences: ```` ```json ````, ```` ```xml ````, ```` ```tool_code ````
(and a bare ```` ``` ````) around any other shape. The fence goes with the
call: content keeps neither the fence nor the call.

Fences in other languages (```` ```python ````, ```` ```html ````…) are code
the user asked for: they are *opaque* — released as they arrive and not
searched for calls at all, so ``lookup_order("A-1")`` in a Python example
stays text. A fence in a call language whose body cannot start a call (a
JSON object whose first key is not a call key, say) becomes opaque too, as
soon as that is clear. Gemma's ```` ```tool_code ```` may wrap the call in
``print(…)``; that is unwrapped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..spec import ToolSpec
from .bare_json import HEAD_MAX, head_decision, names_an_offered_tool
from .base import ABORT, OPAQUE, EndFinder, Format, RawCall
from .code_call import code_call
from .scan import UntilMarker

FENCE = "```"
#: Info strings of fences that may hold a call.
CALL_LANGS = frozenset(
    {"", "json", "xml", "tool_code", "tool_call", "tool_calls", "tool", "function_call", "jsonc"}
)
#: Longest info line read (```` ```tool_code ```` and friends are short).
INFO_MAX = 40

_INFO = re.compile(r"[\w+.#-]*")
_REGION = re.compile(r"\A```([^\n`]*)\n(.*?)(?:```\s*)?\Z", re.S)
#: ```` ```json{…}``` ````: the object glued to the info word, no newline
#: (DeepSeek V3 writes it so); only JSON languages, whose body starts at
#: the brace.
GLUED_LANGS = frozenset({"json", "jsonc"})
_GLUED = re.compile(
    r"\A```(" + "|".join(sorted(GLUED_LANGS)) + r")(?=[{\[])(.*?)(?:```\s*)?\Z", re.S | re.I
)
_PRINT = re.compile(r"\A\s*print\((.*)\)\s*\Z", re.S)


class FenceFinder:
    """Header (info line) -> peek at the body -> closing fence."""

    __slots__ = ("_head", "_lang", "_peek", "_until")

    def __init__(self) -> None:
        self._head = ""
        self._lang: str | None = None
        self._peek: str | None = None  # body head while deciding
        self._until: UntilMarker | None = None

    def feed(self, text: str) -> int | None:
        i = 0
        if self._lang is None:
            nl = text.find("\n")
            head = self._head + (text if nl < 0 else text[:nl])
            glued = _glued_body_at(head)
            if glued is not None:
                self._lang = head[len(FENCE) : glued].lower()
                self._peek = ""
                i = glued - len(self._head)
                self._head = ""
            elif len(head) > len(FENCE) + INFO_MAX or "`" in head[len(FENCE) :]:
                return ABORT
            elif nl < 0:
                self._head = head
                return None
            else:
                info = head[len(FENCE) :].strip()
                m = _INFO.match(info)
                assert m is not None
                lang = m.group().lower()
                if lang not in CALL_LANGS or info[m.end() :].strip():
                    return OPAQUE
                self._lang = lang
                self._peek = ""
                i = nl + 1
        if self._peek is not None:
            peek = self._peek + text[i:]
            decided = self._decide(peek)
            if decided is None:
                self._peek = peek
                return None
            if not decided:
                return OPAQUE
            self._peek = None
            self._until = UntilMarker(FENCE)
            # The whole body so far goes to the closing-fence search.
            end = self._until.feed(peek)
            if end is None:
                return None
            before = len(peek) - (len(text) - i)  # body seen in earlier pieces
            return i + end - before if end > before else 0
        assert self._until is not None
        return self._until.feed(text)

    def _decide(self, body: str) -> bool | None:
        s = body.lstrip()
        if not s:
            return None
        c = s[0]
        if c in "{[":
            ok = head_decision(s)
            if ok is None and len(s) > HEAD_MAX:
                return False
            return ok
        if c == "<":
            return True
        if c == "`":
            return False  # an empty block
        if self._lang in ("json", "jsonc", "xml"):
            return False
        # A name, then "(" (a code call, print(...)), ":" (call:…) or "["
        # (functools[…]); anything else is code or prose: opaque at once.
        m = _LEAD_NAME.match(s)
        if m is None:
            return False
        if m.end() == len(s):
            return None if m.end() < INFO_MAX else False
        return s[m.end()] in "(:["


_LEAD_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _glued_body_at(head: str) -> int | None:
    """Where the body starts in a ```` ```json{ ```` head, or None."""
    m = _INFO.match(head, len(FENCE))
    assert m is not None
    if m.end() < len(head) and head[m.end()] in "{[" and m.group().lower() in GLUED_LANGS:
        return m.end()
    return None


class Fenced(Format):
    name = "fenced"
    markers = (FENCE,)
    wrapped = False
    priority = 90

    def end_finder(self, marker: str) -> EndFinder:
        return FenceFinder()

    def opaque_finder(self, marker: str) -> EndFinder:
        return UntilMarker(FENCE, skip=len(FENCE))

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return names_an_offered_tool(region, tools)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        m = _GLUED.match(region) or _REGION.match(region)
        if not m:
            return None
        lang = m.group(1).strip().lower()
        body = m.group(2).strip()
        if lang not in CALL_LANGS or not body:
            return None
        return inner_calls(body, tools)


def inner_calls(body: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    """The calls in a fence's body, in any other registered shape."""
    from .registry import all_formats

    for fmt in all_formats():
        if fmt.name == Fenced.name:
            continue
        starts = (*fmt.markers, *fmt.leading, *fmt.tool_markers(tools))
        if starts and body.startswith(starts):
            got = fmt.parse(body, tools)
            if got:
                return got
    # tool_code: one call per line, possibly print(...)-wrapped.
    calls: list[RawCall] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        p = _PRINT.match(line)
        call = code_call(p.group(1) if p else line, tools)
        if call is None:
            return None
        calls.append(call)
    return calls or None


FORMATS: list[Format] = [Fenced()]
