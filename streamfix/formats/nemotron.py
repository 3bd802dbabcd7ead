"""NVIDIA Llama-Nemotron (Nano/Super) calls:

``<TOOLCALL>[{"name": "f", "arguments": {…}}, …]</TOOLCALL>``

(vLLM ``examples/tool_chat_template_llama_nemotron_*`` and
``tool_parsers/nemotron_json_tool_parser.py``; llama.cpp's Nemotron
handler.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import loads, opens_with
from .base import EndFinder, Format, RawCall, Residue, calls_from_value

OPEN = "<TOOLCALL>"
CLOSE = "</TOOLCALL>"


class Nemotron(Format):
    name: ClassVar[str] = "nemotron"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return opens_with(len(marker), "[{", CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        value = loads(region[len(OPEN) :].strip().removesuffix(CLOSE))
        return calls_from_value(value) if value is not None else None


FORMATS: list[Format] = [Nemotron()]

RESIDUE: list[Residue] = [Residue(wrappers=("TOOLCALL",))]

#: Nemotron Nano v2 and Nemotron 3 Nano reason by default: their templates
#: open ``<think>`` in the prompt (vLLM ``nemotron_v3`` reasoning parser,
#: llama.cpp's Nemotron handlers).
REASONING_MODELS = (r"nemotron-nano-[\w.-]*v2", r"nemotron-3-nano", r"nemotron-nano-3")
