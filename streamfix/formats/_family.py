"""Shared pieces of the model-family format modules (mistral.py, llama.py,
deepseek.py, kimi.py, glm.py, harmony.py, granite.py, phi4.py, minimax.py,
gemma.py, …).

Two kinds of helper live here, so that each family module stays a table of
token spellings plus a few lines:

- ``Steps``: an incremental ``EndFinder`` for multi-part regions, built
  from parts run one after the other (``Until`` a closing token, a
  ``Header`` such as a function name, a ``Json``/code value, an
  ``Opt``-ional trailing token such as Harmony's ``<|call|>``). Each part
  scans only the new text, so the cost per piece is O(len(piece));
  nothing seen is rescanned.
- small parsers shared by several families: lenient JSON loading,
  ``<invoke
  name=…><parameter name=…>`` XML (MiniMax M2, DeepSeek V3.2/V4 DSML),
  ``<function=…><parameter=…>`` XML (Seed-OSS), pythonic call lists
  (Llama 4, LFM2, Olmo 3).

This module declares no format (``FORMATS`` is empty).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ..jsoncodec import loads as _json
from ..pycalls import read_calls
from ..spec import ToolSpec
from ..toolargs import call_node_args, is_instance, schema_types
from .base import ABORT, UNREADABLE, Format, RawCall
from .scan import Balanced, end_of_first, skipped

FORMATS: list[Format] = []

#: Longest header the finders accept between a marker and the part that
#: must follow (a function name before ``{``, a Harmony header before
#: ``<|message|>``). Longer means this is not the call syntax after all:
#: the region is aborted instead of being held for the whole stream.
MAX_HEADER_CHARS = 256


class Until:
    """Part that ends just after the first of ``closes``. ``limit`` (if
    set) aborts when that many characters pass without a close."""

    __slots__ = ("_closes", "_keep", "_limit", "_seen", "_tail")

    def __init__(self, *closes: str, limit: int | None = None) -> None:
        self._closes = closes
        self._keep = max(len(c) for c in closes) - 1
        self._tail = ""
        self._limit = limit
        self._seen = 0

    def scan(self, text: str, start: int) -> int | None:
        s = self._tail + text[start:]
        base = len(self._tail)
        best = end_of_first(s, self._closes)
        if best >= 0:
            return start + best - base
        self._seen += len(text) - start
        if self._limit is not None and self._seen > self._limit:
            return ABORT
        self._tail = s[-self._keep :] if self._keep else ""
        return None


class Header:
    """Part for the short header between a marker and what follows it (a
    function name before ``{``): ends just *before* the first character
    of ``stop`` (left for the next part) when the header so far
    ``fullmatch``-es ``valid``. A character outside ``allowed`` (a regex
    character class), a header so far that does not ``fullmatch``
    ``prefix`` (the prefixes of valid headers), an invalid header or more
    than ``limit`` characters abort: prose after a marker is released as
    text at once, not held."""

    __slots__ = ("_bad", "_head", "_limit", "_prefix", "_stop", "_valid")

    def __init__(
        self, stop: str, allowed: str, valid: str, prefix: str, limit: int = MAX_HEADER_CHARS
    ) -> None:
        self._stop = stop
        self._bad = re.compile(f"[^{allowed}{re.escape(stop)}]")
        self._valid = re.compile(valid, re.DOTALL)
        self._prefix = re.compile(prefix, re.DOTALL)
        self._limit = limit
        self._head = ""

    def scan(self, text: str, start: int) -> int | None:
        m = self._bad.search(text, start)
        end = m.start() if m else len(text)
        stop = -1
        for c in self._stop:
            i = text.find(c, start, end)
            if i >= 0 and (stop < 0 or i < stop):
                stop = i
        if stop >= 0:
            head = self._head + text[start:stop]
            if len(head) > self._limit or not self._valid.fullmatch(head):
                return ABORT
            return stop
        if m is not None:
            return ABORT
        self._head += text[start:]
        if len(self._head) > self._limit or not self._prefix.fullmatch(self._head):
            return ABORT
        return None


class Json:
    """Part holding one bracketed value (JSON or a Python literal),
    optionally after whitespace. The first other character must be one of
    ``first``; anything else aborts. With ``call=True`` a dotted name
    followed by ``(...)`` (``brave_search.call(query="x")``) is accepted
    too."""

    __slots__ = ("_bal", "_call", "_first", "_seen", "_state")

    _NAME_END = re.compile(r"[^\w.]")

    def __init__(self, first: str = "{[", call: bool = False) -> None:
        self._bal = Balanced()
        self._first = first
        self._call = call
        self._state = 0  # 0: before the value, 1: in a call's name, 2: in brackets
        self._seen = 0

    def scan(self, text: str, start: int) -> int | None:
        i = start
        n = len(text)
        if self._state == 0:
            while i < n and text[i].isspace():
                i += 1
            if i == n:
                return None
            c = text[i]
            if c in self._first:
                self._state = 2
            elif self._call and (c.isalpha() or c == "_"):
                self._state = 1
            else:
                return ABORT
        if self._state == 1:
            m = self._NAME_END.search(text, i)
            if m is None:
                self._seen += n - i
                return ABORT if self._seen > MAX_HEADER_CHARS else None
            if text[m.start()] != "(":
                return ABORT
            self._state = 2
        r = self._bal.feed(text[i:] if i else text)
        if r is None or r == ABORT:
            return r
        return i + r


class Opt:
    """Part for an optional token right after the previous part (no
    whitespace in between), e.g. Harmony's ``<|call|>``, or one of several
    (``<|call|>`` or ``<|end|>``: either ends the message).

    A token is taken when it is there; the first character that does not
    continue any of them ends the region *after* the characters that did
    (a broken ``<|ca`` is swallowed with the call), so the end offset does
    not depend on where the text was split. Until that character arrives
    the finder waits: ``Steps.complete`` tells the detector the region
    could end here.
    """

    __slots__ = ("_seen", "_tokens")

    def __init__(self, *tokens: str) -> None:
        self._tokens = tokens
        self._seen = ""

    def scan(self, text: str, start: int) -> int | None:
        for i in range(start, len(text)):
            seen = self._seen + text[i]
            live = [t for t in self._tokens if t.startswith(seen)]
            if not live:
                return i
            self._seen = seen
            if all(t == seen for t in live):
                return i + 1
        return None


class More:
    """Optional part after a JSON value: further values joined by ``sep``
    right after it (Llama 3.2 writes ``{…}; {…}``). The character after a
    value decides at once: ``sep`` continues (blanks after it are taken;
    a value must follow, else the region ends before the next character,
    the dangling ``sep`` with it); anything else ends the region there."""

    __slots__ = ("_after_sep", "_bal", "_sep")

    def __init__(self, sep: str) -> None:
        self._sep = sep
        self._after_sep = False
        self._bal: Balanced | None = None

    def scan(self, text: str, start: int) -> int | None:
        i = start
        n = len(text)
        while i < n:
            if self._bal is not None:
                r = self._bal.feed(text[i:])
                if r is None:
                    return None
                if r == ABORT:
                    return ABORT
                i += r
                self._bal = None
                continue
            c = text[i]
            if self._after_sep:
                if c.isspace():
                    i += 1
                    continue
                self._after_sep = False
                if c in "{[":
                    self._bal = Balanced()
                    continue
                return i
            if c == self._sep:
                self._after_sep = True
                i += 1
                continue
            return i
        return None


Part = Until | Header | Json | Opt | More

#: Parts a region may end without (``Steps.complete``).
_OPTIONAL = (Opt, More)


class Steps:
    """An ``EndFinder`` running ``parts`` one after the other, after
    skipping the first ``skip`` characters (the marker)."""

    __slots__ = ("_k", "_parts", "_skip")

    def __init__(self, skip: int, *parts: Part) -> None:
        self._skip = skip
        self._parts = parts
        self._k = 0

    @property
    def part(self) -> int:
        """The index of the part now being read."""
        return self._k

    @property
    def complete(self) -> bool:
        """True when every required part is done (only optional trailing
        tokens are still awaited): at the end of the stream the region is a
        whole call."""
        if any(isinstance(p, More) and p._bal is not None for p in self._parts[self._k :]):
            return False
        return all(isinstance(p, _OPTIONAL) for p in self._parts[self._k :])

    def feed(self, text: str) -> int | None:
        self._skip, i = skipped(self._skip, text)
        if self._skip:
            return None
        parts = self._parts
        while self._k < len(parts):
            r = parts[self._k].scan(text, i)
            if r is None or r == ABORT:
                return r
            i = r
            self._k += 1
        return i


def opens_with(skip: int, first: str, *closes: str) -> Steps:
    """Finder for a wrapper that is a plain tag, not a special token
    (``<seed:tool_call>``, ``[TOOL_CALL]``…): the body must open, after
    blanks, with one of ``first`` (``<`` of an element, ``{`` of JSON);
    anything else is prose that mentions the tag, released as text at once
    instead of being held to a closing tag that never comes."""
    return Steps(skip, Header(first, r"\s", r"\s*", r"\s*"), Until(*closes))


# --------------------------------------------------------------------------
# Parsing helpers


def loads(text: str) -> Any:
    """JSON, else a Python literal (single quotes, ``True``, trailing
    commas), else ``None``. Arguments are repaired later by ``toolargs.py``;
    this only reads the envelope (a list of call objects and the like)."""
    s = text.strip()
    if not s:
        return None
    try:
        return _json(s)  # integers of any size exact
    except orjson.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def strip_trailer(s: str, *tokens: str) -> str:
    """``s`` stripped, without a trailing token or the broken start of one
    (what an ``Opt`` part swallowed)."""
    s = s.strip()
    for t in tokens:
        for k in range(len(t), 0, -1):
            if s.endswith(t[:k]):
                s = s[:-k].rstrip()
                break
    return s


def strip_value(v: str) -> str:
    """An XML parameter value without the single newline that templates put
    after the opening and before the closing tag. A value written right
    after its opening tag keeps its last newline: that layout was not used
    (llama.cpp's Seed-OSS tests: code ending in a newline)."""
    if v.startswith("\r\n"):
        v = v[2:]
    elif v.startswith("\n"):
        v = v[1:]
    elif v.strip():
        return v
    if v.endswith("\r\n"):
        v = v[:-2]
    elif v.endswith("\n"):
        v = v[:-1]
    return v


def param_schema(tools: Mapping[str, ToolSpec], name: str, key: str) -> dict[str, Any] | None:
    """The schema of the parameter ``key`` of the tool ``name`` (a prefixed
    name too), or None when the tool or the parameter is not declared."""
    spec = tools.get(name) or tools.get(name.rsplit(".", 1)[-1].rsplit(":", 1)[-1])
    if spec is None:
        return None
    props = spec.parameters.get("properties")
    prop = props.get(key) if isinstance(props, dict) else None
    return _local_ref(spec.parameters, prop) if isinstance(prop, dict) else None


def _local_ref(root: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    """``prop``, or the schema its ``$ref`` names inside the tool's own
    parameters (``#/$defs/code``, as Pydantic writes a shared type): a
    string parameter so declared keeps its text (SGLang's IQuest Q1
    tests). A reference that points elsewhere, or at nothing, leaves
    ``prop`` as it is."""
    ref = prop.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return prop
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return prop
        node = node[part]
    return node if isinstance(node, dict) and node is not prop else prop


def typed_value(raw: str, tools: Mapping[str, ToolSpec], name: str, key: str) -> Any:
    """An XML parameter's text as the chat templates wrote it: raw for a
    string parameter, JSON (``tojson``) for any other. Decoded as JSON
    unless the offered tool's schema says the parameter is a string; text
    that is not JSON stays text (``toolargs.py`` converts it by schema later).
    A parameter that admits a string and other types (``["string",
    "object"]``) takes the JSON reading when it is one of those others
    (``{"a": 1}`` an object, ``7`` an integer), else the text as it stands
    (``2 dollars``), as llama.cpp's XML-call parsers do."""
    return _typed(raw, _types(tools, name, key))


def union_value(raw: str, tools: Mapping[str, ToolSpec], name: str, key: str) -> Any:
    """``typed_value`` for a parameter that admits a string and other types
    (for formats that leave the rest to ``toolargs.coerce``); the text as it
    stands for any other."""
    types = _types(tools, name, key)
    return _typed(raw, types) if "string" in types and len(types) > 1 else raw


def _types(tools: Mapping[str, ToolSpec], name: str, key: str) -> frozenset[str]:
    prop = param_schema(tools, name, key)
    return schema_types(prop) if prop is not None else frozenset()


def _typed(raw: str, types: frozenset[str]) -> Any:
    if types == {"string"}:
        return raw
    try:
        value = _json(raw)
    except orjson.JSONDecodeError:
        return raw
    if "string" in types and (
        isinstance(value, str) or not any(is_instance(value, t) for t in types)
    ):
        return raw
    return value


def contiguous(
    rx: re.Pattern[str], text: str, ignore: tuple[str, ...] = ()
) -> list[re.Match[str]] | None:
    """Matches of ``rx`` one after the other from the start of ``text``,
    with only blanks (and the tokens in ``ignore``) between and around
    them; None when anything else is there.

    Each match is tried once, at the position where the previous one
    ended: a region of unclosed elements costs one scan, not one per
    element as ``finditer`` would (it retries every later position)."""
    out: list[re.Match[str]] = []
    pos = 0
    n = len(text)
    while True:
        while True:
            while pos < n and text[pos].isspace():
                pos += 1
            for t in ignore:
                if text.startswith(t, pos):
                    pos += len(t)
                    break
            else:
                break
        if pos >= n:
            return out
        m = rx.match(text, pos)
        if m is None or m.end() == pos:
            return None
        out.append(m)
        pos = m.end()


def xml_calls(
    body: str,
    call_re: re.Pattern[str],
    param_re: re.Pattern[str],
    value: Callable[[re.Match[str], str], Any] | None = None,
    ignore: tuple[str, ...] = (),
    json_body: bool = True,
) -> list[RawCall] | None:
    """Calls written as XML elements: ``call_re`` matches one call with
    groups (name, body); inside, ``param_re`` matches parameters with
    groups (key, raw value); ``value(match, call_name)`` converts a
    parameter (default: the text of group 2, one newline trimmed each
    side). A call body holding no parameter but a JSON object gives that
    object (unless ``json_body`` is False: a family that writes none).

    Strict about what lies around the elements: anything but blanks (and
    the wrapper tokens in ``ignore``) between calls or parameters — such as
    a parameter cut off halfway by the end of the stream — gives None, so
    a broken call is never lifted with arguments missing."""
    found = contiguous(call_re, body, ignore)
    if not found:
        return None
    calls: list[RawCall] = []
    for m in found:
        name = m.group(1).strip()
        inner = m.group(2)
        s = inner.strip()
        if json_body and s.startswith("{"):
            calls.append(RawCall(name, s))
            continue
        params = contiguous(param_re, inner)
        if params is None:
            return None
        args: dict[str, Any] = {}
        for p in params:
            args[p.group(1).strip()] = value(p, name) if value else strip_value(p.group(2))
        calls.append(RawCall(name, args))
    return calls


def python_calls(text: str) -> list[RawCall] | None:
    """``[f(a=1), g()]`` or one or more ``f(a=1)`` lines: the calls, with
    keyword arguments as a dict, each read on its own (one that does not
    read is ``UNREADABLE`` in its place). None when the text is not only
    calls. What Python does not parse is read as models write it
    (``pycalls``)."""
    s = text.strip()
    if not s:
        return None
    try:
        tree = ast.parse(s, mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return _loose_calls(s)
    nodes: list[ast.expr] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            return None
        v = stmt.value
        if isinstance(v, ast.List | ast.Tuple):
            nodes.extend(v.elts)
        else:
            nodes.append(v)
    out: list[RawCall] = []
    for node in nodes:
        if not isinstance(node, ast.Call) or node.args:
            return None
        name = dotted_name(node.func)
        if name is None:
            return None
        got = call_node_args(node)
        out.append(UNREADABLE if got is None else RawCall(name, got[1]))
    return _some(out)


def _loose_calls(s: str) -> list[RawCall] | None:
    """``python_calls`` of text Python does not parse: a list or one call,
    else one call per line."""
    read = read_calls(s)
    if read is None:
        lines = [ln for ln in s.splitlines() if ln.strip()]
        if len(lines) < 2:
            return None
        read = []
        for ln in lines:
            one = read_calls(ln)
            read.extend([None] if one is None else one)
    return _some([UNREADABLE if c is None or c[1] else RawCall(c[0], c[2]) for c in read])


def _some(calls: list[RawCall]) -> list[RawCall] | None:
    return None if all(c is UNREADABLE for c in calls) else calls


def dotted_name(node: ast.expr) -> str | None:
    """``f`` or ``functions.f`` of a call's callee; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None
