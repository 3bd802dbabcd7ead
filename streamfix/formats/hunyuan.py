"""Tencent Hunyuan (HY) v3 and v4 calls: GLM-style pairs in Hunyuan's tags,

``<tool_calls><tool_call>NAME<tool_sep><arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>…</tool_calls>``

(vLLM ``tool_parsers/hy_v3_tool_parser.py``). ``<tool_calls>`` is shared
with the core Hermes format (a JSON list inside): this one uses the same end
rule (``</tool_calls>``), comes after it, and returns None for JSON
bodies (the body must be ``<tool_call>`` elements). A lone
``<tool_call>NAME<tool_sep>…</tool_call>`` is read by the GLM format.
Hunyuan-A13B's ``<tool_calls>[{…}]</tool_calls>`` is the core's.

Hunyuan 4 writes no ``<tool_sep>`` (the first ``<arg_key>`` or the close
ends the name), and its checkpoints spell every structural token with a
suffix of their own, the same on each (``<tool_calls:opensource>``,
``<arg_key:6124c78e>``; an unsuffixed checkpoint writes the bare tags):
``<tool_calls:S><tool_call:S>NAME<arg_key:S>k</arg_key:S><arg_value:S>v</arg_value:S></tool_call:S></tool_calls:S>``
(vLLM ``tool_parsers/hy_v4_tool_parser.py``, SGLang
``function_call/hunyuan_detector.py``, which read the suffix from the
vocabulary). Here the suffix is read from the opening token: the region
ends at the close with the same suffix, and the tokens are read with it
removed. A lone suffixed ``<tool_call:S>`` is read as GLM reads a bare one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import ClassVar

from ..spec import ToolSpec
from ._family import contiguous
from .base import ABORT, EndFinder, Format, RawCall, Reasoning, Residue, lead_shape
from .glm import Glm, kv_calls
from .scan import UntilMarker, skipped

OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
SEP = "<tool_sep>"
#: Hunyuan 4's suffixed tokens: the wrapper and a lone call (the suffix
#: and its ``>`` follow).
SUFFIXED = ("<tool_calls:", "<tool_call:")

_CALL = re.compile(r"\s*<tool_call>(.*?)</tool_call>\s*", re.DOTALL)

#: The structural tokens a suffix is written on.
_TOKENS = ("tool_calls", "tool_call", "tool_sep", "arg_key", "arg_value")
#: A suffix as the checkpoints spell it (``opensource``, ``6124c78e``).
_SUFFIX = re.compile(r"<(tool_calls?):([\w.\-]+)>")
_NOT_SUFFIX = re.compile(r"[^\w.\-]")
MAX_SUFFIX = 64

_GLM = Glm()


class _SuffixedEnd:
    """After ``<tool_calls:`` (or ``<tool_call:``): the suffix up to ``>``,
    then the region up to the close spelt with the same suffix. A suffix
    that is empty, too long, or holds another character is not the token:
    the text is released at once."""

    __slots__ = ("_close", "_skip", "_suffix", "_until")

    def __init__(self, marker: str) -> None:
        self._skip = len(marker)
        self._close = "</" + marker[1:]
        self._suffix = ""
        self._until: UntilMarker | None = None

    def feed(self, text: str) -> int | None:
        self._skip, i = skipped(self._skip, text)
        if self._skip:
            return None
        if self._until is None:
            m = _NOT_SUFFIX.search(text, i)
            end = m.start() if m else len(text)
            self._suffix += text[i:end]
            if len(self._suffix) > MAX_SUFFIX:
                return ABORT
            if m is None:
                return None
            if text[end] != ">" or not self._suffix:
                return ABORT
            self._until = UntilMarker(f"{self._close}{self._suffix}>")
            i = end + 1
        r = self._until.feed(text[i:] if i else text)
        return None if r is None or r == ABORT else i + r


@lru_cache(maxsize=16)
def _suffix_re(suffix: str) -> re.Pattern[str]:
    return re.compile(rf"<(/?)({'|'.join(_TOKENS)}):{re.escape(suffix)}>")


def unsuffixed(region: str) -> str | None:
    """A region opened by a suffixed token, its tokens written bare; None
    when it does not open with one."""
    m = _SUFFIX.match(region)
    if m is None:
        return None
    return _suffix_re(m.group(2)).sub(r"<\1\2>", region)


class Hunyuan(Format):
    name: ClassVar[str] = "hunyuan"
    markers: ClassVar[tuple[str, ...]] = (OPEN, *SUFFIXED)
    wrapped: ClassVar[bool] = True
    priority: ClassVar[int] = 130

    def end_finder(self, marker: str) -> EndFinder:
        if marker in SUFFIXED:
            return _SuffixedEnd(marker)
        return UntilMarker(CLOSE, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        if region.startswith(SUFFIXED):
            # The end finder judges the suffix; after it, what a bare
            # token of the same kind must be followed by.
            head, gt, rest = region.partition(">")
            if not gt:
                return True if final else None
            if head.startswith(SUFFIXED[0]):
                return lead_shape(rest, ("<tool_call:",), final)
            return _GLM.body_shape("<tool_call>" + rest, tools, final)
        return lead_shape(region[len(OPEN) :], ("<tool_call>",), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if region.startswith(SUFFIXED):
            bare = unsuffixed(region)
            if bare is None:
                return None
            if not bare.startswith(OPEN):
                return _GLM.parse(bare, tools)  # a lone call
            region = bare
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip().removesuffix(CLOSE)
        found = contiguous(_CALL, body)
        if not found:
            return None
        calls: list[RawCall] = []
        for m in found:
            one = kv_calls(m.group(1).replace(SEP, "\n", 1), tools)
            if one is None:
                return None
            calls.extend(one)
        return calls


FORMATS: list[Format] = [Hunyuan()]


# Hunyuan A13B answers in ``<think>…</think><answer>…</answer>`` (vLLM
# ``reasoning/hunyuan_a13b_reasoning_parser.py``): the ``<answer>`` header
# is dropped for a Hunyuan model (other models' ``<answer>`` tags are their
# text); its ``</answer>``, then unmatched, is debris (also after a call).
REASONING: list[Reasoning] = [
    Reasoning(
        "hunyuan",
        opens=("<think>",),
        closes=("</think>",),
        answer=("<answer>",),
        ends=("</answer>",),
        models=(r"hunyuan", r"\bhy-?\d"),
    )
]

RESIDUE: list[Residue] = [Residue(wrappers=("answer",))]
