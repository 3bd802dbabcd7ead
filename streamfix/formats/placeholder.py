"""A template placeholder as the whole reply: ``{{ refresh_cache }}`` ->
``refresh_cache({})``. Only at the start of the reply, only for an offered
name: ``{{ user.name }}`` (Jinja, Mustache) is text, and the end finder
gives up at the first character a placeholder cannot hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..spec import ToolSpec
from .base import ABORT, EndFinder, Format, RawCall

#: Longest placeholder read (``{{ name }}`` with generous blanks).
MAX_CHARS = 128

_SO_FAR = re.compile(r"\{\{[\s\w.:-]*\}?\Z")
_WHOLE = re.compile(r"\A\{\{\s*([A-Za-z_][\w.:-]*)\s*\}\}\Z")


class PlaceholderFinder:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = ""

    def feed(self, text: str) -> int | None:
        start = len(self._buf)
        buf = self._buf + text
        end = buf.find("}}")
        if end >= 0:
            return end + 2 - start if _SO_FAR.match(buf[: end + 1]) else ABORT
        if len(buf) > MAX_CHARS or not _SO_FAR.match(buf):
            return ABORT
        self._buf = buf
        return None


class Placeholder(Format):
    name = "placeholder"
    leading = ("{{",)
    wrapped = False
    priority = 70

    def end_finder(self, marker: str) -> EndFinder:
        return PlaceholderFinder()

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return False

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        m = _WHOLE.match(region.strip())
        return None if m is None else [RawCall(m.group(1), None)]


FORMATS: list[Format] = [Placeholder()]
