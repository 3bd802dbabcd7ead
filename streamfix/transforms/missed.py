"""A call the chain may have missed: an offered tool's name followed, a
short way on, by text that reads as that tool's arguments, in a reply
from which nothing was lifted (counted ``possible_missed_call`` and
sampled in the Report; the proxy counts it in
``streamfix_possible_missed_calls_total`` and records the reply as
``missed``).

The unrecognised-markup watch (``transforms/detect.py``) sees only the
spellings it knows (``<|…|>``, ``<…tool…>``, ``[TOOL_…]``); a shape such as
``@@call get_weather {"city": "Paris"} @@end`` leaves it no trace. What
every shape has in common is the tool's name and its arguments, and the
request says which those can be. A call written as a JSON object
(``{"name": "get_weather", "arguments": {…}}``, any key order) counts too.

Cheap by construction: the step only keeps the first ``MAX_SCAN``
characters of content (one append per chunk, on the text lane), and
looks once, at the end of a reply, only when tools were offered and no
call came out: one ``str.find`` per name (at most ``MAX_NAMES`` names, at
most ``MAX_HITS`` places each), then at most ``MAX_ARGS`` characters of
balanced-bracket scan after a ``{`` that stands within ``NEAR`` characters
of the name. The arguments must be a JSON object (or a Python dict) whose
keys, at least one, are all parameters of that tool, its required ones
among them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..context import Context
from ..delta import Delta
from ..formats.base import call_from_object
from ..formats.scan import Balanced
from ..spec import ToolSpec
from ..toolargs import INVALID, parse_value

#: Characters of content kept and searched.
MAX_SCAN = 16384
#: Offered names looked for (the first of the request's).
MAX_NAMES = 64
#: Places looked at for one name.
MAX_HITS = 8
#: Most characters between a name's end and its arguments' ``{``.
NEAR = 64
#: Most characters of the arguments scanned for their end.
MAX_ARGS = 4096
#: Characters of context kept each side in a sample.
AROUND = 64

_NAME_CHAR = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _arguments_end(text: str, at: int) -> int | None:
    """The end of the bracketed value that opens at ``text[at]``, within
    ``MAX_ARGS`` characters, or None."""
    end = Balanced(first="{").feed(text[at : at + MAX_ARGS])
    return None if end is None or end < 0 else at + end


def _object(args: object) -> object:
    """Arguments as a call object holds them: an object, or JSON text of one."""
    if isinstance(args, str):
        v = parse_value(args)
        return None if v is INVALID else v
    return args


def fits(args: object, spec: ToolSpec) -> bool:
    """Whether ``args`` reads as ``spec``'s arguments: an object whose
    keys (at least one) are all its parameters, its required ones too."""
    if not isinstance(args, dict) or not args:
        return False
    props = spec.parameters.get("properties")
    if not isinstance(props, dict) or not set(args) <= set(props):
        return False
    required = spec.parameters.get("required")
    return not isinstance(required, list) or set(required) <= set(args)


def find_missed(text: str, tools: Mapping[str, ToolSpec]) -> tuple[str, int, int, int] | None:
    """The first offered tool's name in ``text`` followed within ``NEAR``
    characters by its arguments: ``(name, name_at, args_at, args_end)``,
    else None (see the module docstring for the bounds)."""
    return next(hits(text, tools), None)


def enclosing_call(text: str, name: str, at: int) -> tuple[int, int] | None:
    """The JSON object around the quoted name at ``at`` that reads as a
    call to it (``{"name": …, "arguments": …}`` in any key order): its
    start and end, looked for at most ``MAX_ARGS`` characters back (at
    most ``MAX_HITS`` braces tried)."""
    if at == 0 or text[at - 1] != '"' or text[at + len(name) : at + len(name) + 1] != '"':
        return None
    lo = max(0, at - MAX_ARGS)
    i = text.rfind("{", lo, at)
    for _ in range(MAX_HITS):
        if i < 0:
            return None
        end = _arguments_end(text, i)
        if end is not None and end > at:
            v = parse_value(text[i:end])
            call = call_from_object(v) if v is not INVALID else None
            if call is not None and call.name == name:
                return i, end
        i = text.rfind("{", lo, i)
    return None


def hits(text: str, tools: Mapping[str, ToolSpec]) -> Iterator[tuple[str, int, int, int]]:
    """Every place ``find_missed`` would accept, tool by tool (``streamfix
    learn`` reads each as a sample of a shape): ``(name, name_at,
    args_at, args_end)``, the arguments written after the name, or, for a
    call written as a JSON object, that object's start and end."""
    text = text[:MAX_SCAN]
    for n, (name, spec) in enumerate(tools.items()):
        if n >= MAX_NAMES:
            break
        if not name:
            continue
        i = text.find(name)
        hits = 0
        while i >= 0 and hits < MAX_HITS:
            hits += 1
            j = i + len(name)
            if (i == 0 or text[i - 1] not in _NAME_CHAR) and (
                j == len(text) or text[j] not in _NAME_CHAR
            ):
                obj = enclosing_call(text, name, i)
                k = text.find("{", j, j + NEAR + 1)
                if obj is not None:
                    call = call_from_object(parse_value(text[obj[0] : obj[1]]))
                    if call is not None and fits(_object(call.arguments), spec):
                        yield name, i, obj[0], obj[1]
                elif k >= 0:
                    e = _arguments_end(text, k)
                    if e is not None:
                        v = parse_value(text[k:e])
                        if v is not INVALID and fits(v, spec):
                            yield name, i, k, e
            i = text.find(name, j)


class MissedCalls:
    """The step (see the module docstring); runs after the detector and
    the residue stripper, so it sees what the client gets."""

    ignores_reasoning = True

    __slots__ = ("_calls", "_parts", "_size", "ctx")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._parts: list[str] = []
        self._size = 0
        self._calls = False

    def _keep(self, text: str) -> None:
        if self._size < MAX_SCAN:
            self._parts.append(text)
            self._size += len(text)

    def feed_text(self, text: str) -> bool:
        self._keep(text)
        return True

    def feed_texts(self, texts: list[str], joined: str) -> int:
        self._keep(joined)
        return len(texts)

    def feed(self, d: Delta) -> None:
        if d.calls:
            self._calls = True
        if d.content:
            self._keep(d.content)

    def close(self, d: Delta) -> None:
        self.feed(d)
        if self._calls or not self._parts:
            return
        text = "".join(self._parts)
        self._parts = []
        hit = find_missed(text, self.ctx.tools)
        if hit is not None:
            _, at, _, end = hit
            self.ctx.report.sample_missed(text[max(0, at - AROUND) : end + AROUND])
