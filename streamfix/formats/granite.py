"""IBM Granite 3.x calls: ``<|tool_call|>[{"name": "f", "arguments": {…}}, …]``.

The list follows the token with no closing token, so the region ends where
the JSON closes (vLLM ``tool_parsers/granite_tool_parser.py``, llama.cpp
``common/chat.cpp`` Granite handler). Granite 4 writes Hermes
``<tool_call>`` tags (core hermes_tags format); Granite 20B-FC's
``<function_call>`` is also a core wrapper tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Steps, loads
from .base import EndFinder, Format, RawCall, calls_from_value

MARKER = "<|tool_call|>"


class Granite(Format):
    name: ClassVar[str] = "granite"
    markers: ClassVar[tuple[str, ...]] = (MARKER,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("[{"))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(MARKER):
            return None
        value = loads(region[len(MARKER) :])
        return calls_from_value(value) if value is not None else None


FORMATS: list[Format] = [Granite()]
