"""XML function syntax (Qwen3-Coder, and models that copy it):

    <tool_call>
    <function=create_ticket>
    <parameter=title>
    Printer on fire
    </parameter>
    </function>
    </tool_call>

with or without the ``<tool_call>`` wrapper. Values are text; one leading
and one trailing newline around a value are layout (vLLM
``qwen3coder_tool_parser`` strips exactly those), and the detector converts
values by the parameter's schema type (``args.coerce``), so ``1`` becomes
an integer for an ``integer`` parameter and a ``string`` parameter keeps
text that looks like JSON. A closing ``</parameter>`` or ``</function>``
that never came is tolerated when the structure is otherwise clear
(llama.cpp's Qwen3-Coder parser does the same at end of generation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..context import ToolSpec
from .base import EndFinder, Format, RawCall
from .scan import UntilMarker

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|(?=<function=)|\Z)", re.S)
_PARAM = re.compile(
    r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)", re.S
)
_LEFTOVER = re.compile(r"\S")


def _value(raw: str) -> str:
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def xml_calls(body: str) -> list[RawCall] | None:
    """Every ``<function=…>`` in ``body``; None if there is none or if text
    other than blanks stands between them."""
    calls: list[RawCall] = []
    pos = 0
    for m in _FUNCTION.finditer(body):
        if _LEFTOVER.search(body, pos, m.start()):
            return None
        args: dict[str, Any] = {}
        inner = m.group(2)
        ipos = 0
        for p in _PARAM.finditer(inner):
            if _LEFTOVER.search(inner, ipos, p.start()):
                return None
            args[p.group(1).strip()] = _value(p.group(2))
            ipos = p.end()
        if _LEFTOVER.search(inner, ipos):
            return None
        calls.append(RawCall(m.group(1).strip(), args))
        pos = m.end()
    if not calls or _LEFTOVER.search(body, pos):
        return None
    return calls


class QwenXml(Format):
    name = "qwen_xml"
    markers = ("<tool_call>", "<function=")
    priority = 20

    def end_finder(self, marker: str) -> EndFinder:
        if marker == "<tool_call>":
            return UntilMarker("</tool_call>", skip=len(marker))
        return UntilMarker("</function>", skip=len(marker))

    def is_complete(self, region: str) -> bool:
        return region.count("<function=") == region.count("</function>")

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        body = region
        if body.startswith("<tool_call>"):
            body = body[len("<tool_call>") :]
            end = body.find("</tool_call>")
            if end >= 0:
                if body[end + len("</tool_call>") :].strip():
                    return None
                body = body[:end]
        return xml_calls(body)


FORMATS: list[Format] = [QwenXml()]
