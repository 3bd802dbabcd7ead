"""OpenAI gpt-oss "Harmony" calls, as a backend without a Harmony parser
sends them in ``content``.

A call is a commentary (sometimes, wrongly, analysis) message addressed to
a function (OpenAI harmony cookbook, "Function calling"; vLLM
``tool_parsers/openai_tool_parser.py``, SGLang ``gpt_oss_detector.py``):

- ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>``
- the same after ``<|start|>assistant``, and with the recipient in the
  role header: ``<|start|>assistant to=functions.NAME<|channel|>commentary json``
  ``<|message|>{…}<|call|>``
- without ``<|constrain|>`` (``…to=functions.NAME<|message|>{…}``).

The model sometimes glues the content type to the name
(``to=functions.shelljson<|message|>``, llama.cpp PR #15158): a name ending
in ``json`` that is not an offered tool loses that suffix when what is left
is one.

``<|call|>`` is a stop token, so most engines never send it: the region
ends where the JSON closes, taking a ``<|call|>`` right after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import MAX_HEADER_CHARS, Json, Opt, Steps, Until, strip_trailer
from .base import EndFinder, Format, RawCall, Reasoning

MESSAGE = "<|message|>"
CALL = "<|call|>"

_RECIPIENT = re.compile(r"to=([^\s<]+)")


class Harmony(Format):
    name: ClassVar[str] = "harmony"
    markers: ClassVar[tuple[str, ...]] = (
        "<|channel|>commentary to=",
        "<|channel|>analysis to=",
        "<|start|>assistant to=",
        "<|start|>assistant<|channel|>commentary to=",
        "<|start|>assistant<|channel|>analysis to=",
    )
    #: The first message's ``<|start|>assistant`` is in the prompt, so a
    #: reply that is a call with the recipient in the role header starts
    #: `` to=functions.NAME<|channel|>commentary …``.
    leading: ClassVar[tuple[str, ...]] = ("to=functions.",)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Until(MESSAGE, limit=MAX_HEADER_CHARS), Json("{["), Opt(CALL))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        head, sep, body = region.partition(MESSAGE)
        m = _RECIPIENT.search(head)
        if not sep or m is None:
            return None
        args = strip_trailer(body, CALL)
        if not args.startswith("{"):
            return None
        return [RawCall(_unglue(m.group(1), tools), args)]


def _unglue(name: str, tools: Mapping[str, ToolSpec]) -> str:
    bare = name.rsplit(".", 1)[-1]
    if bare not in tools and bare.endswith("json") and bare[:-4] in tools:
        return name[:-4]
    return name


FORMATS: list[Format] = [Harmony()]


# Harmony's channels (the openai/harmony format documentation; vLLM
# ``reasoning/gptoss_reasoning_parser.py``): ``analysis`` is reasoning and
# ends at ``<|end|>``; ``final`` is the answer; a ``commentary`` message with
# no recipient is a preamble the user sees (content); one addressed
# ``to=functions.NAME`` is a call (``Harmony`` above). The first message's
# ``<|start|>assistant`` is in the prompt; later ones repeat it.
REASONING: list[Reasoning] = [
    Reasoning(
        "harmony",
        opens=(
            "<|channel|>analysis<|message|>",
            "<|start|>assistant<|channel|>analysis<|message|>",
        ),
        closes=("<|end|>",),
        answer=(
            "<|channel|>final<|message|>",
            "<|start|>assistant<|channel|>final<|message|>",
            "<|channel|>commentary<|message|>",
            "<|start|>assistant<|channel|>commentary<|message|>",
        ),
        # <|end|> and <|return|> are special tokens the residue stripper
        # removes anyway.
        leading=(
            "<|channel|>analysis<|message|>",
            "<|channel|>final<|message|>",
            "<|channel|>commentary<|message|>",
        ),
        repeats=True,
        # Calls are commentary messages to=functions.X: the final channel
        # and a preamble hold text only (JSON there is the answer).
        calls_apart=True,
    )
]

#: gpt-oss always writes an analysis channel.
REASONING_MODELS = (r"gpt-oss",)
