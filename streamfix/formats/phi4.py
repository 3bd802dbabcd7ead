"""Microsoft Phi-4-mini calls: ``functools[{"name": "f", "arguments": {…}}, …]``.

The marker is the text ``functools`` glued to a JSON list; no closing
token, so the region ends where the list closes (vLLM
``tool_parsers/phi4mini_tool_parser.py`` matches ``functools\\[(.*?)\\]``;
llama.cpp parses the same prefix). ``functools[`` does not occur in Python
(the module is not subscriptable), so it is an unmistakable marker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Steps, loads
from .base import EndFinder, Format, RawCall, calls_from_value

MARKER = "functools["


class Phi4(Format):
    name: ClassVar[str] = "phi4"
    markers: ClassVar[tuple[str, ...]] = (MARKER,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        # The marker's own "[" opens the list.
        return Steps(len(marker) - 1, Json("["))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(MARKER):
            return None
        value = loads(region[len(MARKER) - 1 :])
        return calls_from_value(value) if isinstance(value, list) and value else None


FORMATS: list[Format] = [Phi4()]
