"""Zhipu GLM 4.5 / 4.6 / 4.7 (and GLM-4.5V) calls:

``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n…</tool_call>``

GLM 4.7 drops the newlines (``<tool_call>NAME<arg_key>k</arg_key><arg_value>v…``);
a tool without arguments is ``<tool_call>NAME</tool_call>``. The chat
template writes string values raw and other values as JSON (``tojson``),
so a value is JSON-decoded unless the tool's schema says it is a string
(the template puts no layout inside ``<arg_value>``: blanks there are data)
(vLLM ``tool_parsers/glm4_moe_tool_parser.py`` / ``glm47_moe_tool_parser.py``,
SGLang ``glm4_moe_detector.py`` / ``glm47_moe_detector.py``). Older GLM-4
fine-tunes write ``NAME\\n{json}`` in the same tags; also parsed here.
GLM-5.3-Flash writes ``<tool_call>NAME>{json}`` and leaves the call open,
the next ``<tool_call>`` starting the next one (SGLang
``glm53_flash_detector.py`` and its tests): read too.

Slips users reported, repaired when the reading is certain: the opening
``<arg_value>`` missing (vLLM issue #49248), a doubled key tag (vLLM PR
#54971), a stray ``</arg_value>`` after the name of a call without
arguments (fireworks python-sdk #119), the opening ``<arg_key>`` lost so
that the name and the first key run together (``NAMEkey</arg_key>``, vLLM
PR #47190; split only at an offered tool's name).

A ``</tool_call>`` or ``<arg_key>`` inside a value is data (the tokenizer
writes the marker tokens there too): the end rule knows it is in a value
(``scan.TOOL_CALL_TABLE``). A value whose ``</arg_value>`` was lost before
``</tool_call>`` is kept (vLLM issue #57826). At the token limit, a call
whose ``</tool_call>`` never came is not whole.

``<tool_call>`` is shared with the core Hermes JSON and Qwen3-Coder XML
formats: this one uses the same end rule (``scan.tool_call_end``) and returns
None for their bodies (JSON, ``<function=…>``), so the registry tries each
parser in turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar

from ..spec import ToolSpec
from ..toolargs import schema_types
from ._family import contiguous, param_schema, strip_value, typed_value
from .base import SHAPE_MAX, EndFinder, Format, RawCall, resolve_name
from .scan import tool_call_end

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
#: Hunyuan v3 separates the name from the pairs with this tag (hunyuan.py).
HY_SEP = "<tool_sep>"

#: A call's name as GLM writes it after ``<tool_call>`` (``body_shape``).
_NAME = re.compile(r"[\w.:/-]+")

_HEAD = re.compile(r"\s*([^\s<>{}\[\]()\"',]+)\s*(.*)\Z", re.DOTALL)


def kv_calls(
    body: str,
    tools: Mapping[str, ToolSpec],
    key: str = "arg_key",
    value: str = "arg_value",
    exact: bool = False,
) -> list[RawCall] | None:
    """``NAME`` then ``<key>k</key><value>v</value>`` pairs (or a JSON object,
    or nothing): the one call in a GLM-style body, or None. Repairs the
    slips users reported (see the module docstring). ``exact``: a value is
    the text between its tags exactly (else one newline each side is
    layout)."""
    m = _HEAD.match(body)
    if m is None:
        return None
    name, rest = m.group(1), m.group(2)
    ko, kc, vc = f"<{key}>", f"</{key}>", f"</{value}>"
    if not rest or rest == vc:
        return [RawCall(name, {})]
    if rest.startswith(">") and rest[1:].lstrip().startswith("{"):
        rest = rest[1:].lstrip()  # GLM-5.3-Flash: NAME>{json}
    if rest.startswith("{"):
        return [RawCall(name, rest.strip())]
    if not rest.startswith(ko):
        assigned = _assignments(rest, tools, name)
        if assigned is not None:
            return [RawCall(name, assigned)]
        glued = _unglue(body, kc, tools)
        if glued is None:
            return None
        name, rest = glued
    rest = _lost_value_closes(rest, tools, name, key, value)
    pairs = contiguous(_pair_re(key, value), rest)
    if not pairs:
        return None
    args: dict[str, Any] = {}
    for p in pairs:
        k = p.group(1).strip()
        raw = p.group(2) if p.group(2) is not None else p.group(3)
        got = typed_value(raw if exact else strip_value(raw), tools, name, k)
        args[k] = _escaped_json(got, tools, name, k) if isinstance(got, str) else got
    return [RawCall(name, args)]


def _escaped_json(raw: str, tools: Mapping[str, ToolSpec], name: str, key: str) -> Any:
    """An array or object value written with its JSON's quotes escaped
    (``[{\\"id\\": \\"1\\"}]``, in a call whose tags are not escaped:
    SGLang's GLM-4.7 test), read once unescaped; the text as it stands when
    the parameter admits a string or the unescaped text is no JSON."""
    prop = param_schema(tools, name, key) if '\\"' in raw else None
    types = schema_types(prop) if prop is not None else frozenset()
    if "string" in types or not types & {"array", "object"}:
        return raw
    unescaped = _unescaped(raw)
    if unescaped is None:
        return raw
    got = typed_value(unescaped, tools, name, key)
    return raw if isinstance(got, str) else got


def _unescaped(text: str) -> str | None:
    """``text`` read as the inside of a JSON string (``\\n``, ``\\"``
    unescaped), or None when it is not one."""
    try:
        got = json.loads(f'"{text}"', strict=False)
    except ValueError:
        return None
    return got if isinstance(got, str) else None


def _lost_value_closes(
    rest: str, tools: Mapping[str, ToolSpec], name: str, key: str, value: str
) -> str:
    """The pairs with the ``</arg_value>`` a value lost before the next pair
    written back (``<arg_value>Paris<arg_key>unit</arg_key><arg_value>…``,
    Ollama's GLM parser tests): a value's own text holds no ``<arg_value>``
    without its close, so a pair of a declared parameter of the tool that
    starts inside an unclosed value is the next pair."""
    vo, vc = f"<{value}>", f"</{value}>"
    if rest.count(vo) <= rest.count(vc):
        return rest  # every value closed (the usual case): nothing to scan
    out: list[str] = []
    done = 0
    for m in _next_pair_re(key, value).finditer(rest):
        if param_schema(tools, name, m.group(1).strip()) is None:
            continue
        opened = rest.rfind(vo, done, m.start())
        if opened < 0 or vc in rest[opened : m.start()]:
            continue
        out += (rest[done : m.start()], vc)
        done = m.start()
    return "".join(out) + rest[done:] if out else rest


@lru_cache(maxsize=8)
def _next_pair_re(key: str, value: str) -> re.Pattern[str]:
    return re.compile(rf"<{key}>({_key_text(key, value)})</{key}>\s*<{value}>")


_ASSIGN = re.compile(r"""\s*([A-Za-z_][\w.\-]*)=("(?:[^"\\]|\\.)*"|'[^']*'|[^\s"'<>]+)\s*""")


def _assignments(rest: str, tools: Mapping[str, ToolSpec], name: str) -> dict[str, Any] | None:
    """``a=1 b="two words"``: arguments as ``key=value`` words after the
    name (mlx-lm reads GLM 4.7 so); None when the text is not only that."""
    found = contiguous(_ASSIGN, rest)
    if not found:
        return None
    args: dict[str, Any] = {}
    for m in found:
        raw = m.group(2)
        if raw[0] in "\"'":
            raw = raw[1:-1] if raw[0] == "'" else str(typed_value(raw, {}, name, ""))
        args[m.group(1)] = typed_value(raw, tools, name, m.group(1))
    return args


def _unglue(body: str, kc: str, tools: Mapping[str, ToolSpec]) -> tuple[str, str] | None:
    """``NAMEkey</arg_key>…`` (the opening key tag lost): split at the
    longest offered tool name the text starts with."""
    head, sep, tail = body.lstrip().partition(kc)
    if not sep or "<" in head:
        return None
    best = max((t for t in tools if head.startswith(t)), key=len, default=None)
    if best is None:
        return None
    k = head[len(best) :].strip()
    if not re.fullmatch(r"[\w.\-]+", k):
        return None
    return best, f"<{kc[2:]}{k}{sep}{tail}"


def _key_text(key: str, value: str) -> str:
    """A key's text: anything but a key or value tag."""
    return rf"(?:[^<]|<(?!/?{key}>|/?{value}>))*"


@lru_cache(maxsize=8)
def _pair_re(key: str, value: str) -> re.Pattern[str]:
    # Keys hold no key or value tag (a "<" of their own, as in "x<1>", is
    # text); doubled key tags and a lost opening value tag are tolerated
    # (vLLM PRs #54971, issue #49248).
    return re.compile(
        rf"\s*(?:<{key}>)+({_key_text(key, value)})(?:</{key}>)+\s*"
        rf"(?:<{value}>(.*?)|((?:(?!<{value}>|<{key}>|</{key}>).)*?))</{value}>\s*",
        re.DOTALL,
    )


class Glm(Format):
    name: ClassVar[str] = "glm"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True
    priority: ClassVar[int] = 120

    def end_finder(self, marker: str) -> EndFinder:
        return tool_call_end(len(marker))

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        """An offered tool's name, or any name followed (after blanks) by
        ``<`` (``<arg_key>``, ``<tool_sep>``, the close) or ``{``. "<tool_call>
        tags, and …" is prose."""
        s = region[len(OPEN) :].lstrip()
        if not s:
            return True if final else None
        m = _NAME.match(s)
        if m is None:
            return False
        if m.end() == len(s) and not final:
            return None if m.end() <= SHAPE_MAX else False  # the name may go on
        if resolve_name(m.group(), tools) is not None:
            return True
        rest = s[m.end() :].lstrip()
        if not rest:
            return False if final else None
        if rest[0] == ">":  # GLM-5.3-Flash's NAME>{json}
            rest = rest[1:].lstrip()
            if not rest:
                return False if final else None
            return rest[0] == "{"
        return rest[0] in "<{"

    def is_complete(self, region: str) -> bool:
        # At the token limit a call is whole only once ``</tool_call>``
        # came: before it, another argument may have followed.
        return region.rstrip().endswith(CLOSE)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(OPEN):
            return None
        body = region[len(OPEN) :].rstrip()
        closed = body.endswith(CLOSE)
        body = body.removesuffix(CLOSE).replace(HY_SEP, "\n", 1)
        if not closed and (cut := _close_begun(body)):
            # The reply stopped inside the close (``…</arg_value></tool_``,
            # Ollama's GLM tests): the call is as whole as one whose close
            # never came (at the token limit, ``is_complete`` says no).
            body = body[:-cut].rstrip()
        if closed:
            body = with_last_value_closed(body)
        if not closed and OPEN in body and (run := _open_run(body, tools)):
            return run
        calls = kv_calls(body, tools, exact=True)
        if calls and not closed and not _has_required(calls[0], tools):
            # The reply ended inside the call before a required argument came
            # (Ollama's GLM parser refuses it): it may have been cut, and run
            # so it could do what the model had not finished asking.
            return None
        if calls is None and ("\\n" in body or '\\"' in body):
            # The whole call written JSON-escaped (a literal \n between the
            # tags, \" in the values), as SGLang's GLM 4.5 test has it.
            unescaped = _unescaped(body)
            if unescaped is None:
                return None
            calls = kv_calls(unescaped.strip(), tools, exact=True)
        return calls


def _open_run(body: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
    """GLM-5.3-Flash's run of calls none of which is closed
    (``NAME>{json}<tool_call>NAME>{json}``): each ``<tool_call>`` starts the
    next call. Only when every piece is a whole ``NAME>{json}`` call (a
    ``<tool_call>`` inside a value leaves a piece that is not); else None."""
    calls: list[RawCall] = []
    for piece in body.split(OPEN):
        m = _HEAD.match(piece)
        if m is None or not m.group(2).startswith(">"):
            return None
        got = kv_calls(piece.rstrip(), tools, exact=True)
        if not got or not isinstance(got[0].arguments, str):
            return None
        try:
            whole = isinstance(json.loads(got[0].arguments), dict)
        except ValueError:
            return None
        if not whole:
            return None
        calls += got
    return calls


def with_last_value_closed(body: str) -> str:
    """``body`` of a call whose close came, with the ``</arg_value>`` its
    last value lost written back (vLLM #57826); else as it is."""
    if body.rfind("<arg_value>") > body.rfind("</arg_value>"):
        return body + "</arg_value>"
    return body


def _has_required(call: RawCall, tools: Mapping[str, ToolSpec]) -> bool:
    """Whether ``call`` gives every argument its tool requires."""
    name = resolve_name(call.name, tools)
    required = tools[name].parameters.get("required") if name else None
    if not isinstance(required, list) or not isinstance(call.arguments, dict):
        return True
    return all(k in call.arguments for k in required if isinstance(k, str))


def _close_begun(body: str) -> int:
    """The length of the start of ``</tool_call>`` that ``body`` ends with,
    after a value's close (0: none)."""
    for k in range(len(CLOSE) - 1, 1, -1):
        if body.endswith(CLOSE[:k]) and body[:-k].rstrip().endswith("</arg_value>"):
            return k
    return 0


FORMATS: list[Format] = [Glm()]

#: GLM 4.5 and later reason by default; so does Ling 3 (its template opens
#: ``<think>`` unless thinking is switched off, as Ollama's Bailing parser
#: reads it).
REASONING_MODELS = (r"glm-?4\.[5-9]", r"glm-?[5-9]", r"\bling-?3")

#: GLM 4.7 and 5 open ``<think>`` in the prompt; so does Ling 3, which
#: writes GLM's calls.
PROMPT_OPENS_MODELS = (r"glm-?4\.[7-9]", r"glm-?[5-9]", r"\bling-?3")
