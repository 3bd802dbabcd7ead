"""Sber GigaChat 3 calls: one JSON object after the function-call marker,

``<|function_call|>{"name": "f", "arguments": {…}}`` or, as the chat template
writes it, ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "f", "arguments": {…}}``
(SGLang ``function_call/gigachat3_detector.py``, vLLM
``gigachat3_tool_parser.py``). No closing token (``</s>`` or the next
message's ``<|message_sep|>`` may follow): the region ends where the object
closes.

``<|message_sep|>`` ends the message before the call's, with the blank
line the template writes after it (one token, ``<|message_sep|>\\n\\n``, in
vLLM's tests): the region starts there when ``function call<|role_sep|>``
is what follows the blanks, so neither the token nor its blank line is left
in the content. Followed by anything else it is text (the residue stripper
removes the token).

GigaChat 3.5 writes DSML-like elements barred by its own token,
``<｜GCML｜tool_calls><｜GCML｜invoke name="f"><｜GCML｜parameter name="k"
string="true">v</｜GCML｜parameter></｜GCML｜invoke></｜GCML｜tool_calls>``
(vLLM ``tool_parsers/gigachat35_tool_parser.py``): a value is text unless
its ``string`` attribute is ``"false"`` (absent: text), then JSON (text
that is not JSON stays text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import Header, Json, Opt, Steps, Until, loads, strip_trailer, xml_calls
from .base import EndFinder, Format, RawCall, calls_from_value, lead_shape
from .scan import UntilMarker

MESSAGE_SEP = "<|message_sep|>"
ROLE_HEAD = "function call<|role_sep|>"
MARKERS = ("<|function_call|>", ROLE_HEAD)
EOS = "</s>"


class GigaChat(Format):
    name: ClassVar[str] = "gigachat"
    markers: ClassVar[tuple[str, ...]] = (*MARKERS, MESSAGE_SEP)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        value = (Json("{["), Opt(EOS, MESSAGE_SEP))
        if marker == MESSAGE_SEP:
            # Blanks, then the role header (``body_shape`` tells the rest
            # from a call), then the object.
            head = Header("f", r"\s", r"\s*", r"\s*")
            return Steps(len(marker), head, Until(ROLE_HEAD, limit=len(ROLE_HEAD)), *value)
        return Steps(len(marker), *value)

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        if region.startswith(MESSAGE_SEP):
            return lead_shape(region[len(MESSAGE_SEP) :], (ROLE_HEAD,), final)
        return True

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if region.startswith(MESSAGE_SEP):
            region = region[len(MESSAGE_SEP) :].lstrip()
        marker = next((m for m in MARKERS if region.startswith(m)), None)
        if marker is None:
            return None
        value = loads(strip_trailer(region[len(marker) :], EOS, MESSAGE_SEP))
        return calls_from_value(value) if value is not None else None


GCML = "｜GCML｜"
GCML_OPEN, GCML_CLOSE = f"<{GCML}tool_calls>", f"</{GCML}tool_calls>"

_INVOKE = re.compile(
    rf'\s*<{GCML}invoke\s+name\s*=\s*"([^"]+)"[^>]*>(.*?)</{GCML}invoke>\s*', re.DOTALL
)
_PARAM = re.compile(
    rf'<{GCML}parameter\s+name\s*=\s*"([^"]+)"([^>]*)>(.*?)</{GCML}parameter>', re.DOTALL
)
_NOT_STRING = re.compile(r'\bstring\s*=\s*"false"', re.IGNORECASE)


def _gcml_value(m: re.Match[str], name: str) -> Any:
    raw = m.group(3)
    if _NOT_STRING.search(m.group(2)) is None:
        return raw
    value = loads(raw)
    return value if value is not None or raw.strip() == "null" else raw


class GigaChat35(Format):
    name: ClassVar[str] = "gigachat35"
    markers: ClassVar[tuple[str, ...]] = (GCML_OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(GCML_CLOSE, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        return lead_shape(region[len(GCML_OPEN) :], (f"<{GCML}invoke",), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(GCML_OPEN):
            return None
        body = region[len(GCML_OPEN) :].rstrip().removesuffix(GCML_CLOSE)
        return xml_calls(body, _INVOKE, _PARAM, _gcml_value)


FORMATS: list[Format] = [GigaChat(), GigaChat35()]
