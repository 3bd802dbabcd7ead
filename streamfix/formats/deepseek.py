"""DeepSeek's call markup, every generation (tokens use FULLWIDTH VERTICAL
LINE ``｜`` and LOWER ONE EIGHTH BLOCK ``▁``):

- V3 / R1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME``
  ``\\n```json\\n{…}\\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>``
  (SGLang ``deepseekv3_detector.py``, vLLM ``deepseekv3_tool_parser.py``);
- V3.1 / V3.2-Exp chat template: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>``
  (SGLang ``deepseekv31_detector.py``);
- opener spellings llama.cpp accepts because R1 distills write them
  (``common/chat.cpp`` DeepSeek R1 handler): ``<｜tool_calls_begin｜>``,
  ``<｜tool calls begin｜>``, ``<｜tool\\_calls\\_begin｜>``, ``<｜tool▁calls｜>``;
  the same separators are accepted in every token here, and ASCII bars with
  ``▁`` (``<|tool▁calls▁begin|>``, a hand-written template's spelling in
  Ollama's tool-parser tests). A call without the
  section tokens (``<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>``) is one region.
- V3.2 DSML: ``<｜DSML｜function_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter
  name="k" string="true">v</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>``,
  ``string="false"`` values being JSON, or a JSON object as the invoke
  body; V4 spells the wrapper ``<｜DSML｜tool_calls>`` (SGLang
  ``deepseekv32_detector.py`` / ``deepseekv4_detector.py``, which also accept
  the tags without ``｜DSML｜`` and mixed). The bare ``<function_calls>``
  wrapper is shared with Olmo 3, whose body is one ``f(x=1)`` call per line
  (vLLM ``olmo3_tool_parser.py``): parsed here too. V4.1 puts a space after
  the bars and names the wrapper ``calls``: ``<｜DSML｜ calls><｜DSML｜ invoke
  name="NAME"><｜DSML｜ parameter name="k" string="true">v</｜DSML｜ parameter>…``
  (vLLM ``deepseekv41_engine_tool_parser.py`` and its engine tests); every
  spelling is accepted with every wrapper name. SGLang's V4 tests show a
  self-closing ``<｜DSML｜invoke name="x"/>`` for a call without arguments.
  A ``string="true"`` value is the text between the tags exactly (the
  encoder adds no layout around it: a trailing newline is data).
  A section cut off by the token limit inside its second call keeps the
  calls whose invoke closed before the cut (only those are whole).
- StepFun Step-3 uses the DeepSeek tokens (``<｜tool_calls_begin｜>`` spelling)
  around steptml XML: ``<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke
  name="NAME"><steptml:parameter name="k">v</steptml:parameter></steptml:invoke>``
  ``<｜tool_call_end｜>`` (SGLang ``step3_detector.py``); values are decoded
  as JSON unless the schema says string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import Header, Steps, Until, loads, python_calls, strip_value, typed_value, xml_calls
from .base import EndFinder, Format, RawCall, Reasoning, Residue
from .scan import UntilMarker

_SEPS = ("▁", "_", " ", "\\_")


def _spellings(*words: str) -> tuple[str, ...]:
    """The token in each spelling, and with ASCII bars as a template
    written by hand spells it (``<|tool▁calls▁begin|>``, Ollama's
    tool-parser tests): only with ``▁``, which no other family writes
    (Kimi's ``<|tool_call_begin|>`` is its own)."""
    return (
        *("<｜" + sep.join(words) + "｜>" for sep in _SEPS),
        "<|" + "▁".join(words) + "|>",
    )


CALLS_BEGIN = (*_spellings("tool", "calls", "begin"), "<｜tool▁calls｜>")
CALLS_END = _spellings("tool", "calls", "end")
CALL_BEGIN = _spellings("tool", "call", "begin")
CALL_END = _spellings("tool", "call", "end")
SEP = _spellings("tool", "sep")


def _alt(tokens: tuple[str, ...]) -> str:
    return "(?:" + "|".join(re.escape(t) for t in tokens) + ")"


_CALL = re.compile(_alt(CALL_BEGIN) + r"(.*?)(?:" + _alt(CALL_END) + r"|\Z)", re.DOTALL)
_SEP = re.compile(_alt(SEP))
_FENCE = re.compile(r"\A\s*```[a-zA-Z]*[ \t]*\n?(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)


def _unfence(s: str) -> str:
    m = _FENCE.match(s)
    return m.group(1) if m else s.strip()


_STEP_INVOKE = re.compile(
    r'<steptml:invoke\s+name\s*=\s*"([^"]+)"\s*>(.*?)(?:</steptml:invoke>|\Z)', re.DOTALL
)
_STEP_PARAM = re.compile(
    r'<steptml:parameter\s+name\s*=\s*"([^"]+)"\s*>(.*?)</steptml:parameter>', re.DOTALL
)


#: What may come before a Step-3 invoke inside its call tokens: nothing
#: (vLLM's tests), ``function<｜tool_sep｜>`` (SGLang's), or that and the
#: name on its own line (vLLM's ``function<｜tool_sep｜>NAME\n``).
_STEP_HEAD = re.compile(r"\s*(?:(?:function)?\s*" + _alt(SEP) + r"\s*(?:[\w.\-:/]+\s*)?)?")


def _step_call(body: str, tools: Mapping[str, ToolSpec]) -> RawCall | None:
    """A Step-3 call: one steptml invoke after its optional header. A
    string value keeps its blanks (they are data: an edit tool's exact
    match); other values are read as JSON around them."""

    def value(m: re.Match[str], name: str) -> Any:
        return typed_value(m.group(2), tools, name, m.group(1).strip())

    step = xml_calls(body, _STEP_INVOKE, _STEP_PARAM, value)
    return step[0] if step and len(step) == 1 else None


def _call(body: str, tools: Mapping[str, ToolSpec]) -> RawCall | None:
    invoke = body.find("<steptml:invoke")
    if invoke >= 0 and _STEP_HEAD.fullmatch(body, 0, invoke):
        return _step_call(body[invoke:], tools)
    parts = _SEP.split(body, maxsplit=1)
    if len(parts) != 2:
        return None
    head, rest = parts[0].strip(), parts[1]
    if head in ("function", "") and not rest.lstrip().startswith("{"):
        # V3: type, then the name on its own line, then fenced JSON.
        name, _, args = rest.lstrip().partition("\n")
        if "```" in name:
            name, _, tail = name.partition("```")
            args = "```" + tail + ("\n" + args if args else "")
        name = name.strip()
    else:
        name, args = head, rest
    if not name or any(c.isspace() for c in name):
        return None
    args = _unfence(args)
    return RawCall(name, args or None)


class ToolCalls(Format):
    """``<｜tool▁calls▁begin｜>`` sections and bare ``<｜tool▁call▁begin｜>`` calls."""

    name: ClassVar[str] = "deepseek"
    markers: ClassVar[tuple[str, ...]] = (*CALLS_BEGIN, *CALL_BEGIN)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        closes = CALL_END if marker in CALL_BEGIN else CALLS_END
        return UntilMarker(*closes, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        calls: list[RawCall] = []
        for m in _CALL.finditer(region):
            call = _call(m.group(1), tools)
            if call is None:
                return None
            calls.append(call)
        return calls or None


#: The bars around "DSML" as seen in the wild: the real token's fullwidth
#: bar, doubled, the double vertical line and ASCII (GenericAgent issue
#: #804 counts hundreds of leaked ``<‖DSML‖…>`` and ``<｜｜DSML｜｜…>``).
DSML_BARS = ("｜", "｜｜", "‖", "|")
_DS = "(?:(?:｜｜|｜|‖|\\|)DSML(?:｜｜|｜|‖|\\|) ?)?"
_WRAPPERS = ("function_calls", "tool_calls", "calls")
#: V4.1 writes a space after the bars (``<｜DSML｜ invoke``).
_PREFIXES = tuple(f"{b}DSML{b}{sp}" for b in DSML_BARS for sp in ("", " "))
DSML_OPEN = (*(f"<{p}{w}>" for p in _PREFIXES for w in _WRAPPERS), "<function_calls>")
DSML_CLOSE = (*(f"</{p}{w}>" for p in _PREFIXES for w in _WRAPPERS), "</function_calls>")
#: An invoke without its section wrapper (V4 at long context, vLLM issue
#: #48931; SGLang issue #40236): a region of its own, up to its close tag.
DSML_INVOKE = tuple(f"<{p}invoke " for p in _PREFIXES)
DSML_INVOKE_CLOSE = tuple(f"</{p}invoke>" for p in _PREFIXES)

_INVOKE = re.compile(
    rf'<{_DS}invoke\s+name\s*=\s*"([^"]+)"\s*>(.*?)(?:</{_DS}invoke>|\Z)', re.DOTALL
)
_SELF_CLOSING = re.compile(rf'(<{_DS}invoke\s+name\s*=\s*"[^"]+"\s*)/>')
#: Where an invoke ends: its close tag, or the end of a self-closing one.
_INVOKE_END = re.compile(rf'</{_DS}invoke>|<{_DS}invoke\s+name\s*=\s*"[^"]+"\s*/>')
_PARAM = re.compile(
    rf'<{_DS}parameter\s+name\s*=\s*"([^"]+)"(?:\s+string\s*=\s*"(\w+)")?\s*>'
    rf"(.*?)</{_DS}parameter>",
    re.DOTALL,
)


def _dsml_value(m: re.Match[str], name: str) -> Any:
    if m.group(2) == "true":
        return m.group(3)
    raw = strip_value(m.group(3))
    if m.group(2) == "false":
        value = loads(raw)
        if value is not None or raw.strip() == "null":
            return value
    return raw


def _whole_invokes(body: str) -> str:
    """``body`` (a section whose close never came) up to the end of its last
    whole invoke: an invoke the cut fell inside is not a call."""
    end = 0
    for m in _INVOKE_END.finditer(body):
        end = m.end()
    return body[:end]


def _dsml_calls(body: str, closes: tuple[str, ...] = ()) -> list[RawCall] | None:
    body = _SELF_CLOSING.sub(lambda m: m.group(1) + "></｜DSML｜invoke>", body)
    return xml_calls(body, _INVOKE, _PARAM, _dsml_value, closes)


_LEAD = r"\s*(?:[A-Za-z_][\w.]*)?"


class Dsml(Format):
    """V3.2 / V4 DSML invoke blocks and Olmo 3 ``<function_calls>`` lines."""

    name: ClassVar[str] = "deepseek_dsml"
    markers: ClassVar[tuple[str, ...]] = DSML_OPEN
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        if marker == "<function_calls>":
            # Not a special token: a tag also met in prose about tool use.
            # Its body must open with a tag or ``name(``, or it is text.
            return Steps(
                len(marker),
                Header("<(", r"\w.\s", _LEAD, _LEAD),
                Until(*DSML_CLOSE),
            )
        return UntilMarker(*DSML_CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        opener = next((o for o in DSML_OPEN if region.startswith(o)), None)
        if opener is None:
            return None
        body = region[len(opener) :]
        if "invoke" in body:
            if not body.rstrip().endswith(DSML_CLOSE):
                body = _whole_invokes(body)
            return _dsml_calls(body, DSML_CLOSE)
        if opener == "<function_calls>":
            for close in DSML_CLOSE:
                body = body.replace(close, "")
            return python_calls(body)
        return None


class DsmlInvoke(Format):
    """One ``<｜DSML｜invoke name=…>…</｜DSML｜invoke>`` without its wrapper.
    Only a closed invoke is a call (prose may mention the tag)."""

    name: ClassVar[str] = "deepseek_dsml"
    markers: ClassVar[tuple[str, ...]] = DSML_INVOKE
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(*DSML_INVOKE_CLOSE, skip=len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.rstrip().endswith(DSML_INVOKE_CLOSE):
            return None
        return _dsml_calls(region)


FORMATS: list[Format] = [ToolCalls(), Dsml(), DsmlInvoke()]

#: DeepSeek R1 and its distills reason by default (V3.1+ only when the
#: request turns thinking on).
REASONING_MODELS = (r"deepseek-r1", r"\br1\b", r"r1-distill", r"step-?3")

# StepFun Step-3 and 3.5 reason by default in ``<think>`` tags their
# template opens in the prompt, and think again after some answer text
# (vLLM ``reasoning/step3p5_reasoning_parser.py``): for a Step model, the
# sections repeat.
REASONING: list[Reasoning] = [
    Reasoning(
        "step3",
        opens=("<think>",),
        closes=("</think>",),
        prefilled=True,
        repeats=True,
        models=(r"step-?3",),
    )
]

#: DeepSeek R1 (0528 and later templates) and V4 in thinking mode open
#: ``<think>`` in the prompt.
PROMPT_OPENS_MODELS = (r"deepseek-r1", r"deepseek-v4")

#: DeepSeek V4's wrapper-less ``<invoke>``, and the closing DSML tags in
#: every bar spelling (``</｜DSML｜tool_calls>``), held while they may still
#: become one.
_BAR = r"(?:｜{1,2}|‖|\|)"
RESIDUE: list[Residue] = [
    Residue(
        wrappers=("invoke",),
        tokens=(r"</" + _BAR + r"DSML" + _BAR + r"[a-z_]{1,24}>",),
        partials=(r"</" + _BAR + r"[^\s<>]{0,40}\Z",),
        bars=("｜",),  # any <｜…｜> token is a special token
    )
]
