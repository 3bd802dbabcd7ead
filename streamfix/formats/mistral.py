"""Mistral's ``[TOOL_CALLS]`` calls, as a backend without a Mistral parser
sends them in ``content``.

Two generations share the marker (vLLM ``tool_parsers/mistral_tool_parser.py``
tells them apart by tokenizer version; llama.cpp ``chat-parsers/mistral-nemo.cpp``
and Magistral/Devstral users' reports show the same text):

- before tokenizer v11 (Mistral 7B v0.3, Nemo, Small 3.x):
  ``[TOOL_CALLS] [{"name": "f", "arguments": {...}, "id": "abc123def"}, ...]``
  — one marker, a JSON list of calls (a single object also seen);
- v11 and later (Small 3.2, Magistral, Devstral, Ministral 3):
  ``[TOOL_CALLS]f[ARGS]{...}``, one marker per call; HF tokenizers may drop
  the ``[ARGS]`` token (``[TOOL_CALLS]f{...}``), and v13 adds a call id:
  ``[TOOL_CALLS]f[CALL_ID]abc123def[ARGS]{...}``.

No closing token exists: the region ends where the JSON value closes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ..spec import ToolSpec
from ._family import Header, Json, Steps, loads
from .base import ABORT, EndFinder, Format, RawCall, Reasoning, Residue, calls_from_value
from .scan import skipped

MARKER = "[TOOL_CALLS]"

# v11+: NAME, then optional [CALL_ID]id, optional [ARGS], then the object.
_HEADER = r"\s*[\w.\-:]+\s*(?:\[CALL_ID\]\s*\w*\s*)?(?:\[ARGS\])?\s*"
_HEADER_PREFIX = r"\s*[\w.\-:]*\s*(?:\[[A-Z_]*\]?\s*\w*\s*)*"
_NAMED = re.compile(
    r"\s*([^\s\[\]{}]+)\s*(?:\[CALL_ID\]\s*[^\s\[{]*\s*)?(?:\[ARGS\])?\s*(\{.*\})\s*\Z", re.DOTALL
)


#: A word of junk on the marker's line before the old shape's list (vLLM's
#: parser finds the list after it: ``[TOOL_CALLS]  junk [{…}]``). More
#: words are prose that mentions the marker: released at once.
_JUNK = re.compile(r"[ \t]*[^\s\[\]{}]{1,32}[ \t]*(\[\s{0,8}\{)")
_JUNK_PREFIX = re.compile(r"[ \t]*[^\s\[\]{}]{0,32}(?:[ \t]*|[ \t]*\[\s{0,8})\Z")
_NAMED_HEAD = re.compile(_HEADER + r"\{")


class _MistralEnd:
    """After the marker: a JSON list/object (old), or a name up to the
    ``{`` of the arguments (new). Decided on the first non-space character;
    a header that is not a name may be a word of junk before the old shape's list
    (``_JUNK``), decided on the text after the marker alone."""

    __slots__ = ("_junk", "_named", "_seen", "_skip", "_steps")

    def __init__(self, skip: int) -> None:
        self._skip = skip
        self._steps: Steps | None = None
        self._seen = ""  # the text after the marker while the header is read
        #: The header was not a name: it is watched for junk before a list
        #: (until ``_JUNK`` matches: then the list's ``_steps`` run).
        self._junk = False
        self._named = False  # the new shape's header is being read

    def feed(self, text: str) -> int | None:
        self._skip, i = skipped(self._skip, text)
        if self._skip:
            return None
        if self._junk:
            return self._after_junk(text, i)
        header = self._steps is None or (self._named and self._steps.part == 0)
        if header:
            self._seen += text[i:]
        r = self._feed(text, i)
        if r == ABORT and header and self._named:
            # Not a name: junk before a list, or prose after the marker.
            self._junk = True
            self._steps = None
            return self._after_junk(text, len(text))
        return r

    def _after_junk(self, text: str, i: int) -> int | None:
        """Watch the header for ``_JUNK``; then the list is the region's."""
        if self._steps is not None:
            r = self._steps.feed(text[i:])
            return r if r is None or r == ABORT else i + r
        seen = self._seen = self._seen + text[i:]
        m = _JUNK.match(seen)
        if m is None:
            return None if _JUNK_PREFIX.match(seen) else ABORT
        self._steps = Steps(0, Json("[{"))
        r = self._steps.feed(seen[m.start(1) :])
        if r is None or r == ABORT:
            return r
        return m.start(1) + r - (len(seen) - len(text))

    def _feed(self, text: str, i: int) -> int | None:
        if self._steps is None:
            j = i
            while j < len(text) and text[j].isspace():
                j += 1
            if j == len(text):
                return None
            if text[j] in "[{":
                self._steps = Steps(0, Json("[{"))
            elif text[j] == "]":
                return ABORT
            else:
                self._named = True
                self._steps = Steps(
                    0, Header("{", r"\w.\-:\[\]\s", _HEADER, _HEADER_PREFIX), Json("{")
                )
        r = self._steps.feed(text[i:] if i else text)
        if r is None or r == ABORT:
            return r
        return i + r


class Mistral(Format):
    name: ClassVar[str] = "mistral"
    markers: ClassVar[tuple[str, ...]] = (MARKER,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return _MistralEnd(len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        """A list or object, a name header, or a few words of junk before a
        list (``_JUNK``) read as call syntax; other words after the marker
        are prose that mentions it."""
        s = region[len(MARKER) :].lstrip()
        if not s:
            return True if final else None
        if s[0] in "[{" or _NAMED_HEAD.match(s) or _JUNK.match(s):
            return True
        if re.fullmatch(_HEADER_PREFIX, s):
            return True if final else None
        if not final and _JUNK_PREFIX.match(s):
            return None
        return False

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(MARKER):
            return None
        body = region[len(MARKER) :]
        s = body.lstrip()
        if s[:1] in ("[", "{"):
            value = loads(s)
            return calls_from_value(value) if value is not None else None
        m = _NAMED.match(body)
        if m is not None:
            return [RawCall(m.group(1), m.group(2))]
        junk = _JUNK.match(s)
        if junk is None:
            return None
        value = loads(s[junk.start(1) :])
        return calls_from_value(value) if value is not None else None


FORMATS: list[Format] = [Mistral()]


# Magistral and Ministral "Reasoning" write their thoughts between
# ``[THINK]`` and ``[/THINK]`` at the start of the reply (mistral-common
# ``ThinkChunk``; vLLM ``reasoning/mistral_reasoning_parser.py``). Their
# template opens ``[THINK]`` in the prompt when thinking is on, so a reply may
# show only ``[/THINK]``; a ``[THINK]`` after some answer text (within the
# start's hold) opens a section too.
REASONING: list[Reasoning] = [
    Reasoning("mistral", opens=("[THINK]",), closes=("[/THINK]",), prefilled=True, repeats=True)
]

#: Magistral (and Ministral "Reasoning") reason before answering.
REASONING_MODELS = (r"magistral",)

#: The bracketed control tokens of Mistral's tokenizers (v3+, tekken), and
#: ``</s>``, the end-of-sequence token of its (and Llama 2's) templates.
#: ``[/TOOL_CALLS]`` is no token of theirs, but a template written by hand
#: closes the call list with it (Ollama's tool-parser tests), and a model
#: served so copies it after its calls.
RESIDUE: list[Residue] = [
    Residue(
        wrappers=("s",),
        brackets=(
            "TOOL_CALLS",
            "/TOOL_CALLS",
            "ARGS",
            "CALL_ID",
            "TOOL_RESULTS",
            "/TOOL_RESULTS",
            "TOOL_CONTENT",
            "AVAILABLE_TOOLS",
            "/AVAILABLE_TOOLS",
            "INST",
            "/INST",
            "SYSTEM_PROMPT",
            "/SYSTEM_PROMPT",
        ),
    )
]
