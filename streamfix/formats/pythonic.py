"""Pythonic call lists: ``[lookup_order(order_id="D-4"), refresh_cache()]``.

The shape of vLLM's ``pythonic_tool_parser`` (Llama 3.2 / 4 prompts, and
small models trained on them): a Python list of calls with literal keyword
arguments. Read with ``ast`` (never evaluated). Starts at ``[NAME(`` for an
offered tool at the start of a line, or at a ``[`` that opens the reply; the list must
end its line, like a one-line code call.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ..spec import ToolSpec
from ..toolargs import call_node_args
from ._family import dotted_name
from .base import EndFinder, Format, RawCall
from .code_call import call_arguments
from .scan import BalancedLine


def pythonic_calls(text: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    """The calls of a Python list of calls (or of one bare call)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    items = node.elts if isinstance(node, ast.List) else [node]
    if not items:
        return None
    calls: list[RawCall] = []
    for item in items:
        if not isinstance(item, ast.Call):
            return None
        name = dotted_name(item.func)
        got = call_node_args(item)
        if name is None or got is None:
            return None
        args = call_arguments(name, *got, tools)
        if args is None:
            return None
        calls.append(RawCall(name, args))
    return calls


class Pythonic(Format):
    name = "pythonic"
    markers = ("[",)
    leading = ("[",)
    wrapped = False
    line_start = True
    priority = 55

    def tool_markers(self, tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
        return tuple(f"[{n}(" for n in tools)

    def end_finder(self, marker: str) -> EndFinder:
        return BalancedLine()

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        s = region.lstrip("[ \t\n")
        return any(s.startswith(n + "(") for n in tools)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.lstrip().startswith("["):
            return None
        return pythonic_calls(region, tools)


FORMATS: list[Format] = [Pythonic()]
