"""ByteDance Seed-OSS (and Doubao Seed) calls:

``<seed:tool_call>\\n<function=NAME>\\n<parameter=k>v</parameter>\\n</function>\\n</seed:tool_call>``

The Qwen3-Coder XML body inside Seed's own wrapper; several ``<function=…>``
blocks may share one wrapper. Values are decoded as JSON unless the schema
says string (vLLM ``tool_parsers/seed_oss_tool_parser.py``; llama.cpp's
Seed-OSS handler; picoclaw issue #3153 shows it leaking as text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import opens_with, strip_value, typed_value, xml_calls
from .base import EndFinder, Format, RawCall, Reasoning, Residue

OPEN = "<seed:tool_call>"
CLOSE = "</seed:tool_call>"

_FUNCTION = re.compile(r"<function\s*=\s*([^>\s]+)\s*>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAM = re.compile(r"<parameter\s*=\s*([^>\s]+)\s*>(.*?)</parameter>", re.DOTALL)


class SeedOss(Format):
    name: ClassVar[str] = "seed_oss"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return opens_with(len(marker), "<", CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None

        def value(m: re.Match[str], name: str) -> Any:
            return typed_value(strip_value(m.group(2)), tools, name, m.group(1).strip())

        return xml_calls(region[len(OPEN) :], _FUNCTION, _PARAM, value, (CLOSE,))


FORMATS: list[Format] = [SeedOss()]

RESIDUE: list[Residue] = [Residue(wrappers=("seed:tool_call",))]

# Seed-OSS thinks in ``<seed:think>…</seed:think>``; its template may open
# the tag in the prompt, so a reply often shows only the close (vLLM
# ``reasoning/seedoss_reasoning_parser.py``, llama.cpp's Seed-OSS handler).
# ``<seed:cot_budget_reflect>`` after the close is the answer's, kept.
REASONING: list[Reasoning] = [
    Reasoning("seed_oss", opens=("<seed:think>",), closes=("</seed:think>",), prefilled=True)
]

#: Seed-OSS thinks by default (its thinking budget decides how long).
REASONING_MODELS = (r"seed-oss",)
