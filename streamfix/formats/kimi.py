"""Moonshot Kimi K2 / K2.5 / K2-Thinking call sections:

``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0``
``<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>``

The call id is ``functions.NAME:IDX`` (the ``functions.`` prefix is left
for the detector to resolve; some fine-tunes drop it). vLLM
``tool_parsers/kimi_k2_tool_parser.py`` also accepts the singular
``<|tool_call_section_begin|>`` / ``<|tool_call_section_end|>`` spelling the
model sometimes writes; SGLang ``kimik2_detector.py`` and llama.cpp's Kimi
K2 handler parse the same tokens. A call written without the section
tokens (``<|tool_call_begin|>…<|tool_call_end|>``) is a region of its own.
Text inside a section but outside its calls is dropped (vLLM's
``test_kimi_k2_tool_parser.py`` noise test). A marker token written inside
a JSON string of the arguments is text (Kimi K2.6's template writes the
marker tokens there): the ends are found outside strings.
Also seen in users' reports and parsed: a section without per-call tokens
(one call), a call without ``<|tool_call_argument_begin|>``
(``functions.f:0 {…}``, vLLM PR #31207) and tagged JSON
(``<|tool_call_begin|>{"name": …}<|tool_call_end|>``, hermes-agent PR #29735).
A call id that is a bare counter (``<|tool_call_begin|>0 <|tool_call_argument_begin|>…``,
vLLM's Kimi K2 tests) names no function: the call is the one tool offered's,
or the one tool whose parameters its arguments fit; else it is unreadable.

Kimi K3 replaced these with "XTML" channels (SGLang ``kimik3_detector.py`` /
``kimik3_format.py``; vLLM ``kimi_k3_tool_parser.py``):
``<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>``
``<|open|>argument key="k" type="string"<|sep|>raw text<|close|>argument<|sep|>``
``<|close|>call<|sep|><|close|>tools<|sep|>``; ``type="string"`` values are
raw text, other types JSON; attribute values use ``&quot;``/``&amp;``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from ..jsoncodec import loads as _json
from ..spec import ToolSpec
from ._family import contiguous, loads
from .base import EndFinder, Format, RawCall, Reasoning, calls_from_value
from .scan import END, JSON_ESCAPE, Peek, Structural, UntilMarker, literal

SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"

_INDEX = re.compile(r":\d+\Z")
_COUNTER = re.compile(r"\d+\Z")
# A call written without <|tool_call_argument_begin|>: "functions.f:0 {…}".
_NAME_ARGS = re.compile(r"\s*([\w.\-]+(?::\d+)?)\s*(\{.*\})\s*\Z", re.DOTALL)


#: The end rules: a call ends at ``<|tool_call_end|>``, a section at its end
#: token, but not inside a JSON string of the arguments (Kimi K2.6's
#: template writes the marker tokens there too).
_IN_STRING: list[tuple[str, str]] = [(JSON_ESCAPE, "str"), (literal('"'), "json")]
_SECTION_ENDS = [(literal(t), END) for t in SECTION_END]
SECTION_TABLE: dict[str, list[tuple[str, str]] | Peek] = {
    "out": [(literal(ARG_BEGIN), "json"), *_SECTION_ENDS],
    "json": [(literal('"'), "str"), (literal(CALL_END), "out"), *_SECTION_ENDS],
    "str": _IN_STRING,
}
CALL_TABLE: dict[str, list[tuple[str, str]] | Peek] = {
    "out": [(literal(ARG_BEGIN), "json"), (literal(CALL_END), END)],
    "json": [(literal('"'), "str"), (literal(CALL_END), END)],
    "str": _IN_STRING,
}
#: A call's body within a region: as ``CALL_TABLE``, and a next call's
#: ``<|tool_call_begin|>`` outside a string ends it too (the model left out
#: ``<|tool_call_end|>``; llama.cpp's Kimi K2 tests read both calls).
BODY_TABLE: dict[str, list[tuple[str, str]] | Peek] = {
    **CALL_TABLE,
    "json": [(literal('"'), "str"), (literal(CALL_END), END), (literal(CALL_BEGIN), END)],
}


def _bodies(region: str) -> list[str]:
    """The body of each call in a region, each call's end found by
    ``BODY_TABLE`` (a ``<|tool_call_end|>`` in a string is text). Text
    between calls is dropped (vLLM's Kimi K2 parser drops it too)."""
    bodies: list[str] = []
    pos = 0
    while True:
        start = region.find(CALL_BEGIN, pos)
        if start < 0:
            return bodies
        rest = region[start:]
        end = Structural(len(CALL_BEGIN), "out", BODY_TABLE).feed(rest)
        if end is None or end < 0:
            body = rest[len(CALL_BEGIN) :]
            for t in SECTION_END:
                body = body.removesuffix(t)
            bodies.append(body)
            return bodies
        if rest.startswith(CALL_BEGIN, end - len(CALL_BEGIN)):  # the next call began
            end -= len(CALL_BEGIN)
            bodies.append(rest[len(CALL_BEGIN) : end])
        else:
            bodies.append(rest[len(CALL_BEGIN) : end - len(CALL_END)])
        pos = start + end


def _fitted(args: str, tools: Mapping[str, ToolSpec]) -> str | None:
    """The tool a call with no name is for: the one offered, else the one
    whose parameters the arguments fit (every key declared, every
    required one given); None when no single tool is."""
    if len(tools) == 1:
        return next(iter(tools))
    value = loads(args)
    if not isinstance(value, dict):
        return None
    keys = set(value)
    fits = []
    for name, spec in tools.items():
        props = spec.parameters.get("properties")
        required = spec.parameters.get("required")
        if not isinstance(required, list):
            required = []
        needed = {r for r in required if isinstance(r, str)}
        if isinstance(props, dict) and keys <= set(props) and needed <= keys:
            fits.append(name)
    return fits[0] if len(fits) == 1 else None


def _call(body: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    head, sep, args = body.partition(ARG_BEGIN)
    if sep:
        name = _INDEX.sub("", head.strip())
        if _COUNTER.match(name):
            name = _fitted(args, tools) or ""
        if not name or any(c.isspace() for c in name):
            return None
        return [RawCall(name, args.strip() or None)]
    s = body.strip()
    if s.startswith(("{", "[")):
        value = loads(s)
        return calls_from_value(value) if value is not None else None
    m = _NAME_ARGS.match(body)
    if m is None:
        return None
    return [RawCall(_INDEX.sub("", m.group(1)), m.group(2))]


class Kimi(Format):
    name: ClassVar[str] = "kimi"
    layout_before: ClassVar[bool] = False  # vLLM's kimi_k2 parser keeps "text " before a call
    markers: ClassVar[tuple[str, ...]] = (*SECTION_BEGIN, CALL_BEGIN)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        table = CALL_TABLE if marker == CALL_BEGIN else SECTION_TABLE
        return Structural(len(marker), "out", table)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if CALL_BEGIN not in region:
            # A section without per-call tokens holds one call.
            body = region
            for t in (*SECTION_BEGIN, *SECTION_END):
                body = body.replace(t, "")
            return _call(body, tools)
        calls: list[RawCall] = []
        for body in _bodies(region):
            got = _call(body, tools)
            if got is None:
                return None
            calls.extend(got)
        return calls or None


K3_TOOLS_OPEN = "<|open|>tools<|sep|>"
K3_TOOLS_CLOSE = "<|close|>tools<|sep|>"
K3_CALL_OPEN = "<|open|>call "
K3_CALL_CLOSE = "<|close|>call<|sep|>"

_K3_CALL = re.compile(
    r"<\|open\|>call\s+((?:(?!<\|sep\|>).)*?)<\|sep\|>(.*?)<\|close\|>call<\|sep\|>", re.DOTALL
)
#: An argument's close counts when the next argument or the call's close
#: follows it: the value's text may hold the same characters (K3 encodes
#: argument text as ordinary tokens, ``encoding_k3.py``).
_K3_ARG = re.compile(
    r"<\|open\|>argument\s+((?:(?!<\|sep\|>).)*?)<\|sep\|>(.*?)<\|close\|>argument<\|sep\|>"
    r"(?=\s*(?:<\|open\|>argument|<\|close\|>call<\|sep\|>|\Z))",
    re.DOTALL,
)
_K3_ATTR = re.compile(r'(\w+)="([^"]*)"')


def _attrs(text: str) -> dict[str, str]:
    return {k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in _K3_ATTR.findall(text)}


class KimiK3(Format):
    name: ClassVar[str] = "kimi_k3"
    markers: ClassVar[tuple[str, ...]] = (K3_TOOLS_OPEN, K3_CALL_OPEN)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        close = K3_CALL_CLOSE if marker == K3_CALL_OPEN else K3_TOOLS_CLOSE
        return UntilMarker(close, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        found = contiguous(_K3_CALL, region, (K3_TOOLS_OPEN, K3_TOOLS_CLOSE))
        if not found:
            return None
        calls: list[RawCall] = []
        for m in found:
            name = _attrs(m.group(1)).get("tool", "")
            arg_matches = contiguous(_K3_ARG, m.group(2))
            if not name or arg_matches is None:
                return None
            args: dict[str, Any] = {}
            for a in arg_matches:
                attrs = _attrs(a.group(1))
                key, raw = attrs.get("key", ""), a.group(2)
                if attrs.get("type", "string") == "string":
                    args[key] = raw
                else:
                    try:
                        args[key] = _json(raw)
                    except orjson.JSONDecodeError:
                        args[key] = raw
            calls.append(RawCall(name, args))
        return calls


FORMATS: list[Format] = [Kimi(), KimiK3()]


# Kimi K3's sections (vLLM ``reasoning/kimi_k3_reasoning_parser.py``):
# ``<|open|>think<|sep|>…<|close|>think<|sep|>`` is reasoning, the template
# opens it in the prompt when thinking is on; the answer is framed by
# ``<|open|>response<|sep|>…<|close|>response<|sep|>`` and the message
# ends with ``<|close|>message<|sep|>``. Kimi K2.x uses ``<think>`` tags.
REASONING: list[Reasoning] = [
    Reasoning(
        "kimi_k3",
        opens=("<|open|>think<|sep|>",),
        closes=("<|close|>think<|sep|>",),
        answer=('<|open|>message role="assistant"<|sep|>', "<|open|>response<|sep|>"),
        ends=("<|close|>response<|sep|>", "<|close|>message<|sep|>"),
        prefilled=True,
    ),
    # Kimi-VL "Thinking" writes its own brackets, ``◁think▷…◁/think▷``
    # (vLLM and SGLang's ``kimi`` reasoning parser).
    Reasoning("kimi_vl", opens=("◁think▷",), closes=("◁/think▷",)),
]

#: Kimi K3 and K2.5 reason by default (vLLM's ``kimi_k25`` parser forces
#: thinking on; K2.6 only when the request turns it on).
REASONING_MODELS = (r"kimi-k3", r"kimi-k2\.5")
#: K2.5's template opens ``<think>`` in the prompt (the reply starts inside
#: it: vLLM's ``kimi_k25`` parser reads all before ``</think>`` as
#: reasoning), so a call section may end that reasoning with no close.
PROMPT_OPENS_MODELS = (r"kimi-k2\.5",)
