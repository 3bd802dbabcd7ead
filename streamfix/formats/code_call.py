"""A call written as one line of code: ``create_ticket({"title": "Refund"})``
or with Python keyword arguments, ``lookup_order(order_id="D-4")``.

Markers are made from the offered tool names (``NAME(`` and
``functions.NAME(``, at the start of a line), so only offered tools can
start a region and ``x = lookup_order(…)`` is code. The call must end
its line (``scan.BalancedLine``): prose such as ``lookup_order(id)
returns the order`` is released as text as soon as the words after the
parenthesis arrive. And it is a call only when nothing but blanks or
further calls follows it to the end of the reply (the code-line rule,
``Format.ends_reply``): a model explaining a tool ("you would run:\n
Bash(command="rm -rf build/")\nbut I have not") is not calling it.
Arguments must be literals (JSON or
Python); a variable or an expression is code, not a call. A single
positional literal is accepted for a tool with exactly one parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..spec import ToolSpec
from ..toolargs import parse_call_args
from .base import EndFinder, Format, RawCall, resolve_name
from .scan import BalancedLine

_CALL = re.compile(r"\A\s*([A-Za-z_][\w.:]*)\s*\((.*)\)\s*\Z", re.S)


def call_arguments(
    name: str, positional: list[Any], keywords: dict[str, Any], tools: Mapping[str, ToolSpec]
) -> dict[str, Any] | None:
    """A call's literal arguments as one object, when the reading is certain."""
    if not positional:
        return keywords
    if len(positional) == 1 and not keywords:
        only = positional[0]
        if isinstance(only, dict):
            return only
        resolved = resolve_name(name, tools)
        props = tools[resolved].parameters.get("properties") if resolved else None
        if isinstance(props, dict) and len(props) == 1:
            return {next(iter(props)): only}
    return None


def code_call(text: str, tools: Mapping[str, ToolSpec]) -> RawCall | None:
    """``NAME(args)`` -> the call, or None."""
    m = _CALL.match(text)
    if not m:
        return None
    got = parse_call_args(m.group(2))
    if got is None:
        return None
    args = call_arguments(m.group(1), *got, tools)
    return None if args is None else RawCall(m.group(1), args)


class CodeCall(Format):
    name = "code_call"
    wrapped = False
    line_start = True
    priority = 60
    ends_reply = True

    def tool_markers(self, tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
        return tuple(m for n in tools for m in (f"{n}(", f"functions.{n}("))

    def end_finder(self, marker: str) -> EndFinder:
        return BalancedLine(skip=len(marker) - 1)

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        return True  # it opened a call to an offered tool

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        call = code_call(region, tools)
        return None if call is None else [call]


FORMATS: list[Format] = [CodeCall()]
