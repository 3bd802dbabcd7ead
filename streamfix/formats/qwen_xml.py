"""XML function syntax (Qwen3-Coder, and models that copy it):

    <tool_call>
    <function=create_ticket>
    <parameter=title>
    Printer on fire
    </parameter>
    </function>
    </tool_call>

with or without the ``<tool_call>`` wrapper. Values are text; one leading
and one trailing newline around a value are layout (vLLM
``qwen3coder_tool_parser`` strips exactly those), and so is the indentation
of indented markup (``        </parameter>``) on each line of the value;
the detector converts values by the parameter's schema type
(``toolargs.coerce``), so ``1`` becomes an integer for an ``integer``
parameter and a ``string`` parameter keeps
text that looks like JSON. A closing ``</parameter>`` or ``</function>``
that never came is tolerated when the structure is otherwise clear
(llama.cpp's Qwen3-Coder parser does the same at end of generation).

Values are read by the structure, not by the first closing tag: a
``</parameter>``, ``</function>`` or ``</tool_call>`` written inside a value
is text (the tokenizer writes ``<tool_call>`` tokens there too); only a
``</parameter>`` followed by the next parameter, ``</function>`` or
``</tool_call>`` ends a value (vLLM ``qwen3coder_tool_parser.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..spec import ToolSpec
from ._family import union_value
from .base import SHAPE_MAX, EndFinder, Format, RawCall, Residue, lead_shape
from .scan import (
    END,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    Peek,
    Structural,
    literal,
    tool_call_end,
)

_FUNC_OPEN = re.compile(r"<function=([^>\n]+)>")
_PARAM_OPEN = re.compile(r"<parameter=([^>\n]+)>")
_BLANKS = re.compile(r"\s*")
#: Where a parameter's value ends: a ``</parameter>`` followed by what may
#: follow a value (vLLM ``qwen3coder_tool_parser.py`` ``_find_true_param_end``:
#: a close inside the value is text), else (the close lost) the next
#: ``<parameter=`` at a line start, or the function's last ``</function>``.
#: The match's ``closed`` group is set only for a real ``</parameter>``.
_VALUE_END = re.compile(
    r"(?P<closed></parameter>)(?=\s*(?:<parameter=|</function>|<function=|\Z))"
    r"|(?<=\n)(?=<parameter=)"
    r"|(?=</function>\s*(?:<function=|\Z))"
    r"|\Z"
)
FUNCTION_END = "</function>"


def _value(raw: str) -> str:
    nl = raw.rfind("\n")
    indent = raw[nl + 1 :]
    if nl >= 0 and indent and not indent.strip(" \t"):
        # The markup is indented (``        </parameter>``): that indent
        # is layout on each of the value's lines (SGLang's Qwen3-Coder
        # tests); the value's own indentation past it stays.
        lines = raw[:nl].removeprefix("\n").split("\n")
        if all(ln.startswith(indent) or not ln.strip() for ln in lines):
            return "\n".join(ln[len(indent) :] for ln in lines)
        if raw.startswith("\n"):
            # A value written at the margin (code) on the lines after its
            # tag keeps them as they are; the blanks before the indented
            # close tag are still the tag's (LocalAI's Qwen3-Coder tests).
            return "\n".join(lines)
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def _walk(body: str) -> tuple[list[RawCall] | None, bool]:
    """The ``<function=…>`` calls in ``body`` read by their structure, and
    whether every parameter and function closed. None when anything but
    blanks stands between the elements."""
    calls: list[RawCall] = []
    whole = True
    pos, n = 0, len(body)
    while True:
        pos = _skip(body, pos)
        if pos >= n:
            break
        m = _FUNC_OPEN.match(body, pos)
        if m is None:
            return None, False
        args: dict[str, Any] = {}
        pos = m.end()
        while True:
            pos = _skip(body, pos)
            if pos >= n:
                whole = False
                break
            if body.startswith(FUNCTION_END, pos):
                pos += len(FUNCTION_END)
                break
            if _FUNC_OPEN.match(body, pos):
                whole = False
                break
            p = _PARAM_OPEN.match(body, pos)
            if p is None:
                return None, False
            e = _VALUE_END.search(body, p.end())
            assert e is not None  # ``\Z`` always matches
            whole = whole and e.group("closed") is not None
            args[p.group(1).strip()] = _value(body[p.end() : e.start()])
            pos = e.end()
        calls.append(RawCall(m.group(1).strip(), args))
    return calls or None, whole


def _skip(body: str, pos: int) -> int:
    m = _BLANKS.match(body, pos)
    assert m is not None
    return m.end()


def xml_calls(body: str) -> list[RawCall] | None:
    """Every ``<function=…>`` in ``body``; None if there is none or if text
    other than blanks stands between them."""
    return _walk(body)[0]


#: The end rule of a bare ``<function=…>`` region: its ``</function>``
#: outside parameter values (see ``scan.TOOL_CALL_TABLE`` for values); a
#: value whose ``</parameter>`` was lost ends at ``</function>`` on a line
#: of its own.
FUNCTION_TABLE: dict[str, list[tuple[str, str]] | Peek] = {
    "xml": [(literal("<parameter="), "xml_value"), (literal(FUNCTION_END), END)],
    "xml_value": [
        (literal("</parameter>"), "xml_after_value"),
        (literal("\n" + FUNCTION_END), END),
    ],
    "xml_after_value": Peek(
        "xml_value",
        ("<parameter=", "xml", False),
        (FUNCTION_END, "xml", False),
    ),
}


FUNCTION_OPEN = "<function="


def function_shape(region: str, starts: tuple[str, ...], final: bool) -> bool | None:
    """``Format.body_shape`` of a ``<function=NAME>`` region: a name with no
    blanks closed by ``>``, then (after blanks) one of ``starts``. "Models
    write <function=NAME> followed by JSON" is prose."""
    head = region[len(FUNCTION_OPEN) :]
    gt = head.find(">")
    name = head if gt < 0 else head[:gt]
    if not name and gt == 0:
        return False
    if any(c.isspace() or c in "<{" for c in name):
        return False
    if gt < 0:
        return False if final or len(name) > SHAPE_MAX else None
    return lead_shape(head[gt + 1 :], starts, final)


def _body(region: str) -> str | None:
    body = region
    if body.startswith(TOOL_CALL_OPEN):
        body = body[len(TOOL_CALL_OPEN) :].rstrip().removesuffix(TOOL_CALL_CLOSE)
    return body


class QwenXml(Format):
    name = "qwen_xml"
    markers = (TOOL_CALL_OPEN, "<function=")
    priority = 20

    def end_finder(self, marker: str) -> EndFinder:
        if marker == TOOL_CALL_OPEN:
            return tool_call_end(len(marker))
        return Structural(len(marker), "xml", FUNCTION_TABLE)

    def closer_after(self, marker: str) -> str:
        # The model left out the opening <tool_call> but not the closing one.
        return TOOL_CALL_CLOSE if marker == FUNCTION_OPEN else ""

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        if region.startswith(TOOL_CALL_OPEN):
            return lead_shape(region[len(TOOL_CALL_OPEN) :], (FUNCTION_OPEN,), final)
        return function_shape(region, ("<parameter=", FUNCTION_END), final)

    def is_complete(self, region: str) -> bool:
        body = _body(region)
        return body is not None and _walk(body)[1]

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        body = _body(region)
        calls = None if body is None else xml_calls(body)
        for c in calls or ():
            if isinstance(c.arguments, dict):  # a string-or-other parameter's JSON
                for k, v in c.arguments.items():
                    c.arguments[k] = union_value(v, tools, c.name, k)
        return calls


FORMATS: list[Format] = [QwenXml()]

#: Qwen3 reasons by default (hybrid thinking), not its Coder and
#: Instruct-2507 releases (the size may stand in a tag: Ollama's
#: ``qwen3:4b-instruct-2507``, ``qwen3-vl:8b-instruct``).
REASONING_MODELS = (r"qwen3(?![\w.]*-coder)(?![\w.:-]*instruct)",)

#: Qwen3-Coder's (and Llama's) ``<function=…>`` and ``<parameter=…>`` tags.
RESIDUE: list[Residue] = [Residue(wrappers=("function", "parameter"))]

#: Qwen3.5 and later, and the Qwen3 "Thinking" releases (also as an Ollama
#: tag: ``qwen3-vl:8b-thinking``): the template opens ``<think>`` in the
#: prompt (llama.cpp's Qwen3.5 handler).
PROMPT_OPENS_MODELS = (r"qwen3\.[5-9]", r"qwen[4-9]", r"qwen3[\w.:-]*thinking")
