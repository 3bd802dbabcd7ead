"""K2 Horizon: its calls and its reasoning markup, IFM tokens.

Calls (vLLM ``tool_parsers/k2_horizon_tool_parser.py``): a group of calls,
``<ifm|tool_calls><ifm|tool_call>NAME<ifm|arg_key>k</ifm|arg_key><ifm|arg_value>v</ifm|arg_value></ifm|tool_call>…</ifm|tool_calls>``,
with an optional ``<ifm|arg_type>t</ifm|arg_type>`` between a key and its
value (the template's typed XML), or a JSON object ``{"name": …,
"arguments": {…}}`` inside ``<ifm|tool_call>`` (its JSON format); a call
without arguments is ``<ifm|tool_call>NAME</ifm|tool_call>``. The group
holds nothing but calls, or it is not one. A call may also stand alone,
without the group (SGLang ``k2_v3_detector.py`` reads ``<ifm|tool_call>``
by itself, and its tests write calls so). A value is typed by the tool's
schema (``_family.typed_value``); without one, a declared ``string`` (or
``any``) type keeps the text.

Reasoning: one pair of tags per reasoning effort, ``<ifm|think>…</ifm|think>``
(high, the default), ``<ifm|think_fast>…</ifm|think_fast>`` (medium),
``<ifm|think_faster>…</ifm|think_faster>`` (low). The template opens the
pair in the prompt, so a reply may show only the close (vLLM
``reasoning/k2_horizon_reasoning_parser.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import contiguous, loads, param_schema, typed_value
from .base import EndFinder, Format, RawCall, Reasoning, call_from_object, lead_shape
from .scan import UntilMarker

OPEN, CLOSE = "<ifm|tool_calls>", "</ifm|tool_calls>"
CALL, CALL_CLOSE = "<ifm|tool_call>", "</ifm|tool_call>"

_CALL = re.compile(r"\s*<ifm\|tool_call>(.*?)</ifm\|tool_call>\s*", re.DOTALL)
_HEAD = re.compile(r"\s*([^\s<>{}]+)\s*")
_PAIR = re.compile(
    r"\s*<ifm\|arg_key>([^<]*)</ifm\|arg_key>\s*"
    r"(?:<ifm\|arg_type>([^<]*)</ifm\|arg_type>\s*)?"
    r"<ifm\|arg_value>(.*?)</ifm\|arg_value>\s*",
    re.DOTALL,
)
_TEXT_TYPES = ("string", "str", "any")


def _one(body: str, tools: Mapping[str, ToolSpec]) -> RawCall | None:
    s = body.strip()
    if s.startswith("{"):
        return call_from_object(loads(s))
    m = _HEAD.match(body)
    if m is None:
        return None
    name = m.group(1)
    pairs = contiguous(_PAIR, body[m.end() :])
    if pairs is None:
        return None
    args: dict[str, Any] = {}
    for p in pairs:
        key = p.group(1).strip()
        if not key or key in args:
            return None
        declared = (p.group(2) or "").split("[", 1)[0].strip().lower()
        if declared in _TEXT_TYPES and param_schema(tools, name, key) is None:
            args[key] = p.group(3)
        else:
            args[key] = typed_value(p.group(3), tools, name, key)
    return RawCall(name, args)


class K2Horizon(Format):
    name: ClassVar[str] = "k2_horizon"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        return lead_shape(region[len(OPEN) :], (CALL,), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        found = contiguous(_CALL, region[len(OPEN) :].rstrip().removesuffix(CLOSE))
        if not found:
            return None
        calls = [_one(m.group(1), tools) for m in found]
        return None if any(c is None for c in calls) else [c for c in calls if c is not None]


class K2HorizonCall(Format):
    """One ``<ifm|tool_call>…</ifm|tool_call>`` outside a group: the IFM
    tokens are the model's own, so a block that does not parse is markup."""

    name: ClassVar[str] = "k2_horizon_call"
    markers: ClassVar[tuple[str, ...]] = (CALL,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CALL_CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        m = _CALL.fullmatch(region)
        if m is None:
            return None
        call = _one(m.group(1), tools)
        return None if call is None else [call]


FORMATS: list[Format] = [K2Horizon(), K2HorizonCall()]

_EFFORTS = ("think", "think_fast", "think_faster")

REASONING: list[Reasoning] = [
    Reasoning(
        "k2_horizon",
        opens=tuple(f"<ifm|{e}>" for e in _EFFORTS),
        closes=tuple(f"</ifm|{e}>" for e in _EFFORTS),
        prefilled=True,
    ),
]

#: K2 Horizon reasons by default.
REASONING_MODELS = (r"k2-?horizon",)

#: Its template opens the reasoning in the prompt (the default effort):
#: a call before any close ends the reasoning.
PROMPT_OPENS_MODELS = (r"k2-?horizon",)
