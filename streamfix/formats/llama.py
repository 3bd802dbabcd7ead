"""Meta Llama's own call markers (the bare JSON and bare ``[f(x=1)]``
shapes they also write belong to the core bare_json/pythonic formats).

- Llama 3.1/3.2/3.3 ``<|python_tag|>{"name": "f", "parameters": {...}}``,
  optionally closed by ``<|eom_id|>`` (a stop token, usually not sent);
  Llama 3.2 separates several calls with ``;`` (vLLM's parser splits them),
  or writes ``<|python_tag|>`` again before each (SGLang reads both);
  ``arguments`` for ``parameters`` and a list of calls also occur; the
  built-in tool form ``<|python_tag|>brave_search.call(query="x")`` too
  (vLLM ``tool_parsers/llama_tool_parser.py``, SGLang
  ``function_call/llama32_detector.py``, Meta's llama3.1 prompt format doc).
- Llama 3.1 custom-tool form ``<function=f>{"k": "v"}</function>``
  (Meta's prompt-format doc; also Functionary v3.1). ``<function=`` is
  shared with the core Qwen3-Coder XML format, so this one uses the same
  end rule (``</function>``) and only parses a JSON body.
- Llama 4 ``<|python_start|>[f(x=1), g()]<|python_end|>``: pythonic calls
  in special tokens (vLLM ``llama4_pythonic_tool_parser.py`` strips the
  two tokens); the bare ``[f(…)]`` list is the core pythonic format's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, More, Opt, Steps, loads, python_calls, strip_trailer
from .base import ABORT, EndFinder, Format, RawCall, Residue, calls_from_value
from .qwen_xml import function_shape
from .scan import UntilMarker, split_values

PYTHON_TAG = "<|python_tag|>"
EOM = "<|eom_id|>"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
FUNCTION = "<function="
FUNCTION_END = "</function>"


class _Repeats(More):
    """After a call: further calls joined by ``;`` or each after its own
    ``<|python_tag|>``, then an optional ``<|eom_id|>`` that ends the
    region. A token broken off halfway is swallowed with the call, as
    ``Opt`` does, so the end does not depend on where the text was split."""

    __slots__ = ("_got",)

    def __init__(self) -> None:
        super().__init__(";")
        self._got = ""  # a token's characters matched so far

    def scan(self, text: str, start: int) -> int | None:
        i, n = start, len(text)
        while i < n:
            if self._bal is not None or self._after_sep:
                r = super().scan(text, i)
                if r is None or r == ABORT:
                    return r
                if self._bal is None and not self._after_sep and r > i:
                    i = r  # a value read: go on after it
                    continue
                if r == i and not self._after_sep:
                    return r
                i = r
                continue
            got = self._got + text[i]
            if got == PYTHON_TAG:
                self._got = ""
                self._after_sep = True
            elif got == EOM:
                return i + 1
            elif PYTHON_TAG.startswith(got) or EOM.startswith(got):
                self._got = got
            elif self._got:
                return i  # a broken token: swallowed
            elif text[i] == ";":
                self._after_sep = True
            else:
                return i
            i += 1
        return None


class PythonTag(Format):
    name: ClassVar[str] = "llama"
    markers: ClassVar[tuple[str, ...]] = (PYTHON_TAG,)
    layout_before: ClassVar[bool] = False  # SGLang's llama3 detector keeps "text "
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("{[", call=True), _Repeats())

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(PYTHON_TAG):
            return None
        body = strip_trailer(region[len(PYTHON_TAG) :], EOM).rstrip(";").rstrip()
        if body[:1] in ("{", "[") and PYTHON_TAG in body:
            body = body.replace(PYTHON_TAG, ";")
        if body[:1] in ("{", "["):
            values = split_values(body.replace(";", " ")) if ";" in body else [body]
            if not values:
                return None
            calls: list[RawCall] = []
            for v in values:
                one = calls_from_value(loads(v))
                if one is None:
                    return None
                calls.extend(one)
            return calls
        # Built-in tool: ``name.call(k=v)``.
        code = python_calls(body)
        if not code:
            return None
        return [RawCall(c.name.removesuffix(".call"), c.arguments) for c in code]


class PythonStart(Format):
    name: ClassVar[str] = "llama4"
    markers: ClassVar[tuple[str, ...]] = (PYTHON_START,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Json("[{", call=True), Opt(PYTHON_END))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(PYTHON_START):
            return None
        body = strip_trailer(region[len(PYTHON_START) :], PYTHON_END)
        if body.startswith("{") or (body.startswith("[") and body[1:].lstrip().startswith("{")):
            return calls_from_value(loads(body))
        return python_calls(body)


class FunctionTag(Format):
    """``<function=NAME>{json}</function>``; tried after the core XML format
    that shares the marker (priority), so it only claims JSON bodies."""

    name: ClassVar[str] = "llama_function"
    markers: ClassVar[tuple[str, ...]] = (FUNCTION,)
    wrapped: ClassVar[bool] = True
    priority: ClassVar[int] = 150

    def end_finder(self, marker: str) -> EndFinder:
        return UntilMarker(FUNCTION_END, skip=len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        return function_shape(region, ("{", FUNCTION_END), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(FUNCTION):
            return None
        head, sep, rest = region[len(FUNCTION) :].partition(">")
        name = head.strip()
        if not sep or not name or any(c.isspace() or c in "<{" for c in name):
            return None
        body = rest.strip().removesuffix(FUNCTION_END).rstrip()
        if not body:
            return [RawCall(name, None)]
        if not body.startswith("{"):
            return None
        return [RawCall(name, body)]


FORMATS: list[Format] = [PythonTag(), PythonStart(), FunctionTag()]

#: The header of a user's turn the model goes on to write after its own
#: (its ``<|eot_id|>`` not a stop token on the server): not its reply.
RESIDUE: list[Residue] = [Residue(turn_ends=("<|start_header_id|>user<|end_header_id|>",))]
