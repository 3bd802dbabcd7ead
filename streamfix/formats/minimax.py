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

import orjson

from ..spec import ToolSpec
from ._family import contiguous, loads, opens_with, strip_value, typed_value, xml_calls
from .base import EndFinder, Format, RawCall, Reasoning, Residue, calls_from_value
from .scan import UntilMarker

OPEN = "<minimax:tool_call>"
CLOSE = "</minimax:tool_call>"

_INVOKE = re.compile(
    r"<invoke\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</invoke>|\Z)", re.DOTALL
)
_PARAM = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)</parameter>", re.DOTALL
)
#: In a block the wrapper's close ended, a close the model left out is
#: implied by the next one: an ``<invoke>`` ends at ``</minimax:tool_call>``,
#: its last parameter at ``</invoke>`` (Ollama's MiniMax M2 parser reads both).
#: Only there: in a block the stream cut, a missing close is a value cut off.
_INVOKE_CLOSED = re.compile(
    r"<invoke\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</invoke>|(?=</minimax:tool_?call>))",
    re.DOTALL,
)
_PARAM_CLOSED = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</parameter>|\Z)", re.DOTALL
)


OPEN_ALT, CLOSE_ALT = "<minimax:toolcall>", "</minimax:toolcall>"


class MiniMax(Format):
    name: ClassVar[str] = "minimax"
    markers: ClassVar[tuple[str, ...]] = (OPEN, OPEN_ALT)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return opens_with(len(marker), "<{[", CLOSE, CLOSE_ALT)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        opener = OPEN if region.startswith(OPEN) else OPEN_ALT
        if not region.startswith(opener):
            return None
        body = region[len(opener) :]
        s = body.strip().removesuffix(CLOSE).removesuffix(CLOSE_ALT).strip()
        if s.startswith(("{", "[")):
            value = loads(s)
            return calls_from_value(value) if value is not None else None

        def value_of(m: re.Match[str], name: str) -> Any:
            return typed_value(strip_value(m.group(2)), tools, name, m.group(1).strip())

        if body.rstrip().endswith((CLOSE, CLOSE_ALT)):
            return xml_calls(body, _INVOKE_CLOSED, _PARAM_CLOSED, value_of, (CLOSE, CLOSE_ALT))
        return xml_calls(body, _INVOKE, _PARAM, value_of, (CLOSE, CLOSE_ALT))


#: The "Perl-style" block MiniMax M2.x writes through some providers:
#: ``[TOOL_CALL]\n{tool => "NAME", args => {\n  --key "value"\n}}\n[/TOOL_CALL]``
#: (args also as JSON). Seen in hermes-agent, lee-code, zeroclaw and other
#: harnesses' recovery parsers; LM Studio bug tracker #1177.
ARROW_OPEN, ARROW_CLOSE = "[TOOL_CALL]", "[/TOOL_CALL]"
_ARROW = re.compile(
    r'\s*\{\s*tool\s*=>\s*"([^"]+)"\s*,?\s*(?:args\s*=>\s*(\{.*\}))?\s*\}\s*\Z', re.DOTALL
)
_ARROW_ARG = re.compile(
    r'\s*,?\s*(?:--([\w.\-]+)\s*:?|([\w.\-]+)\s*=>)\s*("(?:[^"\\]|\\.)*"|[^\s,}]+)\s*', re.DOTALL
)


def _arrow_args(text: str, tools: Mapping[str, ToolSpec], name: str) -> dict[str, Any] | None:
    inner = text.strip()[1:-1]
    found = contiguous(_ARROW_ARG, inner)
    if found is None:
        return None
    args: dict[str, Any] = {}
    for m in found:
        key = m.group(1) or m.group(2)
        raw = m.group(3)
        if raw.startswith('"'):
            try:
                args[key] = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
        else:
            args[key] = typed_value(raw, tools, name, key)
    return args


class MiniMaxArrow(Format):
    name: ClassVar[str] = "minimax_arrow"
    markers: ClassVar[tuple[str, ...]] = (ARROW_OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return opens_with(len(marker), "{", ARROW_CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        body = region.removeprefix(ARROW_OPEN).rstrip().removesuffix(ARROW_CLOSE)
        m = _ARROW.match(body)
        if m is None:
            return None
        name, raw = m.group(1), m.group(2)
        if raw is None:
            return [RawCall(name, {})]
        value = loads(raw)
        if isinstance(value, dict):
            return [RawCall(name, value)]
        args = _arrow_args(raw, tools, name)
        return None if args is None else [RawCall(name, args)]


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
    found = contiguous(_M3_ELEMENT, text)
    return None if found is None else [(m.group(1), m.group(2)) for m in found]


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
        found = contiguous(_M3_INVOKE, body)
        if not found:
            return None
        calls: list[RawCall] = []
        for m in found:
            name = m.group(1).strip()
            children = _m3_children(m.group(2))
            if children is None:
                return None
            calls.append(RawCall(name, {k: _m3_value(v, tools, name, k) for k, v in children}))
        return calls


FORMATS: list[Format] = [MiniMax(), MiniMaxM3(), MiniMaxArrow()]

#: MiniMax's wrappers, and ``[/TOOL_CALL]``, which closes its arrow block
#: (whose opener may be prose).
RESIDUE: list[Residue] = [
    Residue(wrappers=("invoke", "minimax:tool_call", "minimax:toolcall"), brackets=("/TOOL_CALL",))
]


# MiniMax M2 thinks in ``<think>`` tags its template opens in the prompt
# (the ``think`` family; vLLM ``reasoning/minimax_m2_reasoning_parser.py``);
# M3 in ``<mm:think>…</mm:think>``, opened in the prompt when thinking is on
# (llama.cpp's MiniMax-M3 handler, vLLM ``minimax_m3`` reasoning parser).
# M2 thinks again between calls (interleaved thinking), and a ``</think>``
# it writes again after the answer began is debris (vLLM's M2 parser strips
# it): for an M2 model, its ``<think>`` sections repeat.
REASONING: list[Reasoning] = [
    Reasoning("minimax_m3", opens=("<mm:think>",), closes=("</mm:think>",), prefilled=True),
    Reasoning(
        "minimax_m2",
        opens=("<think>",),
        closes=("</think>",),
        prefilled=True,
        repeats=True,
        models=(r"minimax-m2",),
    ),
]

#: MiniMax M2 reasons before answering by default (M3 when the request
#: turns thinking on: ``thinking_mode: "enabled"``).
REASONING_MODELS = (r"minimax-m2",)
