"""MeetKai Functionary v3.2 calls: recipient lines.

Each message of the reply is ``>>>RECIPIENT\\n`` then its body: ``all``
for text to the user, a function's name for a call whose body is the JSON
arguments (``>>>get_weather\\n{"city": "Paris"}``). The chat template ends
the prompt with ``>>>``, so the reply's first message shows no marker:
``get_weather\\n{…}`` or ``all\\nHello`` (llama.cpp ``common/chat.cpp``,
its Functionary v3.2 handler and ``tests/test-chat.cpp``; vLLM and SGLang
ship no parser for it).

- later messages: ``>>>NAME\\n{…}`` is a region of this format (the name
  is a bare identifier on the marker's line; ``>>> import os`` in a REPL
  transcript is prose), and ``>>>all\\n`` is the header of a message of
  text (``Format.is_header``): stripped, the text after it is the answer;
- the first message: for a request to a Functionary v3.2 model, the
  prompt-marker step (``transforms/prompt_marker.py``) writes the
  template's ``>>>`` back before a first line that is ``all`` or an
  offered tool's name (``prompt_marker``, ``prompt_models``,
  ``prompt_head``), and the two rules above read it. A reply whose first
  line is anything else goes out as written.

Functionary v3.1 writes Llama 3.1's ``<function=NAME>{…}</function>``
(``llama.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Json, Steps, loads
from .base import ABORT, EndFinder, Format, RawCall, lead_shape, resolve_name
from .scan import skipped

MARKER = ">>>"
#: The recipient of the answer channel: text to the user.
ANSWER = "all"
#: Longest recipient line read before the region is prose.
_HEAD_MAX = 64

_NAME = re.compile(r"[A-Za-z_][\w.-]*")
_NAME_PREFIX = re.compile(r"[\w.-]*")


class _Finder:
    """The end of one message: just past ``all\\n`` (the answer's header),
    or where the JSON body after ``NAME\\n`` closes. A recipient line that
    is no bare name (``>>> import os``) aborts at once."""

    __slots__ = ("_body", "_head", "_skip")

    def __init__(self, skip: int) -> None:
        self._skip = skip
        self._head = ""
        self._body: Steps | None = None

    @property
    def complete(self) -> bool:
        return self._body is not None and self._body.complete

    def feed(self, text: str) -> int | None:
        if self._body is not None:
            return self._body.feed(text)
        self._skip, i = skipped(self._skip, text)
        if self._skip:
            return None
        nl = text.find("\n", i)
        self._head += text[i : len(text) if nl < 0 else nl]
        if len(self._head) > _HEAD_MAX or not _NAME_PREFIX.fullmatch(self._head):
            return ABORT
        if nl < 0:
            return None
        if self._head == ANSWER:
            return nl + 1
        if not _NAME.fullmatch(self._head):
            return ABORT
        self._body = Steps(0, Json("{"))
        e = self._body.feed(text[nl + 1 :])
        return e if e is None or e < 0 else nl + 1 + e


class Functionary(Format):
    name: ClassVar[str] = "functionary"
    markers: ClassVar[tuple[str, ...]] = (MARKER,)
    wrapped: ClassVar[bool] = True
    prompt_marker: ClassVar[str] = MARKER
    prompt_models: ClassVar[tuple[str, ...]] = (r"functionary[\w.-]*v3[._-]?2",)

    def prompt_head(self, line: str, tools: Mapping[str, ToolSpec]) -> bool:
        return line == ANSWER or resolve_name(line, tools) == line

    def end_finder(self, marker: str) -> EndFinder:
        return _Finder(len(marker))

    def is_header(self, region: str) -> bool:
        return region == MARKER + ANSWER + "\n"

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        body = region[len(MARKER) :]
        nl = body.find("\n")
        head = body if nl < 0 else body[:nl]
        if len(head) > _HEAD_MAX or not _NAME_PREFIX.fullmatch(head):
            return False
        if nl < 0:
            return False if final else None
        if head == ANSWER:
            return True
        return _NAME.fullmatch(head) is not None and lead_shape(body[nl + 1 :], ("{",), final)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        nl = region.find("\n")
        if not region.startswith(MARKER) or nl < 0:
            return None
        name = region[len(MARKER) : nl]
        if name == ANSWER or not _NAME.fullmatch(name):
            return None
        args = loads(region[nl + 1 :])
        return [RawCall(name, args)] if isinstance(args, dict) else None


FORMATS: list[Format] = [Functionary()]
