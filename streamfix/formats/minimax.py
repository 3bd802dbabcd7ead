"""MiniMax M2 / M2.1 calls:

``<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="k">v</parameter>\\n…``
``</invoke>\\n…</minimax:tool_call>``

Several ``<invoke>`` blocks may share one wrapper. Values are text; the
chat template writes non-string values as JSON, so they are decoded unless
the tool's schema says string (vLLM ``tool_parsers/minimax_m2_tool_parser.py``,
SGLang ``function_call/minimax_m2.py``).

MiniMax M3 puts a namespace token ``]<]minimax[>[`` before every tag and
writes each parameter as its own element, nested for objects (``<item>``
for array items): ``]<]minimax[>[<tool_call>\\n]<]minimax[>[<invoke
name="NAME">]<]minimax[>[<path>/a</path>…]<]minimax[>[</invoke>\\n]<]minimax[>[</tool_call>``
(SGLang ``function_call/minimax_m3.py``; MiniMax-M3 issue #31 and vLLM
issue #51073 show it leaking into content). MiniMax M1's ``<tool_calls>`` with
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


M3_NS = "]<]minimax[>["
M3_OPEN = M3_NS + "<tool_call>"
M3_CLOSE = "</tool_call>"

_M3_SPACING = re.compile(re.escape(M3_NS) + r"[ \t\r\n]*(?=<)")
_M3_INVOKE = re.compile(r'\s*<invoke\s+name\s*=\s*"([^"]+)"\s*>(.*?)</invoke>\s*', re.DOTALL)
_M3_ELEMENT = re.compile(r"\s*<([\w.\-]+)>(.*?)</\1>\s*", re.DOTALL)


def _m3_value(raw: str, tools: Mapping[str, ToolSpec], name: str, key: str) -> Any:
    """One element's content: nested elements (an object, or a list when
    every child is ``<item>``), else text decoded as the schema says."""
    if raw.lstrip().startswith("<"):
        children = _m3_children(raw)
        if children is not None:
            if children and all(k == "item" for k, _ in children):
                return [_m3_value(v, {}, "", "") for _, v in children]
            return {k: _m3_value(v, {}, "", "") for k, v in children}
    return typed_value(raw, tools, name, key)


def _m3_children(text: str) -> list[tuple[str, str]] | None:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _M3_ELEMENT.finditer(text):
        if m.start() != pos:
            return None
        pos = m.end()
        out.append((m.group(1), m.group(2)))
    return out if pos == len(text) else None


class MiniMaxM3(Format):
    name: ClassVar[str] = "minimax_m3"
    markers: ClassVar[tuple[str, ...]] = (M3_OPEN, M3_NS + "\n<tool_call>")
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(M3_CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        text = _M3_SPACING.sub("", region).replace(M3_NS, "")
        if not text.startswith("<tool_call>"):
            return None
        body = text[len("<tool_call>") :].removesuffix(M3_CLOSE)
        calls: list[RawCall] = []
        pos = 0
        for m in _M3_INVOKE.finditer(body):
            if m.start() != pos:
                return None
            pos = m.end()
            name = m.group(1).strip()
            children = _m3_children(m.group(2))
            if children is None:
                return None
            calls.append(RawCall(name, {k: _m3_value(v, tools, name, k) for k, v in children}))
        if not calls or body[pos:].strip():
            return None
        return calls


FORMATS: list[Format] = [MiniMax(), MiniMaxM3()]
