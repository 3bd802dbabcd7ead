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
``unoffered_is_markup`` says what a region that parses as a call to a tool
the request did not offer is (default: ``wrapped``): tags such as
``<tools>`` hold prose too, so a parse failure there is text, but a call
to an unknown tool inside them is still markup.

``priority`` orders the formats (lower first, then by name; default 100,
the core shapes use 10-90): the registry tries the parsers of formats
sharing a marker in that order, and the first one's ``end_finder`` is used.
``line_start`` makes the markers count only at the start of a line.

Optional hooks with defaults: ``partial_is_call(region, tools)`` decides
whether an unfinished region at a ``length`` cut-off was a call (then it is
a cut-off call, neither shown nor returned); ``is_complete(region)`` whether
what parses there is whole (formats that tolerate missing closing tags say
no when the last value may be cut short); ``opaque_finder(marker)`` is
asked for when an end finder returns ``OPAQUE`` (a code fence in another
language: the region and everything up to the finder's end is plain text
that is not searched for calls).

``body_shape(region, tools, final)`` tells call syntax from prose that
mentions a marker: whether the text after the marker reads as this
format's body (True), not at all (False: "Hermes models wrap calls in
<tool_call> tags, and …"), or cannot tell yet (None; at the end of the
stream, ``final``, it must decide). The detector asks it while a wrapped
region's head is short (``SHAPE_MAX``); when every format sharing the
marker says False, the marker and what follows are text, released at once
(``lead_shape`` builds the usual answer). Default: True, call syntax.

Helpers: ``calls_from_value`` / ``call_from_object`` (calls written as
JSON objects, any key order, ``arguments``/``parameters``, the OpenAI
shape), ``resolve_name`` (``functions.x``, ``ns:x``, ``x:0`` -> ``x``; the
detector applies it to every name a parser returns).

Formats that share a marker (``<tool_call>`` opens Hermes JSON, Qwen3-Coder
XML and GLM calls) must share its end rule; the registry tries their
parsers in order.

A family's reasoning markup is declared beside its calls, as a module-level
``REASONING: list[Reasoning]``: what opens and closes its reasoning channel,
the headers of its answer channel, and whether its template may open the
reasoning itself (``prefilled``). The reasoning splitter
(``transforms/reasoning.py``) asks the registry for all of them. A module's
``REASONING_MODELS`` (regular expressions, case-insensitive, no groups)
name the family's models that reason before answering by default: what
the chain assumes of a request's model when the request says nothing.

Markup that is debris wherever it is left (wrapper tags, control tokens,
the end-of-turn words of a template) is declared as ``RESIDUE:
list[Residue]``; the residue stripper (``transforms/residue.py``) strips
what the families declare.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..spec import ToolSpec


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A family's reasoning markup, as its model writes it in ``content``.

    - ``opens``: markers that open the reasoning channel (``<think>``,
      ``[THINK]``, ``<|channel|>analysis<|message|>``);
    - ``closes``: markers that close a channel one of ``opens`` opened;
    - ``answer``: headers of the answer channel: dropped by the splitter,
      the text after them is content;
    - ``ends``: markup that ends an answer or a message: left to the
      residue stripper, which runs after the calls are lifted (such a
      marker inside a call's argument is data);
    - ``leading``: those of ``opens``, ``answer`` and (``prefilled``)
      ``closes`` that count only at the start of the reply (later, the
      family writes a longer form, and the short one may be part of a
      call's header or string);
    - ``prefilled``: the chat template may open the reasoning in the
      prompt, so a reply can start inside it and show only a close: all
      before that close is reasoning;
    - ``repeats``: the channel may open again later in the reply
      (Harmony's messages). Otherwise only the first section counts, as
      the reference parsers split at the first close: once the answer has
      begun or a section has closed, the family's open is text (a call's
      argument that names ``<think>``), and so are the closes after it;
    - ``calls_apart``: the template gives calls a channel of their own
      (Harmony's ``to=functions.X``), so the answer channels (``answer``)
      never hold calls: after one of their headers, JSON, a fence or a
      line of code is the answer, not a call (the detector lifts only the
      family's own call syntax there);
    - ``blank_first``: the template ends the prompt with a blank the
      model's reply then begins with when it skips the reasoning
      (HyperCLOVA X 14B's ``\n`` with thinking off): the blanks that begin
      a reply with no markup at its start are layout, dropped;
    - ``closed_off``: with thinking switched off the template writes the
      close in the prompt (Laguna's ``</think>``), and the model may write
      it again: a close that begins such a reply is that echo, markup
      (else, with thinking off, a close is the answer's text);
    - ``models``: regular expressions (case-insensitive, no groups) of the
      models whose replies use this markup, when it is words other replies
      may start with (Granite's "Here is my thought process:"): it then
      counts only for a request to such a model, or one that asks for
      reasoning. Empty: any reply.
    """

    name: str
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    answer: tuple[str, ...] = ()
    ends: tuple[str, ...] = ()
    leading: tuple[str, ...] = ()
    prefilled: bool = False
    repeats: bool = False
    calls_apart: bool = False
    blank_first: bool = False
    closed_off: bool = False
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Residue:
    """A family's markup that is debris wherever the detector left it in the
    content (the residue stripper removes it when tools were offered):

    - ``wrappers``: tag names that only ever wrap calls (``tool_call`` for
      ``<tool_call>``/``</tool_call>``): an unmatched closing tag, or an
      opening one with nothing after it at the end, is stripped;
    - ``brackets``: bracketed control tokens (``TOOL_CALLS`` for
      ``[TOOL_CALLS]``);
    - ``words``: bare-word special tokens (``end_of_turn`` for
      ``<end_of_turn>``);
    - ``headers``: tokens that open a turn and are followed by its role line
      (``<|im_start|>`` then ``assistant``): stripped with the role line,
      since a stray role word is debris too;
    - ``tokens``: regular expressions (no groups) of further whole tokens,
      and ``partials`` the prefixes of them that are held until the next
      text decides (anchored at the end of the text).

    - ``bars``: characters other than ``|`` that bar a family's special
      tokens as ``|`` does in ``<|…|>`` (DeepSeek's fullwidth bar).
    - ``turn_ends``: markup after which nothing is the model's reply: the
      end-of-turn token the server did not stop at (PLaMo 3's
      ``<|plamo:tag|>``), or the header of a turn the model goes on to write
      for the user (``<|im_start|>user\n``). The turn ends there
      (``transforms/turn_end.py``); each opens with ``<``.
    - ``in_reasoning``: regular expressions (no groups) of whole tokens that
      are debris in the reasoning too (Cohere's citation tags), and
      ``in_reasoning_partials`` the prefixes of them held until the next
      text decides (anchored at the end of the text).

    ``<|…|>`` tokens, and those barred by any family's ``bars``, need no
    declaration one by one: any of them is a special token.
    """

    wrappers: tuple[str, ...] = ()
    brackets: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()
    partials: tuple[str, ...] = ()
    bars: tuple[str, ...] = ()
    turn_ends: tuple[str, ...] = ()
    in_reasoning: tuple[str, ...] = ()
    in_reasoning_partials: tuple[str, ...] = ()

    def barring(self) -> str:
        """Every character that bars a special token: ``|``, then ``bars``."""
        return "|" + "".join(b for b in self.bars if b != "|")


#: Returned by ``EndFinder.feed`` when the region turns out not to be a
#: call at all (a bare ``{`` followed by prose): the detector releases it
#: as text at once instead of holding it to the end of the stream.
ABORT = -1

#: Returned by ``EndFinder.feed`` when the region is text that must not be
#: searched for calls (a fenced code block in a programming language): the
#: detector releases it and feeds ``Format.opaque_finder(marker)``, from the
#: region's start, until that finder returns the end of the opaque section.
OPAQUE = -2


@dataclass(frozen=True, slots=True)
class RawCall:
    """A call as written: ``name`` may carry a prefix (``functions.x``,
    ``tools:x``); ``arguments`` is a dict, text still to be parsed (JSON or
    a Python literal), or None for no arguments."""

    name: str
    arguments: Any = None


#: A call of a list or block that does not read, in its place among its
#: siblings (``Format.parse``): the detector lifts the others and counts it
#: ``dropped_call.unreadable``. A region of nothing else is unreadable.
UNREADABLE = RawCall("\x00unreadable")


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
    unoffered_is_markup: ClassVar[bool | None] = None  # None: same as ``wrapped``
    priority: ClassVar[int] = 100
    #: The markers count only at the start of a line (after blanks): a
    #: call written as code starts its line, ``x = lookup_order(…)`` is code.
    line_start: ClassVar[bool] = False
    #: Blanks between text and a call are the template's layout, left out of
    #: the content (the Hermes, Qwen, GLM and DeepSeek reference parsers);
    #: False where the family's reference parser keeps them (Kimi K2,
    #: SGLang's Gemma 4). Blanks at the reply's start or after a call are
    #: layout either way.
    layout_before: ClassVar[bool] = True
    #: The code-line rule: a call of this format (written as code, no
    #: wrapper token) is a call only when nothing but blanks or further
    #: calls follows it to the end of the reply. Prose after it makes it an
    #: example: it stays text, in place. The detector holds it until that
    #: is decided (``transforms/detect.py``).
    ends_reply: ClassVar[bool] = False
    #: Arguments that do not fit the tool's schema still make a call
    #: (counted ``invalid_arguments``), as in a wrapper; None: only when
    #: ``wrapped``. A bare candidate that does not fit is text.
    invalid_is_call: ClassVar[bool | None] = None
    #: The chat template ends the prompt with this marker for the models
    #: ``prompt_models`` names (regular expressions, case-insensitive, no
    #: groups): such a reply begins after it, showing none (Functionary
    #: v3.2's ``>>>``). When ``prompt_head`` says the reply's first line
    #: reads as what follows the marker, the prompt-marker step
    #: (``transforms/prompt_marker.py``) writes the marker back before it.
    prompt_marker: ClassVar[str] = ""
    prompt_models: ClassVar[tuple[str, ...]] = ()

    @property
    def markup_if_unoffered(self) -> bool:
        u = self.unoffered_is_markup
        return self.wrapped if u is None else u

    @property
    def call_if_invalid(self) -> bool:
        u = self.invalid_is_call
        return self.wrapped if u is None else u

    def closer_after(self, marker: str) -> str:
        """A closing token the model writes after a call it opened with
        ``marker`` but without the wrapper that token closes (Qwen3-Coder's
        ``</tool_call>`` after a bare ``<function=…>``): the detector drops
        it, with the blanks before it, when it is the next thing after the
        call. Default: none."""
        return ""

    def prompt_head(self, line: str, tools: Mapping[str, ToolSpec]) -> bool:
        """Whether the reply's first line (without its newline) is what
        follows ``prompt_marker`` in this format (see there)."""
        return False

    def is_header(self, region: str) -> bool:
        """Whether ``region``, which holds no call, is the header of a
        message of text (Functionary's ``>>>all\\n``): markup, stripped
        (counted ``stripped.header``); the text after it is the answer.
        Default: no."""
        return False

    def given_back(self, region: str) -> str:
        """The text a recognised region in which nothing reads goes out as
        (``given_back.unreadable``). Default: the region as written; a
        family whose header is all markup gives back the body."""
        return region

    def echo_after(self, region: str) -> str:
        """The text a model of this family may write again right after the
        call ``region`` (LFM2 repeats the call's body and its end token):
        the detector drops it when it is, exactly, the next thing after
        the call (blanks before it allowed). Default: none."""
        return ""

    def partial_is_call(self, region: str, tools: Mapping[str, ToolSpec]) -> bool:
        """At a ``length`` cut-off inside an unfinished region: was this a
        call (True: it is dropped as a cut-off call) or text (released)?"""
        return self.wrapped

    def is_complete(self, region: str) -> bool:
        """At a ``length`` cut-off inside a region whose end never came:
        whether what ``parse`` reads there is the whole call (JSON that
        closed) rather than one with its last value cut short (an XML
        value whose closing tag never came). Default: yes."""
        return True

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        """Whether the text after the marker at the start of ``region``
        (the head seen so far) is this format's call syntax (True), prose
        (False) or too short to tell (None, never when ``final``); see the
        module docstring. A decision must not change as more text comes."""
        return True

    def opaque_finder(self, marker: str) -> EndFinder:
        """The finder of an opaque section's end (see ``OPAQUE``); fed the
        region again from its start."""
        raise NotImplementedError

    def tool_markers(self, tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
        return ()

    def end_finder(self, marker: str) -> EndFinder:
        raise NotImplementedError

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        """The calls in a complete region (marker included), or None when
        the region is not this format's call syntax."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<format {self.name}>"


#: How far past its marker a wrapped region's head is read to tell call
#: syntax from prose (``Format.body_shape``); undecided by then: call syntax.
SHAPE_MAX = 128


def lead_shape(body: str, starts: tuple[str, ...], final: bool) -> bool | None:
    """``Format.body_shape`` for a body that must begin (after blanks) with
    one of ``starts``: True when it does, None while what is there may
    still become one (or nothing but blanks came yet), else False. At the
    end (``final``), a body of blanks only is True: a lone opener is
    debris, not prose."""
    s = body.lstrip()
    if not s:
        return True if final else None
    if s.startswith(starts):
        return True
    if not final and any(t.startswith(s) for t in starts):
        return None
    return False


#: Keys under which models write a call's name / its arguments.
NAME_KEYS = ("name", "function_name", "tool_name", "tool", "function")
ARG_KEYS = ("arguments", "parameters", "args", "input", "params")


def call_from_object(obj: Any) -> RawCall | None:
    """One call from a JSON object as models write it: ``{"name": …,
    "arguments"|"parameters": …}`` in any key order, or the OpenAI shape
    ``{"type": "function", "function": {"name": …, "arguments": "<json>"}}``.
    None when the object is not call-shaped (it has other keys too)."""
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function")
    if isinstance(fn, dict) and set(obj) <= {"type", "function", "id", "index"}:
        obj = fn
    name: Any = None
    for k in NAME_KEYS:
        v = obj.get(k)
        if isinstance(v, str) and v:
            name = v
            break
    if name is None:
        return None
    args: Any = None
    arg_key = None
    for k in ARG_KEYS:
        if k in obj:
            args, arg_key = obj[k], k
            break
    used = {k for k in NAME_KEYS if obj.get(k) == name}
    extra = set(obj) - used - {arg_key, "type", "id", "index"}
    if extra:
        return None
    return RawCall(name, args)


def calls_from_value(value: Any, siblings: bool = True) -> list[RawCall] | None:
    """The calls in a decoded JSON value: one call object, a list of them,
    or ``{"tool_calls": [...]}``. In a list, an element that is not a call
    beside ones that are is ``UNREADABLE`` in its place (``siblings``; else
    the list is None). None when no element is a call."""
    if isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    calls = []
    for item in items:
        c = call_from_object(item)
        if c is None and not siblings:
            return None
        calls.append(UNREADABLE if c is None else c)
    return None if all(c is UNREADABLE for c in calls) else calls


_INDEX_SUFFIX = re.compile(r":\d+\Z")  # Kimi's functions.NAME:0
_NS_SEP = re.compile(r"[.:/]")


def resolve_name(name: str, tools: Mapping[str, ToolSpec]) -> str | None:
    """The offered tool a written name refers to, or None. ``functions.x``,
    ``tools:x``, ``default_api.x``, ``ns.x`` and ``functions.x:0`` name an
    offered ``x``; an exact offered name always wins."""
    name = name.strip().strip("\"'`")
    if name in tools:
        return name
    for cand in (name, _INDEX_SUFFIX.sub("", name)):
        if cand in tools:
            return cand
        last = _NS_SEP.split(cand)[-1]
        if last in tools:
            return last
    return None


@dataclass(frozen=True, slots=True, eq=False)
class Plugin:
    """What one ``register`` call added (its ``name``: the module's or the
    first format's), read like a format module; ``unregister`` takes it."""

    name: str
    FORMATS: tuple[Format, ...] = ()
    REASONING: tuple[Reasoning, ...] = ()
    RESIDUE: tuple[Residue, ...] = ()
    REASONING_MODELS: tuple[str, ...] = ()
