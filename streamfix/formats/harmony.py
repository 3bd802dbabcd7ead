"""OpenAI gpt-oss "Harmony" calls, as a backend without a Harmony parser
sends them in ``content``.

A call is a commentary (sometimes, wrongly, analysis) message addressed to
a function (OpenAI harmony cookbook, "Function calling"; vLLM
``tool_parsers/openai_tool_parser.py``, SGLang ``gpt_oss_detector.py``):

- ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>``
- the same after ``<|start|>assistant``, and with the recipient in the
  role header: ``<|start|>assistant to=functions.NAME<|channel|>commentary json``
  ``<|message|>{…}<|call|>``
- without ``<|constrain|>`` (``…to=functions.NAME<|message|>{…}``).

The model sometimes glues the content type to the name
(``to=functions.shelljson<|message|>``, llama.cpp PR #15158): a name ending
in ``json`` that is not an offered tool loses that suffix when what is left
is one.

``<|call|>`` is a stop token, so most engines never send it: the region
ends where the JSON closes, taking a ``<|call|>`` (or the ``<|end|>`` some
engines write there) right after it. A message with no body at all
(``<|message|><|call|>``, or ``<|message|>`` at the end of the reply) is a
call without arguments (openai_harmony renders a call with empty arguments
so; vLLM's tests).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar, Protocol

from ..spec import ToolSpec
from ._family import MAX_HEADER_CHARS, Json, Opt, Steps, Until, strip_trailer
from .base import ABORT, EndFinder, Format, RawCall, Reasoning

MESSAGE = "<|message|>"
CALL = "<|call|>"
#: Ends a message; some engines send it after a call instead of ``<|call|>``.
END = "<|end|>"

_RECIPIENT = re.compile(r"to=([^\s<]+)")


def _spelled(*headers: str) -> tuple[str, ...]:
    """``headers`` as gpt-oss writes them, and as LLM-jp 4.1 does: a space
    after ``<|channel|>`` and ``<|start|>`` (llama.cpp's LLM-jp 4.1 tests)."""
    spaced = (
        h.replace("<|channel|>", "<|channel|> ").replace("<|start|>", "<|start|> ") for h in headers
    )
    return (*headers, *(h for h in spaced if h not in headers))


#: Where a message's recipient is written: in the channel, or in the role
#: header (``<|start|>assistant to=…``), or as the role itself
#: (``<|start|>to=…``: the reference parser reads a role that starts with
#: ``to=`` as the recipient; Ollama's ``harmony/harmonyparser_test.go``).
_TO = _spelled(
    "<|channel|>commentary to=",
    "<|channel|>analysis to=",
    "<|start|>assistant to=",
    "<|start|>assistant<|channel|>commentary to=",
    "<|start|>assistant<|channel|>analysis to=",
    "<|start|>to=",
)

#: gpt-oss's built-in tools (the harmony format's ``browser``, ``python``
#: and ``container`` namespaces): a message to one is for the engine's own
#: tool runtime, never a client's function, and its body is often code.
_BUILTINS = ("python", "browser.", "container.")
_BUILTIN = re.compile(r"(?:python|browser\.\w+|container\.\w+)\Z")


class Body(Protocol):
    """What reads a message's body: an ``EndFinder`` that says when only an
    optional closing token is still awaited (``Steps.complete``)."""

    @property
    def complete(self) -> bool: ...

    def feed(self, text: str) -> int | None: ...


#: The tokens a body that is not JSON may meet: its close (``<|call|>``,
#: ``<|end|>``), or another header's token (then it was no call: text).
_TEXT_TOKENS = re.compile(r"<\|(call|end|start|channel|message)\|>")
_TEXT_TAIL = len("<|channel|>") - 1
#: The most of a body that is not JSON held while its close may come.
MAX_TEXT_BODY = 4096


class _TextBody:
    """A message body that is not JSON (``<|message|>foo<|call|>``): it ends
    just after its ``<|call|>`` or ``<|end|>``; another header's token first,
    or ``MAX_TEXT_BODY`` characters without a close, make it text (ABORT).
    Each piece is scanned once (plus a token's length)."""

    __slots__ = ("_seen", "_tail")

    def __init__(self) -> None:
        self._tail = ""
        self._seen = 0

    @property
    def complete(self) -> bool:
        return False  # its close is not optional

    def feed(self, text: str) -> int | None:
        s = self._tail + text
        m = _TEXT_TOKENS.search(s)
        if m is not None:
            return m.end() - len(self._tail) if m.group(1) in ("call", "end") else ABORT
        self._seen += len(text)
        if self._seen > MAX_TEXT_BODY:
            return ABORT
        self._tail = s[-_TEXT_TAIL:]
        return None


class _CallFinder:
    """The header up to ``<|message|>``, then the body: a JSON value and
    an optional ``<|call|>``/``<|end|>``, or, when the first character after
    the blanks opens a token, nothing but that token (a call without
    arguments). Each piece is scanned once."""

    __slots__ = ("_body", "_head")

    def __init__(self, skip: int) -> None:
        self._head: Steps | None = Steps(skip, Until(MESSAGE, limit=MAX_HEADER_CHARS))
        self._body: Body | None = None

    @property
    def complete(self) -> bool:
        """Only an optional closing token is still awaited (``Steps.complete``)."""
        return self._body is not None and self._body.complete

    def feed(self, text: str) -> int | None:
        i = 0
        if self._head is not None:
            r = self._head.feed(text)
            if r is None or r == ABORT:
                return r
            self._head = None
            i = r
        if self._body is None:
            while i < len(text) and text[i].isspace():
                i += 1
            if i == len(text):
                return None
            if text[i] == "<":
                self._body = self._tagged()
            elif text[i] in "{[":
                self._body = Steps(0, Json("{["), Opt(CALL, END))
            else:
                self._body = _TextBody()
        r = self._body.feed(text[i:] if i else text)
        if r is None or r == ABORT:
            return r
        return i + r

    def _tagged(self) -> Body:
        """The body of a message that opens with a token: nothing but that
        token (a call without arguments). A family sharing the header with
        another body in tags overrides it (``muse_glimmer.py``)."""
        return Steps(0, Until(CALL, END, limit=len(CALL)))


class Harmony(Format):
    name: ClassVar[str] = "harmony"
    markers: ClassVar[tuple[str, ...]] = _TO
    #: The first message's ``<|start|>assistant`` is in the prompt, so a
    #: reply that is a call with the recipient in the role header starts
    #: `` to=functions.NAME<|channel|>commentary …``.
    leading: ClassVar[tuple[str, ...]] = ("to=functions.",)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        return _CallFinder(len(marker))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        head, sep, body = region.partition(MESSAGE)
        m = _RECIPIENT.search(head)
        if not sep or m is None:
            return None
        args = strip_trailer(body, CALL, END)
        if not args:
            return [RawCall(_unglue(m.group(1), tools), {})]
        if not args.startswith("{"):
            return None
        return [RawCall(_unglue(m.group(1), tools), args)]

    def given_back(self, region: str) -> str:
        # The header is markup; what the model wrote is the message's body
        # (``to=functions.X<|channel|>commentary<|message|>foo<|call|>``).
        _, sep, body = region.partition(MESSAGE)
        return strip_trailer(body, CALL, END) if sep else region


class HarmonyBuiltin(Harmony):
    """A message to a built-in tool (``to=python <|constrain|>code<|message|>
    print(1)``): it runs to the message's end (``<|call|>``, ``<|end|>`` or
    the end of the reply) and is a call to no offered tool, so it is
    stripped as markup (``stripped.unoffered_call``), as llama.cpp's
    gpt-oss parser drops it. A name that only starts like one
    (``to=python_runner``) is an ordinary call."""

    name: ClassVar[str] = "harmony_builtin"
    markers: ClassVar[tuple[str, ...]] = tuple(t + b for t in _TO for b in _BUILTINS)
    leading: ClassVar[tuple[str, ...]] = ()

    def end_finder(self, marker: str) -> EndFinder:
        return Steps(len(marker), Until(MESSAGE, limit=MAX_HEADER_CHARS), Until(CALL, END))

    def is_complete(self, region: str) -> bool:
        return region.endswith((CALL, END))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        head, sep, _ = region.partition(MESSAGE)
        m = _RECIPIENT.search(head)
        if sep and m is not None and _BUILTIN.match(m.group(1)):
            # Not a name any offered tool resolves to (``resolve_name``).
            return [RawCall(f"{m.group(1)} (built-in)", {})]
        return super().parse(region, tools)


def _unglue(name: str, tools: Mapping[str, ToolSpec]) -> str:
    bare = name.rsplit(".", 1)[-1]
    if bare not in tools and bare.endswith("json") and bare[:-4] in tools:
        return name[:-4]
    return name


FORMATS: list[Format] = [Harmony(), HarmonyBuiltin()]


# Harmony's channels (the openai/harmony format documentation; vLLM
# ``reasoning/gptoss_reasoning_parser.py``): ``analysis`` is reasoning and
# ends at ``<|end|>``; ``final`` is the answer; a ``commentary`` message with
# no recipient is a preamble the user sees (content); one addressed
# ``to=functions.NAME`` is a call (``Harmony`` above). The first message's
# ``<|start|>assistant`` is in the prompt; later ones repeat it.
#: A header addressed to the assistant itself and left without a message,
#: the real header right after it (llama.cpp's gpt-oss tests): debris, and
#: the header after it counts as it would alone.
_TO_SELF = "<|channel|>commentary to=assistant"
#: A final message may name a constrained content type, with or without a
#: blank before it (openai/harmony's ``test_harmony.py``: a ``final
#: <|constrain|>json`` answer with no recipient is the answer, not a call).
_FINAL_JSON = (
    "<|channel|>final <|constrain|>json<|message|>",
    "<|channel|>final<|constrain|>json<|message|>",
)

REASONING: list[Reasoning] = [
    Reasoning(
        "harmony",
        opens=_spelled(
            "<|channel|>analysis<|message|>",
            "<|start|>assistant<|channel|>analysis<|message|>",
            _TO_SELF + "<|channel|>analysis<|message|>",
        ),
        # The next message's header ends one too when the model left out
        # <|end|> (llama.cpp's gpt-oss parser reads it so).
        # <|return|> ends the reply's last message; openai/harmony's own test
        # data closes an analysis message with it.
        closes=_spelled(
            "<|end|>",
            "<|return|>",
            "<|start|>assistant<|channel|>final<|message|>",
            "<|start|>assistant<|channel|>commentary<|message|>",
        ),
        answer=_spelled(
            "<|channel|>final<|message|>",
            "<|start|>assistant<|channel|>final<|message|>",
            _TO_SELF + "<|channel|>final<|message|>",
            "<|start|>assistant" + _TO_SELF + "<|channel|>final<|message|>",
            "<|channel|>commentary<|message|>",
            "<|start|>assistant<|channel|>commentary<|message|>",
            *_FINAL_JSON,
            *("<|start|>assistant" + h for h in _FINAL_JSON),
        ),
        # <|end|> and <|return|> are special tokens the residue stripper
        # removes anyway.
        leading=_spelled(
            "<|channel|>analysis<|message|>",
            "<|channel|>final<|message|>",
            _TO_SELF + "<|channel|>analysis<|message|>",
            _TO_SELF + "<|channel|>final<|message|>",
            "<|channel|>commentary<|message|>",
            *_FINAL_JSON,
        ),
        repeats=True,
        # Calls are commentary messages to=functions.X: the final channel
        # and a preamble hold text only (JSON there is the answer).
        calls_apart=True,
    ),
    # A message with no channel is the assistant's text (openai/harmony's
    # parser returns its body so). Muse Glimmer writes the same header when
    # it fumbles a call's recipient (``muse_glimmer.py``), so it counts for
    # gpt-oss only.
    Reasoning(
        "harmony_bare",
        opens=(),
        closes=(),
        answer=("<|start|>assistant<|message|>",),
        repeats=True,
        calls_apart=True,
        models=(r"gpt-oss",),
    ),
    # The same channels with their special tokens stripped (a backend that
    # decodes with skip_special_tokens and no Harmony parser):
    # "<|channel|>analysis<|message|>" reads "analysis" and the final
    # message's header "assistantfinal" (Xinference's ``test_harmony.py``).
    # Plain words: they count only at the start of a gpt-oss reply (or one
    # that asks for reasoning).
    Reasoning(
        "harmony_stripped",
        opens=("analysis",),
        closes=("assistantfinal",),
        leading=("analysis",),
        models=(r"gpt-oss",),
    ),
]

#: gpt-oss always writes an analysis channel.
REASONING_MODELS = (r"gpt-oss",)
