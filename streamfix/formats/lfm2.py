"""Liquid LFM2 / LFM2.5 calls: pythonic calls in special tokens,

``<|tool_call_start|>[f(a="x"), g()]<|tool_call_end|>``, or a JSON list of
``{"name", "arguments"}`` objects in the same tokens (SGLang
``function_call/lfm2_detector.py``, vLLM ``lfm2_tool_parser.py``, Ollama's
LFM2 parser tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import loads, python_calls
from .base import EndFinder, Format, RawCall, calls_from_value
from .scan import UntilMarker

OPEN = "<|tool_call_start|>"
CLOSE = "<|tool_call_end|>"


class Lfm2(Format):
    name: ClassVar[str] = "lfm2"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def echo_after(self, region: str) -> str:
        # LFM2 may write the call's body again after <|tool_call_end|>,
        # capped by a second one (vLLM test_lfm2_tool_parser.py,
        # test_echoed_tool_call_body_not_leaked_to_content).
        if region.startswith(OPEN) and region.endswith(CLOSE):
            return region[len(OPEN) :]
        return ""

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].strip().removesuffix(CLOSE).strip()
        if body.startswith(("[{", "{")) or (body.startswith("[") and body[1:].lstrip()[:1] == "{"):
            value = loads(body)
            return calls_from_value(value) if value is not None else None
        return python_calls(body)


FORMATS: list[Format] = [Lfm2()]

#: LFM2's templates never open ``<think>`` in the prompt: with thinking on,
#: the model writes it when it reasons and answers directly otherwise
#: (Ollama's LFM2 parser waits for a leading ``<think>``).
PROMPT_NEVER_OPENS_MODELS = (r"lfm-?2",)
