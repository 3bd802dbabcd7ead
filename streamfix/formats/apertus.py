"""Swiss AI Apertus calls: the function name is the key,

``<|tools_prefix|>[{"NAME": {…arguments…}}, …]<|tools_suffix|>``

(llama.cpp ``common/chat.cpp`` Apertus handler and its tests, vLLM
``tool_parsers/apertus_tool_parser.py``, SGLang ``apertus2509_detector.py``).
The region ends where the list closes, taking ``<|tools_suffix|>`` right
after it. A reply that ends inside the list, after a call's arguments
closed (``[{"NAME": {…}}`` with no ``]``, or ``[{"NAME": {…}`` with neither
the call's ``}`` nor the ``]``), holds whole calls: the envelope's closers
are supplied (vLLM's ``test_incomplete_tool_call``), never the arguments'
own. A ``length`` cut there is still a call cut off (the detector does not
read it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Opt, Steps, loads, strip_trailer
from .base import EndFinder, Format, RawCall, Reasoning

OPEN = "<|tools_prefix|>"
CLOSE = "<|tools_suffix|>"


class Apertus(Format):
    name: ClassVar[str] = "apertus"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("[{"), Opt(CLOSE))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = strip_trailer(region[len(OPEN) :], CLOSE)
        value = loads(body)
        if value is None:
            value = _closed_envelope(body)
        items = value if isinstance(value, list) else [value]
        calls: list[RawCall] = []
        for item in items:
            if not isinstance(item, dict) or len(item) != 1:
                return None
            ((name, args),) = item.items()
            if not isinstance(name, str) or not name:
                return None
            calls.append(RawCall(name, args))
        return calls or None


#: What a reply ending inside the list may lack: the list's ``]``, or the
#: last call object's ``}`` and the ``]`` (the arguments must have closed).
_ENVELOPE_CLOSERS = ("]", "}]")


def _closed_envelope(body: str) -> object:
    """The list ``body`` begins, closed after its last whole call; None
    when that does not read (the arguments themselves were cut short)."""
    if not body.startswith("["):
        return None
    for tail in _ENVELOPE_CLOSERS:
        value = loads(body + tail)
        if value is not None:
            return value
    return None


FORMATS: list[Format] = [Apertus()]


# Apertus thinks in ``<|inner_prefix|>…<|inner_suffix|>`` blocks, which may
# come again between pieces of the answer; the template can open the first
# in the prompt (SGLang's ``apertus`` reasoning parser, llama.cpp's handler).
REASONING: list[Reasoning] = [
    Reasoning(
        "apertus",
        opens=("<|inner_prefix|>",),
        closes=("<|inner_suffix|>",),
        prefilled=True,
        repeats=True,
    )
]

#: Apertus 1.5's template never opens ``<|inner_prefix|>`` in the prompt:
#: with thinking on, the model writes it when it reasons and answers directly
#: otherwise (Ollama's Apertus 1.5 parser starts in the answer unless an
#: assistant prefill left the reasoning open).
PROMPT_NEVER_OPENS_MODELS = (r"apertus-?1\.5",)
