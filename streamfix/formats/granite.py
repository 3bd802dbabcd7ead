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
from .base import EndFinder, Format, RawCall, Reasoning, calls_from_value

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


# Granite 3.2 with thinking on writes its reasoning as two prose sections,
# "Here is my thought process:" then "Here is my response:" (vLLM
# ``reasoning/granite_reasoning_parser.py``). Other replies may begin with
# these words: they count only for a Granite model, or a request that turns
# thinking on.
_THOUGHT = ("Here is my thought process:", "Here's my thought process:")
REASONING: list[Reasoning] = [
    Reasoning(
        "granite",
        opens=_THOUGHT,
        closes=("Here is my response:", "Here's my response:"),
        leading=_THOUGHT,
        models=(r"granite",),
    )
]
