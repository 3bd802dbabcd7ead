"""A call shape for streamfix, as a plugin: ``<<CALL name {json}>>``.

A model fine-tuned in-house writes its tool calls as

    <<CALL get_weather {"city": "Paris"}>>

This module is laid out like streamfix's own format modules
(``streamfix/formats/*.py``): ``FORMATS`` (how a call starts, where it
ends, how it parses), ``REASONING`` (the family's reasoning markup,
``<<THINK>>…<</THINK>>``) and ``RESIDUE`` (markup that is debris wherever it
is left: a stray ``[END_CALLS]``). The package's ``streamfix.formats`` entry
point names it, so installing the package is enough; without installing,
``streamfix.formats.register(streamfix_myshape)`` or ``streamfix serve
--format streamfix_myshape``.

It imports only ``streamfix.formats``: the registry loads it before the
first request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from streamfix.formats import ABORT, Balanced, Format, RawCall, Reasoning, Residue

MARKER = "<<CALL "
#: The name and blanks before the object (longer: not this shape).
HEAD_MAX = 128

_HEAD = re.compile(r"\s*[A-Za-z_][\w.-]*\s*|\s*")
_CLOSE = re.compile(r"\s*(?:>>?)?")
_CALL = re.compile(r"<<CALL\s+([A-Za-z_][\w.-]*)\s*(\{.*\})\s*>>\Z", re.S)


class CallEnd:
    """Where ``<<CALL name {json}>>`` ends, fed piece by piece (each piece
    scanned once): the name, one balanced JSON object (a ``>>`` inside a
    string is data), then ``>>``."""

    __slots__ = ("_close", "_head", "_json", "_skip")

    def __init__(self) -> None:
        self._skip = len(MARKER)
        self._head = ""
        self._json: Balanced | None = None
        self._close: str | None = None  # text after the object, once it closed

    def feed(self, text: str) -> int | None:
        i = min(self._skip, len(text))
        self._skip -= i
        if self._close is None and self._json is None:
            j = text.find("{", i)
            self._head += text[i:] if j < 0 else text[i:j]
            if not _HEAD.fullmatch(self._head) or len(self._head) > HEAD_MAX:
                return ABORT
            if j < 0:
                return None
            if not self._head.strip():
                return ABORT  # no name
            self._json = Balanced(first="{")
            i = j
        if self._close is None:
            assert self._json is not None
            end = self._json.feed(text[i:])
            if end is None or end == ABORT:
                return end
            self._close = ""
            i += end
        for k in range(i, len(text)):
            self._close += text[k]
            if self._close.endswith(">>"):
                return k + 1
            if not _CLOSE.fullmatch(self._close):
                return ABORT
        return None


class MyShape(Format):
    name = "my_shape"
    markers = (MARKER,)
    wrapped = True  # unmistakable: a region that does not parse is markup

    def end_finder(self, marker: str) -> CallEnd:
        return CallEnd()

    def parse(self, region: str, tools: Mapping[str, Any]) -> list[RawCall] | None:
        m = _CALL.match(region)
        return None if m is None else [RawCall(m.group(1), m.group(2))]


FORMATS: list[Format] = [MyShape()]
REASONING = [Reasoning("my_shape", opens=("<<THINK>>",), closes=("<</THINK>>",))]
RESIDUE = [Residue(brackets=("END_CALLS",))]
