"""Swiss AI Apertus calls: the function name is the key,

``<|tools_prefix|>[{"NAME": {…arguments…}}, …]<|tools_suffix|>``

(llama.cpp ``common/chat.cpp`` Apertus handler and its tests, vLLM
``tool_parsers/apertus_tool_parser.py``, SGLang ``apertus2509_detector.py``).
The region ends where the list closes, taking ``<|tools_suffix|>`` right
after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Opt, Steps, loads, strip_trailer
from .base import EndFinder, Format, RawCall, Reasoning

OPEN = "<|tools_prefix|>"
CLOSE = "<|tools_suffix|>"


class Apertus(Format):
    name: ClassVar[str] = "apertus"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("[{"), Opt(CLOSE))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        value = loads(strip_trailer(region[len(OPEN) :], CLOSE))
        items = value if isinstance(value, list) else [value]
        calls: list[RawCall] = []
        for item in items:
            if not isinstance(item, dict) or len(item) != 1:
                return None
            ((name, args),) = item.items()
            if not isinstance(name, str) or not name:
                return None
            calls.append(RawCall(name, args))
        return calls or None


FORMATS: list[Format] = [Apertus()]


# Apertus thinks in ``<|inner_prefix|>…<|inner_suffix|>`` blocks, which may
# come again between pieces of the answer; the template can open the first
# in the prompt (SGLang's ``apertus`` reasoning parser, llama.cpp's handler).
REASONING: list[Reasoning] = [
    Reasoning(
        "apertus",
        opens=("<|inner_prefix|>",),
        closes=("<|inner_suffix|>",),
        prefilled=True,
        repeats=True,
    )
]
