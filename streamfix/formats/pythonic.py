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
from typing import Any, ClassVar

from ..pycalls import read_calls
from ..spec import ToolSpec
from ..toolargs import call_node_args
from ._family import dotted_name
from .base import UNREADABLE, EndFinder, Format, RawCall
from .code_call import call_arguments
from .scan import BalancedLine


def pythonic_calls(text: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    """The calls of a Python list of calls (or of one bare call), each read
    on its own: one that does not read is ``UNREADABLE`` in its place. What
    Python does not parse is read as models write it (``pycalls``)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        read = read_calls(text)
        if read is None:
            return None
        got_calls = [_raw(c[0], c[1], c[2], tools) if c else UNREADABLE for c in read]
        return None if all(c is UNREADABLE for c in got_calls) else got_calls
    items = node.elts if isinstance(node, ast.List) else [node]
    if not items or not all(isinstance(item, ast.Call) for item in items):
        return None
    calls: list[RawCall] = []
    for item in items:
        assert isinstance(item, ast.Call)
        name = dotted_name(item.func)
        got = call_node_args(item)
        if name is None or got is None:
            calls.append(UNREADABLE)
            continue
        calls.append(_raw(name, *got, tools))
    return None if all(c is UNREADABLE for c in calls) else calls


def _raw(
    name: str, positional: list[Any], keywords: dict[str, Any], tools: Mapping[str, ToolSpec]
) -> RawCall:
    args = call_arguments(name, positional, keywords, tools)
    return UNREADABLE if args is None else RawCall(name, args)


class Pythonic(Format):
    name = "pythonic"
    markers: ClassVar[tuple[str, ...]] = ("[",)
    leading: ClassVar[tuple[str, ...]] = ("[",)
    wrapped = False
    line_start = True
    priority = 55
    ends_reply = True

    def end_finder(self, marker: str) -> EndFinder:
        return BalancedLine()

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        s = region.lstrip("[ \t\n")
        return any(s.startswith(n + "(") for n in tools)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.lstrip().startswith("["):
            return None
        return pythonic_calls(region, tools)


class PythonicNamed(Pythonic):
    """The list opened by an offered tool's name, ``[NAME(``: also after
    text on its line (``Here's the call: [get_weather(city='X')]``, as
    SGLang reads Llama 4's replies). The code-line rule keeps it safe: it is
    a call only when nothing but blanks or further calls follows it to the
    end of the reply; prose after it leaves it text."""

    markers = ()
    leading = ()
    line_start = False
    #: ``[`` and an offered tool's name, ending the reply, is a call as
    #: surely as a wrapper is: arguments off the schema are the tool's to
    #: judge (SGLang passes a dict for a string parameter through).
    invalid_is_call = True

    def tool_markers(self, tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
        return tuple(f"[{n}(" for n in tools)


FORMATS: list[Format] = [Pythonic(), PythonicNamed()]
