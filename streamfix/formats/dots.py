"""dots (rednote hi lab's dots.llm) calls: ``<dots_function_call>`` blocks.

``<dots_function_call><invoke name="NAME"><parameter name="k">v</parameter>``
``</invoke></dots_function_call>``: MiniMax M2's ``<invoke>`` elements in a
wrapper of the family's own; one block may hold several invokes, and a
block may instead hold one JSON object ``{"name": …, "arguments": {…}}``.
Values are text, decoded as the tool's schema says (SGLang
``function_call/dots_detector.py`` and its tests). The wrapper leaks into
the content of agent harnesses that serve dots models without that
parser, so it is read wherever it appears. Reasoning is Qwen3's
``<think>`` (the ``think`` family).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import loads, opens_with, strip_value, typed_value, xml_calls
from .base import EndFinder, Format, RawCall, Residue, calls_from_value

OPEN = "<dots_function_call>"
CLOSE = "</dots_function_call>"

_INVOKE = re.compile(r"<invoke\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)</invoke>", re.DOTALL)
_PARAM = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)</parameter>", re.DOTALL
)


class Dots(Format):
    name: ClassVar[str] = "dots"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return opens_with(len(marker), "<{[", CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].strip().removesuffix(CLOSE).strip()
        if body.startswith(("{", "[")):
            value = loads(body)
            return calls_from_value(value) if value is not None else None

        def value_of(m: re.Match[str], name: str) -> Any:
            return typed_value(strip_value(m.group(2)), tools, name, m.group(1).strip())

        return xml_calls(body, _INVOKE, _PARAM, value_of)


FORMATS: list[Format] = [Dots()]

#: The wrapper, stripped where it is left unmatched.
RESIDUE: list[Residue] = [Residue(wrappers=("dots_function_call",))]
