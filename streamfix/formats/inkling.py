"""Thinking Machines' Inkling calls: messages framed by special tokens.

A reply is a run of messages, each ``<|message_model|>`` then a content
token, closed by ``<|end_message|>``: ``<|content_text|>`` for text to the
user, ``<|content_thinking|>`` for reasoning, and for a call the tool's
name, ``<|content_invoke_tool_json|>`` and a JSON object with ``name`` and
``args``::

    <|message_model|>weather<|content_invoke_tool_json|>{"name":"weather","args":{"city":"SF"}}<|end_message|>

(SGLang ``function_call/inkling_detector.py`` and its tests.) A call's
header must name the payload's tool (SGLang drops a call whose names
differ); a frame may show no header. A region ends with its JSON: the
``<|end_message|>`` after it (missing in a truncated reply), like any
control token left between messages, is for the residue stripper.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Header, Json, Steps, loads
from .base import EndFinder, Format, RawCall, Reasoning, call_from_object

MESSAGE = "<|message_model|>"
INVOKE = "<|content_invoke_tool_json|>"
END = "<|end_message|>"
THINKING = "<|content_thinking|>"
TEXT = "<|content_text|>"

_NAME = r"[A-Za-z_][\w.\-]*"
#: A call's header: the tool's name, then the invoke token.
_HEAD = re.compile(f"({_NAME}){re.escape(INVOKE)}\\s*")
#: What a header may be while it is still arriving (for ``Header``).
_HEAD_PREFIX = (
    r"[\w.\-]*(?:" + "|".join(re.escape(INVOKE[:i]) for i in range(len(INVOKE), -1, -1)) + r")\s*"
)


class Inkling(Format):
    name: ClassVar[str] = "inkling"
    markers: ClassVar[tuple[str, ...]] = (MESSAGE, INVOKE)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        if marker == MESSAGE:
            head = Header("{", r"\w.\-<|>\s", _HEAD.pattern, _HEAD_PREFIX, limit=128)
            return Steps(len(marker), head, Json("{"))
        return Steps(len(marker), Json("{"))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        header: str | None = None
        body = region.removesuffix(END)
        if body.startswith(MESSAGE):
            m = _HEAD.match(body, len(MESSAGE))
            if m is None:
                return None
            header, body = m.group(1), body[m.end() :]
        elif body.startswith(INVOKE):
            body = body[len(INVOKE) :]
        else:
            return None
        call = call_from_object(loads(body))
        if call is None or (header is not None and call.name != header):
            return None
        return [call]


FORMATS: list[Format] = [Inkling()]

#: The thinking message: its header opens reasoning, ``<|end_message|>``
#: closes it; the text message's header is the answer's.
REASONING: list[Reasoning] = [
    Reasoning(
        "inkling",
        opens=(MESSAGE + THINKING,),
        closes=(END,),
        answer=(MESSAGE + TEXT,),
        models=(r"inkling",),
    )
]
