"""IQuestLab IQuest-Q1 calls: GLM's argument pairs in a tag of their own,

``<iquest_tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</iquest_tool_call>``

(SGLang ``function_call/iquest_q1_detector.py``, which reads the pairs as
its GLM 4.7 detector does). A tool without arguments is
``<iquest_tool_call>NAME</iquest_tool_call>``. As in GLM's template, a
string parameter's value is its text exactly (blanks and newlines inside
the tags are data) and any other value is JSON (``glm.kv_calls``).

The wrapper is unmistakable call syntax: a region that does not read is
markup. A value whose ``</arg_value>`` was lost before the close is kept,
as ``glm.py`` keeps it. At the token limit, a call whose close never came
is not whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Steps, Until
from .base import EndFinder, Format, RawCall, Residue
from .glm import kv_calls, with_last_value_closed

OPEN = "<iquest_tool_call>"
CLOSE = "</iquest_tool_call>"


class IQuest(Format):
    name: ClassVar[str] = "iquest"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Until(CLOSE))

    def is_complete(self, region: str) -> bool:
        # Before the close, another argument may have followed.
        return region.rstrip().endswith(CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip()
        if body.endswith(CLOSE):
            body = with_last_value_closed(body.removesuffix(CLOSE))
        return kv_calls(body, tools, exact=True)


FORMATS: list[Format] = [IQuest()]

RESIDUE: list[Residue] = [Residue(wrappers=("iquest_tool_call",))]
