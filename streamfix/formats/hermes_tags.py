"""Wrapper tags around JSON: ``<tool_call>{"name": …, "arguments": …}</tool_call>``.

The Hermes / Qwen2.5 / Qwen3 shape (vLLM ``hermes_tool_parser``, llama.cpp
``common_chat_parse_hermes_2_pro``), and the same idea under other tag
names that small models copy from prompts: ``<tool_calls>``,
``<function_call>``, ``<tools>``, ``<response>``. Inside: one JSON object,
a list of them, or several objects one after another; ``arguments`` or
``parameters``; single-quoted Python dicts and trailing commas are read
(see ``toolargs.parse_value``); a fence inside the tags is allowed.

A ``</tool_call>`` inside a JSON string is data (Qwen3's tokenizer writes
the marker token there too; ``scan.TOOL_CALL_TABLE``).

``<tool_call>``, ``<tool_calls>`` and ``<function_call>`` are unmistakable
when a body follows them: what does not parse there is markup. A tag
followed by prose ("<tool_call> tags, and …") is a mention, not a call
(``body_shape``): released as text. ``<tools>`` and ``<response>`` also
appear in genuine XML answers, so a body that is not call-shaped JSON is
text; a call-shaped body naming a tool not offered is still markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ..toolargs import INVALID, parse_value
from .base import UNREADABLE, EndFinder, Format, RawCall, Residue, calls_from_value, lead_shape
from .scan import TOOL_CALL_OPEN, Balanced, FirstNonBlank, UntilMarker, split_values, tool_call_end

_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)\n?```\Z", re.S)


def _before_extra_closers(body: str) -> str | None:
    """The value ``body`` starts with when only closing brackets follow it
    (``{"name": "f", "arguments": {}}}``: a brace too many, as small models
    write one, inside call markup that says it is a call); else None."""
    end = Balanced().feed(body)
    if end is None or end <= 0:
        return None
    rest = body[end:].strip()
    if not rest or rest.strip("}]"):
        return None
    return body[:end]


def json_calls(body: str, siblings: bool = True) -> list[RawCall] | None:
    """The calls in a JSON body: one value, or values one after another;
    a markdown fence around them is allowed. With ``siblings``, a value or
    list element that is not a call beside ones that are is ``UNREADABLE``
    in its place (``calls_from_value``)."""
    body = body.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    if not body or body[0] not in "{[":
        return None
    value = parse_value(body)
    if value is not INVALID:
        return calls_from_value(value, siblings)
    head = _before_extra_closers(body)
    if head is not None:
        value = parse_value(head)
        if value is not INVALID:
            return calls_from_value(value, siblings)
    parts = split_values(body)
    if parts is None and siblings:
        # One JSON object per line (MiniMax M1's <tool_calls>): a line that
        # does not read leaves the others.
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if all(ln.lstrip()[:1] in ("{", "[") for ln in lines):
            parts = lines
    if not parts or len(parts) < 2:
        return None
    calls: list[RawCall] = []
    for p in parts:
        v = parse_value(p)
        got = None if v is INVALID else calls_from_value(v, siblings)
        if got is None:
            if not siblings:
                return None
            got = [UNREADABLE]
        calls.extend(got)
    return None if all(c is UNREADABLE for c in calls) else calls


class _Tags(Format):
    tags: ClassVar[tuple[str, ...]] = ()

    def end_finder(self, marker: str) -> EndFinder:
        if marker == TOOL_CALL_OPEN:
            return tool_call_end(len(marker))
        return UntilMarker("</" + marker[1:], skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        for tag in self.tags:
            if region.startswith(tag):
                body = region[len(tag) :]
                close = "</" + tag[1:]
                # The region ends at its structural close: a close inside a
                # JSON string is data (see scan.TOOL_CALL_TABLE).
                whole = json_calls(body.rstrip().removesuffix(close))
                if whole is not None:
                    return whole
                end = body.find(close)
                if end >= 0:
                    if body[end + len(close) :].strip():
                        return None
                    body = body[:end]
                # A model that forgot to close one call before opening the
                # next: <tool_call>{…}\n<tool_call>{…}</tool_call>.
                calls: list[RawCall] = []
                for part in body.split(tag):
                    got = json_calls(part.replace(close, ""))
                    if got is None:
                        return None
                    calls.extend(got)
                return calls or None
        return None


class HermesTags(_Tags):
    name = "hermes"
    tags = ("<tool_call>", "<tool_calls>", "<function_call>")
    markers = tags
    priority = 10

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        """JSON (``{``, ``[``, a fence) or the closing tag at once (an
        empty call) after the tag; anything else ("<tool_call> tags, and
        …") is not this format's body."""
        for tag in self.tags:
            if region.startswith(tag):
                return lead_shape(region[len(tag) :], ("{", "[", "`", "</" + tag[1:]), final)
        return False


class LooseTags(_Tags):
    name = "tags"
    tags = ("<tools>", "<response>")
    markers = tags
    wrapped = False
    unoffered_is_markup = True
    priority = 10

    def end_finder(self, marker: str) -> EndFinder:
        return FirstNonBlank(super().end_finder(marker), len(marker), "{[`")

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        body = region[region.index(">") + 1 :].lstrip()
        return body.startswith(("{", "[", "```"))


FORMATS: list[Format] = [HermesTags(), LooseTags()]

#: Tags that only ever wrap calls (Hermes, xLAM and others): an unmatched
#: closing tag, or an opening one with nothing after it, is debris.
RESIDUE: list[Residue] = [
    Residue(
        wrappers=(
            "tool_call",
            "tool_calls",
            "function_call",
            "function_calls",
            "functions",
            "tools",
            "tool_response",
            "tool_use",
        ),
        # ChatML, the template these models are served with: a leaked turn
        # header is stripped with its role line.
        headers=("<|im_start|>",),
        # A user's turn the model writes after its own is not its reply.
        turn_ends=("<|im_start|>user\n",),
    )
]
