"""Tencent Hunyuan (HY) v3 calls: GLM-style pairs in Hunyuan's tags,

``<tool_calls><tool_call>NAME<tool_sep><arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>…</tool_calls>``

(vLLM ``tool_parsers/hy_v3_tool_parser.py``). ``<tool_calls>`` is shared
with the core Hermes format (a JSON list inside): this one uses the same end
rule (``</tool_calls>``), comes after it, and returns None for JSON
bodies. A lone ``<tool_call>NAME<tool_sep>…</tool_call>`` is read by the GLM
format. Hunyuan-A13B's ``<tool_calls>[{…}]</tool_calls>`` is the core's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import contiguous
from .base import EndFinder, Format, RawCall, Reasoning, Residue, lead_shape
from .glm import kv_calls
from .scan import UntilMarker

OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
SEP = "<tool_sep>"

_CALL = re.compile(r"\s*<tool_call>(.*?)</tool_call>\s*", re.DOTALL)


class Hunyuan(Format):
    name: ClassVar[str] = "hunyuan"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True
    priority: ClassVar[int] = 130

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        return lead_shape(region[len(OPEN) :], ("<tool_call>",), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip().removesuffix(CLOSE)
        if SEP not in body:
            return None
        found = contiguous(_CALL, body)
        if not found:
            return None
        calls: list[RawCall] = []
        for m in found:
            one = kv_calls(m.group(1).replace(SEP, "\n", 1), tools)
            if one is None:
                return None
            calls.extend(one)
        return calls


FORMATS: list[Format] = [Hunyuan()]


# Hunyuan A13B answers in ``<think>…</think><answer>…</answer>`` (vLLM
# ``reasoning/hunyuan_a13b_reasoning_parser.py``): the ``<answer>`` header
# is dropped for a Hunyuan model (other models' ``<answer>`` tags are their
# text); its ``</answer>``, then unmatched, is debris (also after a call).
REASONING: list[Reasoning] = [
    Reasoning(
        "hunyuan",
        opens=("<think>",),
        closes=("</think>",),
        answer=("<answer>",),
        ends=("</answer>",),
        models=(r"hunyuan", r"\bhy-?\d"),
    )
]

RESIDUE: list[Residue] = [Residue(wrappers=("answer",))]
