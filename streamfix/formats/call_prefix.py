"""``call:NAME{…}`` and ``call:ns:NAME{…}``: a call prefix before a name and
a JSON (or Python-dict) object, as small models write after seeing Gemma's
``call:`` syntax. The marker ``call:`` is common in prose ("a quick call:
…"), so the end finder gives up at the first character that cannot belong
to ``call:NAME{``: only a name directly after the colon, then the object.
A call to a tool that was not offered, in this syntax, is markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..spec import ToolSpec
from .base import ABORT, EndFinder, Format, RawCall
from .scan import Balanced

#: Longest ``call:NAME`` head read before the ``{`` (namespaced names
#: included); longer is prose.
HEAD_MAX = 128

_HEAD_SO_FAR = re.compile(r"call:(?:[A-Za-z_][\w.:-]*\s*)?\Z")
_CALL = re.compile(r"\Acall:([A-Za-z_][\w.:-]*)\s*(\{.*\})\s*\Z", re.S)


class CallPrefixFinder:
    __slots__ = ("_head", "_inner")

    def __init__(self) -> None:
        self._head = ""
        self._inner: Balanced | None = None

    def feed(self, text: str) -> int | None:
        if self._inner is not None:
            return self._inner.feed(text)
        j = text.find("{")
        head = self._head + (text if j < 0 else text[:j])
        if not _HEAD_SO_FAR.match(head) or len(head) > HEAD_MAX:
            return ABORT
        if j < 0:
            self._head = head
            return None
        if head == "call:":
            return ABORT  # no name
        self._inner = Balanced()
        end = self._inner.feed(text[j:])
        return None if end is None else (ABORT if end == ABORT else j + end)


class CallPrefix(Format):
    name = "call_prefix"
    markers = ("call:",)
    wrapped = False
    unoffered_is_markup = True
    priority = 60

    def end_finder(self, marker: str) -> EndFinder:
        return CallPrefixFinder()

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return "{" in region

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        m = _CALL.match(region)
        return None if m is None else [RawCall(m.group(1), m.group(2))]


FORMATS: list[Format] = [CallPrefix()]
