"""Moonshot Kimi K2 / K2.5 / K2-Thinking call sections:

``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0``
``<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>``

The call id is ``functions.NAME:IDX`` (the ``functions.`` prefix is left
for the detector to resolve; some fine-tunes drop it). vLLM
``tool_parsers/kimi_k2_tool_parser.py`` also accepts the singular
``<|tool_call_section_begin|>`` / ``<|tool_call_section_end|>`` spelling the
model sometimes writes; SGLang ``kimik2_detector.py`` and llama.cpp's Kimi
K2 handler parse the same tokens. A call written without the section
tokens (``<|tool_call_begin|>…<|tool_call_end|>``) is a region of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..context import ToolSpec
from .base import EndFinder, Format, RawCall
from .scan import UntilMarker

SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"

_CALL = re.compile(
    re.escape(CALL_BEGIN)
    + r"\s*(.*?)\s*"
    + re.escape(ARG_BEGIN)
    + r"(.*?)(?:"
    + re.escape(CALL_END)
    + r"|\Z)",
    re.DOTALL,
)
_INDEX = re.compile(r":\d+\Z")


class Kimi(Format):
    name: ClassVar[str] = "kimi"
    markers: ClassVar[tuple[str, ...]] = (*SECTION_BEGIN, CALL_BEGIN)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        closes = (CALL_END,) if marker == CALL_BEGIN else SECTION_END
        return UntilMarker(*closes, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        calls: list[RawCall] = []
        for m in _CALL.finditer(region):
            name = _INDEX.sub("", m.group(1).strip())
            if not name or any(c.isspace() for c in name):
                return None
            args = m.group(2)
            for t in SECTION_END:
                args = args.replace(t, "")
            calls.append(RawCall(name, args.strip() or None))
        return calls or None


FORMATS: list[Format] = [Kimi()]
