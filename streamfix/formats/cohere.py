"""Cohere Command R7B / Command A (and "North") action blocks:

``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {…}}, …]<|END_ACTION|>``

(llama.cpp ``common/chat.cpp`` Command R7B handler, vLLM
``tool_parsers/cohere_command_tool_parser.py``, SGLang
``cohere_command4_detector.py``). A single object instead of the list is
also seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import loads
from .base import (
    ABORT,
    UNREADABLE,
    EndFinder,
    Format,
    RawCall,
    Reasoning,
    Residue,
    calls_from_value,
)
from .fenced import FENCE, Fenced, FenceFinder
from .scan import UntilMarker, skipped, split_values

OPEN = "<|START_ACTION|>"
CLOSE = "<|END_ACTION|>"


def _without_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "tool_call_id"}
    return value


class Cohere(Format):
    name: ClassVar[str] = "cohere"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].strip().removesuffix(CLOSE).strip()
        value = loads(body)
        if value is None:
            return _salvaged(body)
        return calls_from_value(_without_ids(value))


def _salvaged(body: str) -> list[RawCall] | None:
    """The calls of an action list that does not read whole: sampled output
    drops the comma between two call objects or writes a bad value in one
    (Ollama's Cohere parser tests); each object is read alone, one that
    does not read is ``UNREADABLE`` in its place. None when the list holds
    anything but objects, or no object reads."""
    if not (body.startswith("[") and body.endswith("]")):
        return None
    parts = split_values(body[1:-1])
    if not parts or any(not p.startswith("{") for p in parts):
        return None
    calls: list[RawCall] = []
    for part in parts:
        value = loads(part)
        got = calls_from_value(_without_ids(value)) if isinstance(value, dict) else None
        calls.extend(got or [UNREADABLE])
    return None if all(c is UNREADABLE for c in calls) else calls


#: Command R+ writes its calls as ``Action:`` then a fenced JSON list
#: (llama.cpp's Command R+ handler): the label goes with the call.
ACTION = "Action:"


class _ActionEnd:
    """After the label: blanks, then a fence the fenced format reads as a
    call (anything else, or a fence in another language: not this)."""

    __slots__ = ("_fence", "_seen", "_skip")

    def __init__(self, skip: int) -> None:
        self._skip = skip
        self._seen = 0  # characters read after the label
        self._fence: FenceFinder | None = None

    def feed(self, text: str) -> int | None:
        self._skip, i = skipped(self._skip, text)
        if self._skip:
            return None
        if self._fence is None:
            while i < len(text) and text[i].isspace():
                i += 1
                self._seen += 1
                if self._seen > 8:
                    return ABORT
            if i == len(text):
                return None
            if not text.startswith(FENCE[: len(text) - i], i):
                return ABORT
            self._fence = FenceFinder()
        r = self._fence.feed(text[i:])
        if r is None:
            return None
        return ABORT if r < 0 else i + r


class CommandRPlus(Format):
    name: ClassVar[str] = "command_r_plus"
    markers: ClassVar[tuple[str, ...]] = (ACTION,)
    wrapped: ClassVar[bool] = False

    def end_finder(self, marker: str) -> EndFinder:
        return _ActionEnd(len(marker))

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return Fenced().partial_is_call(region, tools)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(ACTION):
            return None
        fence = region[len(ACTION) :].lstrip()
        return Fenced().parse(fence, tools) if fence.startswith(FENCE) else None


FORMATS: list[Format] = [Cohere(), CommandRPlus()]


# Command R7B, Command A Reasoning and Cohere2 ("North") think between
# ``<|START_THINKING|>`` and ``<|END_THINKING|>``, then answer in
# ``<|START_RESPONSE|>…<|END_RESPONSE|>`` (R7B) or ``<|START_TEXT|>…<|END_TEXT|>``
# (Command A), or act (above). The reasoning templates open the thinking in
# the prompt (vLLM ``reasoning/cohere_command_reasoning_parser.py``, SGLang's
# cohere4 parser, llama.cpp's Command R7B and Cohere2 handlers).
REASONING: list[Reasoning] = [
    Reasoning(
        "cohere",
        opens=("<|START_THINKING|>",),
        closes=("<|END_THINKING|>",),
        answer=("<|START_RESPONSE|>", "<|START_TEXT|>"),
        ends=("<|END_RESPONSE|>", "<|END_TEXT|>"),
        prefilled=True,
    )
]

#: Command A Reasoning and the Cohere2 MoE models think by default; the
#: North models (``North-Mini-Code-1.0``) are Cohere2 MoE models named
#: without it (Ollama's Cohere parser starts them inside the thinking).
REASONING_MODELS = (r"command-a-reasoning", r"cohere2", r"\bnorth-(?:mini-)?code")

#: Grounded answers mark each cited span ``<co>text</co: 0:[1,2],1:[3]>``
#: (the document and snippet indexes): the text is the answer, the tags
#: are markup, removed (vLLM's Cohere Command tool and reasoning parsers'
#: ``citations_with_emoji`` tests expect ``foo bar`` of ``foo
#: <co>bar</co: 0:[1,2],1:[3,4]>``). ``<co>`` is a bare-word token; its
#: close is held while it may still be one. Both are removed from the
#: reasoning too (``in_reasoning``), as vLLM's reasoning parser does.
_CITED = r"[\s\d:\[\],]"
RESIDUE: list[Residue] = [
    Residue(
        words=("co",),
        tokens=(rf"</co:{_CITED}{{1,64}}>",),
        partials=(rf"</co:{_CITED}{{0,64}}\Z",),
        in_reasoning=("<co>", rf"</co:{_CITED}{{1,64}}>"),
        in_reasoning_partials=(rf"<(?:c(?:o)?|/(?:c(?:o(?::{_CITED}{{0,64}})?)?)?)?\Z",),
    )
]
