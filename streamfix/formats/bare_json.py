"""Bare JSON calls: ``{"name": "lookup_order", "arguments": {…}}``, a list
of them, or the OpenAI shape written as text (``{"type": "function",
"function": {"name": …, "arguments": "<json>"}}``).

As the whole reply, or at the start of a line after some text ("Let me
look that up.\n{…}", as small models write it), and only ever a
candidate: JSON that is not call-shaped, names no offered tool or fails
the tool's schema is text, released verbatim. To keep genuine JSON
answers flowing, the end finder gives up as soon as the first key shows
the object is not a call (``{"error": …``), instead of holding the whole
object to its closing brace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..spec import ToolSpec
from .base import ABORT, ARG_KEYS, NAME_KEYS, EndFinder, Format, RawCall
from .hermes_tags import json_calls
from .scan import Balanced

#: First keys of a call object (any key order is accepted by the parser;
#: models put ``name``, ``arguments``, ``type`` or ``function`` first).
CALL_KEYS = frozenset({*NAME_KEYS, *ARG_KEYS, "type", "id", "index", "tool_calls"})

#: How much of a candidate's head is read before deciding it is a call
#: shape; past it the candidate is text.
HEAD_MAX = 256

_KEY = re.compile(r"""\s*(?:"([^"\\]{0,64})"|'([^'\\]{0,64})')\s*:""")
_IDENT_CALL = re.compile(r"[A-Za-z_][\w.]*\s*\(")
_IDENT_PART = re.compile(r"[A-Za-z_][\w.]*\s*\Z")


def head_decision(head: str) -> bool | None:
    """Is a leading ``{…``/``[…`` a call's start (True), not one (False),
    or too short to tell (None)?"""
    s = head.lstrip()
    if s.startswith("["):
        s = s[1:].lstrip()
        if not s:
            return None
        if s[0] == "{":
            return head_decision(s)
        if _IDENT_CALL.match(s):
            return True  # pythonic: [lookup_order(…
        if _IDENT_PART.match(s) and len(s) < HEAD_MAX:
            return None
        return False
    if not s.startswith("{"):
        return False
    rest = s[1:]
    if not rest.strip():
        return None
    m = _KEY.match(rest)
    if m:
        key = m.group(1) if m.group(1) is not None else m.group(2)
        return key in CALL_KEYS
    stripped = rest.lstrip()
    if stripped[0] in "\"'" and len(rest) < HEAD_MAX:
        return None  # the key's string goes on
    return False


class CallJsonFinder:
    """``Balanced``, after ``head_decision`` accepted the head."""

    __slots__ = ("_head", "_inner")

    def __init__(self) -> None:
        self._inner = Balanced()
        self._head: str | None = ""

    def feed(self, text: str) -> int | None:
        if self._head is not None:
            self._head += text
            ok = head_decision(self._head)
            if ok is False or (ok is None and len(self._head) > HEAD_MAX):
                return ABORT
            if ok:
                self._head = None
        return self._inner.feed(text)


def names_an_offered_tool(region: str, tools: Mapping[str, ToolSpec]) -> bool:
    """Whether an unfinished candidate quotes an offered tool's name (then
    a cut-off there was a call, not text)."""
    return any(f'"{n}"' in region or f"'{n}'" in region or f".{n}" in region for n in tools)


class BareJson(Format):
    name = "bare_json"
    markers = ("{", "[")
    leading = ("{", "[")
    line_start = True
    wrapped = False
    priority = 50

    def end_finder(self, marker: str) -> EndFinder:
        return CallJsonFinder()

    def closer_after(self, marker: str) -> str:
        """Llama 3 writes parallel calls as JSON objects joined by ``;``
        (``{…}; {…}``, as vLLM's Llama 3 JSON parser reads them): the
        ``;`` after a call goes, so the next object starts a call. After a
        list of calls, a second ``]`` is a bracket too many (``[{…}]]``)."""
        return "]" if marker == "[" else ";"

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return names_an_offered_tool(region, tools)

    def is_complete(self, region: str) -> bool:
        """A list whose ``]`` never came is not whole at a ``length`` cut:
        the next call may have been cut off before it began."""
        return _unclosed_list(region) is None

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        calls = json_calls(region, siblings=False)
        if calls is None:
            closed = _unclosed_list(region)
            if closed is not None:
                # The reply ended after a whole call, without the list's
                # ``]`` (``[{…}`` then the end): the calls are whole.
                calls = json_calls(closed, siblings=False)
        return calls


def _unclosed_list(region: str) -> str | None:
    """``region`` closed with ``]`` when it is a list that ends after a
    whole element (``[{…}``, ``[{…}, {…}``) but was never closed; else None.
    Only the end of the stream leaves a region so."""
    s = region.strip()
    if not (s.startswith("[") and s.endswith("}")) or Balanced().feed(s) is not None:
        return None
    return s + "]"


FORMATS: list[Format] = [BareJson()]
