"""Sber GigaChat 3 calls: one JSON object after the function-call marker,

``<|function_call|>{"name": "f", "arguments": {…}}`` or, as the chat template
writes it, ``<|message_sep|>function call<|role_sep|>\\n{"name": "f", "arguments": {…}}``
(SGLang ``function_call/gigachat3_detector.py``, vLLM
``gigachat3_tool_parser.py``). No closing token (``</s>`` may follow):
the region ends where the object closes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Opt, Steps, loads, strip_trailer
from .base import EndFinder, Format, RawCall, calls_from_value

MARKERS = ("<|function_call|>", "function call<|role_sep|>")
EOS = "</s>"


class GigaChat(Format):
    name: ClassVar[str] = "gigachat"
    markers: ClassVar[tuple[str, ...]] = MARKERS
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("{["), Opt(EOS))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        marker = next((m for m in MARKERS if region.startswith(m)), None)
        if marker is None:
            return None
        value = loads(strip_trailer(region[len(marker) :], EOS))
        return calls_from_value(value) if value is not None else None


FORMATS: list[Format] = [GigaChat()]
