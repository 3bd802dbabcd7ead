"""Muse Glimmer's messages and ``<atem:function_calls>`` calls, as a backend
without its parser sends them in ``content``.

A reply is a run of messages, each addressed to a recipient (the chat
template and llama.cpp's Muse Glimmer tests in ``test-chat.cpp``):

- ``<|start|>assistant to=self<|message|>…<|eom|>``: reasoning;
- ``<|start|>assistant to=user<|message|>…<|eot|>``: the answer;
- ``<|start|>assistant to=NAME<|message|><atem:function_calls>…``: a call,
  one ``<atem:invoke name="NAME">`` per call inside the block, each with
  ``<atem:parameter name="KEY">VALUE</atem:parameter>`` elements (strings
  as they stand, spaces kept; other values as JSON).

The generation prompt ends with ``<|start|>assistant``, so the first
message's header arrives as `` to=RECIPIENT<|message|>``. A block written
inside the answer or the reasoning (``to=user``/``to=self``) is text, as
llama.cpp's parser reads it: only a message to a tool is a call.

The model may fumble a header (Ollama's Glimmer parser tests): a message
with no recipient (``<|message|>`` first, or ``<|start|>assistant<|message|>``)
holding nothing but a block of offered tools' calls is those calls, and a
``<|message|>`` slipped into an invoke's name is dropped from it.

The header ``<|start|>assistant to=`` is Harmony's too (``harmony.py``):
this format is tried first and reads a body that is not a block as
Harmony's finder does (a JSON value or a lone token), then leaves the
parse to Harmony.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import Opt, Steps, Until, strip_trailer, typed_value, xml_calls
from .base import ABORT, EndFinder, Format, RawCall, Reasoning
from .harmony import CALL, END, MESSAGE, Body, Harmony, _CallFinder

START = "<|start|>assistant to="
#: A header without its recipient: ``<|start|>assistant<|message|>``, or
#: the reply's first message (``<|start|>assistant`` is in the prompt)
#: starting at ``<|message|>``. Read only as a block of offered tools'
#: calls (Ollama's Glimmer tests: the model fumbles the recipient).
BARE = "<|start|>assistant" + MESSAGE
#: Ends a message; the turn goes on (``<|eot|>`` ends it).
EOM = "<|eom|>"
EOT = "<|eot|>"
OPEN = "<atem:function_calls>"
CLOSE = "</atem:function_calls>"

_RECIPIENT = re.compile(r"to=([^\s<|]+)")
#: What may follow ``to=`` in a header so far: a recipient, then a token.
_HEAD = re.compile(r"[^\s<>|]+<")
_HEAD_PREFIX = re.compile(r"[^\s<>|]*")
_INVOKE = re.compile(r'<atem:invoke name="([^"<>]+)">(.*?)</atem:invoke>', re.DOTALL)
_PARAM = re.compile(r'<atem:parameter name="([^"<>]+)">(.*?)</atem:parameter>', re.DOTALL)
#: An invoke's name with the ``<|message|>`` the model slips into it, as
#: its headers write ``to=NAME<|message|>``: in the name, after it, or for
#: the ``">`` that ends it (Ollama's Glimmer parser tests).
_SLIPPED = re.compile(
    r'(<atem:invoke name=")((?:[^"<>]|<\|message\|>)*?<\|message\|>(?:[^"<>]|<\|message\|>)*?)'
    r'(?:">)?(?=\s|<atem:parameter|</atem:invoke>)'
)


class _Tagged:
    """A body opening with ``<``: an ``<atem:function_calls>`` block up to
    its close (then an optional ``<|eom|>``/``<|eot|>``/``<|call|>``), or,
    as soon as the text leaves the block's opening tag, Harmony's lone
    token. At most ``len(OPEN)`` characters are kept while undecided."""

    __slots__ = ("_inner", "_seen")

    def __init__(self) -> None:
        self._seen = ""
        self._inner: Steps | None = None

    @property
    def complete(self) -> bool:
        return self._inner is not None and self._inner.complete

    def feed(self, text: str) -> int | None:
        if self._inner is not None:
            return self._inner.feed(text)
        got = text[: len(OPEN) - len(self._seen)]
        seen = self._seen + got
        if OPEN.startswith(seen):
            if len(seen) < len(OPEN):
                self._seen = seen
                return None
            self._inner = Steps(0, Until(CLOSE), Opt(EOM, EOT, CALL))
            r = self._inner.feed(text[len(got) :])
            if r is None or r == ABORT:
                return r
            return len(got) + r
        # Not a block: Harmony's body. The prefix kept holds no token's end.
        self._inner = Steps(0, Until(CALL, END, limit=len(CALL)))
        if self._seen:
            self._inner.feed(self._seen)
        return self._inner.feed(text)


class _Finder(_CallFinder):
    __slots__ = ()

    def __init__(self, marker: str) -> None:
        # A header-less marker ends at its own ``<|message|>``.
        super().__init__(len(marker) - len(MESSAGE) if marker.endswith(MESSAGE) else len(marker))

    def _tagged(self) -> Body:
        return _Tagged()


class MuseGlimmer(Format):
    name: ClassVar[str] = "muse_glimmer"
    markers: ClassVar[tuple[str, ...]] = (START, BARE)
    #: The first message's ``<|start|>assistant`` is in the prompt.
    leading: ClassVar[tuple[str, ...]] = ("to=", MESSAGE)
    wrapped: ClassVar[bool] = True
    #: Before Harmony, whose header it shares: its finder reads both bodies.
    priority: ClassVar[int] = 95

    _harmony: ClassVar[Harmony] = Harmony()

    def end_finder(self, marker: str) -> EndFinder:
        return _Finder(marker)

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        if region.startswith((MESSAGE, BARE)):
            body = region.partition(MESSAGE)[2].lstrip()
            if OPEN.startswith(body):
                return None if not final else False
            return body.startswith(OPEN)
        # A recipient, then a token: ``to=5 is odd`` is prose.
        i = region.find("to=")
        head = region[i + 3 :] if i >= 0 else ""
        if _HEAD.match(head):
            return True
        if not final and _HEAD_PREFIX.fullmatch(head):
            return None
        return False

    def is_complete(self, region: str) -> bool:
        body = region.partition(MESSAGE)[2].strip()
        return not body.startswith(OPEN) or CLOSE in body

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        head, sep, body = region.partition(MESSAGE)
        if not sep:
            return None
        block = strip_trailer(body, EOM, EOT, CALL)
        if _RECIPIENT.search(head) is None:
            # No recipient: only a whole block of offered tools' calls.
            if head not in ("", BARE[: -len(MESSAGE)]) or not block.endswith(CLOSE):
                return None
            calls = self._block(block, tools) if block.startswith(OPEN) else None
            return calls if calls and all(c.name in tools for c in calls) else None
        if not block.startswith(OPEN):
            return self._harmony.parse(region, tools)
        if not block.endswith(CLOSE):
            return None
        return self._block(block, tools)

    @staticmethod
    def _block(block: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        block = _SLIPPED.sub(lambda m: m[1] + m[2].replace(MESSAGE, "") + '">', block)
        return _calls(block[len(OPEN) : -len(CLOSE)], tools)

    def given_back(self, region: str) -> str:
        # A Harmony body (not a block) goes back as Harmony gives it back.
        body = region.partition(MESSAGE)[2].strip()
        return region if body.startswith(OPEN) else self._harmony.given_back(region)


def _calls(block: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    def value(p: re.Match[str], name: str) -> Any:
        # Spaces in a string value are the value's (the template says so).
        return typed_value(p.group(2), tools, name, p.group(1).strip())

    return xml_calls(block, _INVOKE, _PARAM, value, json_body=False)


FORMATS: list[Format] = [MuseGlimmer()]


# The messages to ``self`` are reasoning, those to ``user`` the answer; a
# message ends at ``<|eom|>`` (the turn goes on) or ``<|eot|>``. Calls have
# messages of their own, so the answer holds text only.
REASONING: list[Reasoning] = [
    Reasoning(
        "muse_glimmer",
        opens=("to=self<|message|>", "<|start|>assistant to=self<|message|>"),
        closes=(EOM, EOT, "<|start|>assistant to=user<|message|>"),
        answer=("to=user<|message|>", "<|start|>assistant to=user<|message|>"),
        ends=(EOM, EOT),
        leading=("to=self<|message|>", "to=user<|message|>"),
        repeats=True,
        calls_apart=True,
    )
]
