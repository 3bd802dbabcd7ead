"""Meituan LongCat-Flash calls, in either of its two bodies:

- ``<longcat_tool_call>{"name": "f", "arguments": {…}}</longcat_tool_call>``
  (the model card's format; vLLM ``tool_parsers/longcat_tool_parser.py``);
- GLM-style pairs: ``<longcat_tool_call>NAME\\n<longcat_arg_key>k</longcat_arg_key>``
  ``\\n<longcat_arg_value>v</longcat_arg_value>\\n</longcat_tool_call>``
  (LongCat-Flash-Thinking / newer templates, as users' parsers show).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Header, Steps, Until, loads
from .base import EndFinder, Format, RawCall, Residue, calls_from_value
from .glm import kv_calls

_LEAD = r"\s*(?:[\w.\-]+\s*)?"
OPEN = "<longcat_tool_call>"
CLOSE = "</longcat_tool_call>"


class LongCat(Format):
    name: ClassVar[str] = "longcat"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        # A plain tag: the body opens with JSON or a function name.
        return Steps(len(marker), Header("{<[", r"\w.\-\s", _LEAD, _LEAD), Until(CLOSE))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip().removesuffix(CLOSE)
        s = body.strip()
        if s.startswith(("{", "[")):
            value = loads(s)
            return calls_from_value(value) if value is not None else None
        return kv_calls(body, tools, "longcat_arg_key", "longcat_arg_value")


FORMATS: list[Format] = [LongCat()]

RESIDUE: list[Residue] = [Residue(wrappers=("longcat_tool_call",))]
