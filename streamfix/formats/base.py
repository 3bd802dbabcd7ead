"""The contract between the tool-tag detector and a format module.

A format (one module per shape or model family) declares:

- how its calls start: ``markers`` (found anywhere in the content),
  ``leading`` (count only at the start of the reply, after whitespace), and
  ``tool_markers(tools)`` (markers made from the offered tool names, such
  as ``lookup_order(``);
- how to find where a call ends, incrementally: ``end_finder(marker)``
  returns an ``EndFinder`` that is fed the region's text piece by piece,
  starting with the marker itself;
- how to parse a complete region into calls: ``parse(region, tools)``.

``wrapped`` says what a region that does not parse is: ``True`` for
unmistakable call syntax (wrapper tags, special tokens), which is then
markup (stripped, counted, sampled); ``False`` for bare candidates (JSON,
a line of code), which were text after all and are released verbatim.

Formats that share a marker (``<tool_call>`` opens Hermes JSON, Qwen3-Coder
XML and GLM calls) must share its end rule; the registry tries their
parsers in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..context import ToolSpec

#: Returned by ``EndFinder.feed`` when the region turns out not to be a
#: call at all (a bare ``{`` followed by prose): the detector releases it
#: as text at once instead of holding it to the end of the stream.
ABORT = -1


@dataclass(frozen=True, slots=True)
class RawCall:
    """A call as written: ``name`` may carry a prefix (``functions.x``,
    ``tools:x``); ``arguments`` is a dict, text still to be parsed (JSON or
    a Python literal), or None for no arguments."""

    name: str
    arguments: Any = None


class EndFinder(Protocol):
    def feed(self, text: str) -> int | None:
        """Scan the next piece of the region. Returns the offset in ``text``
        just past the region's end, ``None`` while the region goes on, or
        ``ABORT``. Cost O(len(text)): never rescan earlier pieces."""
        ...


class Format:
    """Base class of the format modules (see module docstring)."""

    name: ClassVar[str] = ""
    markers: ClassVar[tuple[str, ...]] = ()
    leading: ClassVar[tuple[str, ...]] = ()
    wrapped: ClassVar[bool] = True

    def tool_markers(self, tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
        return ()

    def end_finder(self, marker: str) -> EndFinder:
        raise NotImplementedError

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        """The calls in a complete region (marker included), or None when
        the region is not this format's call syntax."""
        raise NotImplementedError
