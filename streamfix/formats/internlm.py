"""InternLM2 / InternLM2.5 / Intern-S1 calls:

``<|action_start|><|plugin|>\\n{"name": "f", "parameters": {…}}<|action_end|>``

(vLLM ``tool_parsers/internlm2_tool_parser.py``, SGLang
``function_call/internlm_detector.py``, LMDeploy's InternLM2 template.)
``<|action_end|>`` may be cut as a stop token: the region also ends where
the JSON object closes, taking the token when it follows at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Opt, Steps, loads, strip_trailer
from .base import EndFinder, Format, RawCall, calls_from_value

MARKER = "<|action_start|><|plugin|>"
CLOSE = "<|action_end|>"


class InternLM(Format):
    name: ClassVar[str] = "internlm"
    markers: ClassVar[tuple[str, ...]] = (MARKER,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("{["), Opt(CLOSE))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(MARKER):
            return None
        value = loads(strip_trailer(region[len(MARKER) :], CLOSE))
        return calls_from_value(value) if value is not None else None


FORMATS: list[Format] = [InternLM()]
