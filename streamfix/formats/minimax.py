"""MiniMax M2 / M2.1 calls:

``<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="k">v</parameter>\\n…``
``</invoke>\\n…</minimax:tool_call>``

Several ``<invoke>`` blocks may share one wrapper. Values are text; the
chat template writes non-string values as JSON, so they are decoded unless
the tool's schema says string (vLLM ``tool_parsers/minimax_m2_tool_parser.py``,
SGLang ``function_call/minimax_m2.py``). MiniMax M1's ``<tool_calls>`` with
one JSON object per line is a core hermes_tags wrapper.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..context import ToolSpec
from ._family import strip_value, typed_value, xml_calls
from .base import EndFinder, Format, RawCall
from .scan import UntilMarker

OPEN = "<minimax:tool_call>"
CLOSE = "</minimax:tool_call>"

_INVOKE = re.compile(
    r"<invoke\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</invoke>|\Z)", re.DOTALL
)
_PARAM = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)</parameter>", re.DOTALL
)


class MiniMax(Format):
    name: ClassVar[str] = "minimax"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None

        def value(m: re.Match[str], name: str) -> Any:
            return typed_value(strip_value(m.group(2)), tools, name, m.group(1).strip())

        return xml_calls(region[len(OPEN) :], _INVOKE, _PARAM, value, (CLOSE,))


FORMATS: list[Format] = [MiniMax()]
