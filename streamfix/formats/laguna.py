"""Poolside Laguna: GLM's calls, sometimes in ``<user>`` tags; its reasoning.

Laguna's template asks for GLM's call shape, ``<tool_call>NAME\\n<arg_key>k
</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>`` (``glm.py``); the model
also writes a JSON object there (``hermes_tags.py``) or alone
(``bare_json.py``). And it sometimes writes the same call between
``<user>`` and ``</user>`` (Ollama ``model/parsers/laguna.go`` reads them
so): ``<user>NAME\\n<arg_key>…</user>`` or ``<user>\\n{"name": …,
"arguments": …}\\n</user>``. ``<user>`` also wraps a user's words in
transcripts and prompts, so only a body that is a call to an offered tool
is one (``body_shape``: an offered tool's name, or a JSON object, right
after the tag); anything else is text, as written (``<user>hello</user>``).

The template opens ``<think>`` in the prompt with thinking on and writes
``</think>`` there with thinking off (its default): the newline the model
then begins its reply with is layout (``Reasoning.blank_first``), and a
``</think>`` it writes again there is markup (``Reasoning.closed_off``):
both dropped, as Ollama's parser drops them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from .base import SHAPE_MAX, EndFinder, Format, RawCall, Reasoning, resolve_name
from .glm import kv_calls
from .hermes_tags import json_calls
from .scan import UntilMarker

OPEN = "<user>"
CLOSE = "</user>"

#: A tool's name as it may stand right after ``<user>``.
_NAME = re.compile(r"[\w.:/-]+")


class LagunaUser(Format):
    name: ClassVar[str] = "laguna_user"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    #: ``<user>`` is also a transcript's tag: the head decides at once
    #: (``body_shape``, asked of wrapped formats only), and a call to a tool
    #: not offered is text, as written.
    wrapped: ClassVar[bool] = True
    unoffered_is_markup: ClassVar[bool | None] = False
    priority: ClassVar[int] = 120

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(CLOSE, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        """An offered tool's name (then blanks or a tag), or a JSON object,
        right after the tag; anything else is a user's words."""
        s = region[len(OPEN) :].lstrip()
        if not s:
            return False if final else None
        if s[0] == "{":
            return True
        m = _NAME.match(s)
        if m is None:
            return False
        if m.end() == len(s) and not final:
            return None if m.end() <= SHAPE_MAX else False  # the name may go on
        rest = s[m.end() :]
        return resolve_name(m.group(), tools) is not None and (not rest or rest[0] in "\n <{")

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip().removesuffix(CLOSE).strip()
        if body.startswith("{"):
            return json_calls(body, siblings=False)
        m = _NAME.match(body)
        if m is None or resolve_name(m.group(), tools) is None:
            return None
        return kv_calls(body, tools)


FORMATS: list[Format] = [LagunaUser()]

REASONING: list[Reasoning] = [
    Reasoning(
        "laguna",
        opens=("<think>",),
        closes=("</think>",),
        prefilled=True,
        blank_first=True,
        closed_off=True,
        models=(r"laguna",),
    ),
]
