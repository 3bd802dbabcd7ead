"""Cohere Command R7B / Command A (and "North") action blocks:

``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {…}}, …]<|END_ACTION|>``

(llama.cpp ``common/chat.cpp`` Command R7B handler, vLLM
``tool_parsers/cohere_command_tool_parser.py``, SGLang
``cohere_command4_detector.py``). A single object instead of the list is
also seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import loads
from .base import EndFinder, Format, RawCall, calls_from_value
from .scan import UntilMarker

OPEN = "<|START_ACTION|>"
CLOSE = "<|END_ACTION|>"


def _without_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "tool_call_id"}
    return value


class Cohere(Format):
    name: ClassVar[str] = "cohere"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        value = loads(region[len(OPEN) :].strip().removesuffix(CLOSE))
        return calls_from_value(_without_ids(value)) if value is not None else None


FORMATS: list[Format] = [Cohere()]
