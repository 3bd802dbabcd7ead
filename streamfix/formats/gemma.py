"""Google Gemma calls in Gemma's own argument syntax.

- Gemma 4: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:5,flag:true}<tool_call|>``
  — keys bare, strings between ``<|"|>`` tokens, numbers/booleans bare,
  nested ``{…}`` and ``[…]`` (vLLM ``tool_parsers/gemma4_tool_parser.py``,
  SGLang ``function_call/gemma4_detector.py``);
- FunctionGemma (Gemma 3 270M fine-tune):
  ``<start_function_call>call:NAME{key:<escape>text<escape>}<end_function_call>``
  (vLLM ``functiongemma_tool_parser.py``; Google's model card).

Inside a ``<|"|>…<|"|>`` (``<escape>…<escape>``) string the call and channel
tokens are text (Gemma 4's template writes them there; the tokenizer maps
them to the marker tokens): the region's end is looked for outside strings.

Gemma 4 sometimes drifts to ``key='value'`` / ``key="value"`` (Ollama issue
#17882): ``=`` after a key and quoted strings are read too. A call that
does not read is mended once (Ollama issue 15315): a ``<|"|>`` left after
a value quoted so is dropped, and a declared string property's value
written without delimiters is read up to the next declared key.

Gemma 3 itself has no call tokens: its ```` ```tool_code ```` fence is the
core fenced format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from ..spec import ToolSpec
from .base import EndFinder, Format, RawCall, Reasoning, Residue
from .scan import END, Peek, Structural, literal

G4_OPEN, G4_CLOSE, G4_QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
FG_OPEN, FG_CLOSE, FG_QUOTE = "<start_function_call>", "<end_function_call>", "<escape>"

_CALL = re.compile(r"\s*call\s*:\s*([^\s{}]+?)\s*(?=\{)")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?\Z")


class _Syntax(ValueError):
    pass


class _Reader:
    """Recursive-descent reader of one ``{…}`` argument object."""

    def __init__(self, text: str, quote: str) -> None:
        self.s = text
        self.q = quote
        self.bare = re.compile(r"[^{}\[\],:]+?(?=\s*[{}\[\],:]|\Z)|[^{}\[\],:]+", re.DOTALL)
        self.bare_key = re.compile(r"[^{}\[\],:=]+", re.DOTALL)

    def ws(self, i: int) -> int:
        while i < len(self.s) and self.s[i].isspace():
            i += 1
        return i

    def string(self, i: int) -> tuple[str, int]:
        j = self.s.find(self.q, i + len(self.q))
        if j < 0:
            raise _Syntax("unterminated string")
        return self.s[i + len(self.q) : j], j + len(self.q)

    def quoted(self, i: int) -> tuple[str, int]:
        q = self.s[i]
        j = i + 1
        while True:
            j = self.s.find(q, j)
            if j < 0:
                raise _Syntax("unterminated string")
            if self.s[j - 1] != "\\":
                break
            j += 1
        raw = self.s[i : j + 1]
        if q == '"':
            try:
                return str(orjson.loads(raw)), j + 1
            except orjson.JSONDecodeError:
                pass
        return raw[1:-1], j + 1

    def value(self, i: int) -> tuple[Any, int]:
        i = self.ws(i)
        if self.s.startswith(self.q, i):
            return self.string(i)
        c = self.s[i : i + 1]
        if c in ("'", '"'):
            return self.quoted(i)
        if c == "{":
            return self.obj(i)
        if c == "[":
            return self.arr(i)
        m = self.bare.match(self.s, i)
        if m is None or not m.group().strip():
            raise _Syntax("value expected")
        bare = m.group().strip()
        if bare.endswith(self.q) and self.q not in bare[: -len(self.q)]:
            # Closed but never opened (``query:weather in Tokyo<|"|>}``):
            # a string all the same.
            return bare[: -len(self.q)].strip(), m.end()
        return _scalar(bare), m.end()

    def key(self, i: int) -> tuple[str, int]:
        if self.s.startswith(self.q, i):
            return self.string(i)
        m = self.bare_key.match(self.s, i)
        if m is None or not m.group().strip():
            raise _Syntax("key expected")
        return m.group().strip().strip("\"'"), m.end()

    def obj(self, i: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        i += 1  # "{"
        while True:
            i = self.ws(i)
            if self.s.startswith("}", i):
                return out, i + 1
            if self.s.startswith(",", i):
                i += 1
                continue
            k, i = self.key(i)
            i = self.ws(i)
            if not self.s.startswith((":", "="), i):
                raise _Syntax("':' expected")
            out[k], i = self.value(i + 1)

    def arr(self, i: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        i += 1  # "["
        while True:
            i = self.ws(i)
            if self.s.startswith("]", i):
                return out, i + 1
            if self.s.startswith(",", i):
                i += 1
                continue
            if i >= len(self.s):
                raise _Syntax("unterminated list")
            v, i = self.value(i)
            out.append(v)


def _scalar(s: str) -> Any:
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    if s == "true":
        return True
    if s == "false":
        return False
    if s in ("null", "None"):
        return None
    if _NUMBER.match(s):
        f = float(s)
        return int(s) if "." not in s and "e" not in s.lower() else f
    return s


def parse_calls(body: str, quote: str) -> list[RawCall] | None:
    """``call:NAME{…}`` (one or more) in Gemma's syntax."""
    calls: list[RawCall] = []
    reader = _Reader(body, quote)
    i = 0
    while True:
        i = reader.ws(i)
        if i >= len(body):
            break
        m = _CALL.match(body, i)
        if m is None:
            return None
        try:
            args, i = reader.obj(m.end())
        except (_Syntax, IndexError, RecursionError):
            return None
        calls.append(RawCall(m.group(1), args))
    return calls or None


def _repairs(body: str, quote: str) -> list[str]:
    """``body`` with one string delimiter mended, when it has an odd number
    of them (Ollama issue 15315): one left after a value the model quoted
    with ``'``/``"`` (``pattern:'abc'<|"|>}``) is dropped; one closing a
    bare value gets its opening one. (A string never
    closed, ``command:<|"|>ls}``, is not guessed at: no call.)"""
    if body.count(quote) % 2 == 0:
        return []
    q = re.escape(quote)
    dangling = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""" + q + r"(?=\s*[,}\]])")
    out = [body[: m.end(1)] + body[m.end() :] for m in dangling.finditer(body)]
    # A bare value the model closed but never opened (SGLang's Gemma 4
    # tests: ``query:weather in Tokyo<|"|>}``): the opening one is put back.
    unopened = re.compile(
        r"([:\[,]\s*)((?:(?!"
        + q
        + r")[^{}\[\]:\s])(?:(?!"
        + q
        + r")[^{}\[\]:])*)"
        + q
        + r"(?=\s*[,}\]])"
    )
    out += [body[: m.end(1)] + quote + body[m.end(1) :] for m in unopened.finditer(body)][:8]
    return out


_LITERAL = re.compile(r"(?:-?\d|true\b|false\b|null\b)")


def _raw_strings(body: str, quote: str, tools: Mapping[str, ToolSpec]) -> str | None:
    """``body`` with the values of declared string properties that the
    model wrote without delimiters put between them: from after the key to
    the next declared key, or to the end of the call (whose ``}`` may be
    missing too; Ollama issue 15315: ``call:write{content:\n\n# Title…``).
    Only with the tool's schema; a value that opens as JSON is left alone."""
    m = _CALL.match(body)
    spec = tools.get(m.group(1)) if m else None
    props = spec.parameters.get("properties") if spec else None
    if not isinstance(props, dict) or not props:
        return None
    keys = re.compile(r"[{,]\s*(" + "|".join(re.escape(k) for k in props) + r")\s*:")
    found = list(keys.finditer(body))
    end = body.rstrip()
    end = end[:-1] if end.endswith("}") else end
    out, at, changed = [], 0, False
    for i, k in enumerate(found):
        stop = found[i + 1].start() if i + 1 < len(found) else len(end)
        value = body[k.end() : stop]
        head = value.lstrip()
        prop = props.get(k.group(1))
        if (
            not isinstance(prop, dict)
            or prop.get("type") != "string"
            or not head
            or head[0] in "{['\""
            or head.startswith(quote)
            or _LITERAL.match(head)
            or quote in value
        ):
            continue
        out.append(body[at : k.end()] + quote + value + quote)
        at, changed = stop, True
    if not changed:
        return None
    return "".join(out) + body[at : len(end)] + "}"


class _GemmaTokens(Format):
    wrapped: ClassVar[bool] = True
    open: ClassVar[str]
    close: ClassVar[str]
    quote: ClassVar[str]

    def end_finder(self, marker: str) -> EndFinder:
        # A close token inside a quoted string is text (the tokenizer
        # writes the marker token there too).
        table: dict[str, list[tuple[str, str]] | Peek] = {
            "out": [(literal(self.quote), "str"), (literal(self.close), END)],
            "str": [(literal(self.quote), "out")],
        }
        return Structural(len(marker), "out", table)

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        if not region.startswith(self.open):
            return None
        body = region[len(self.open) :].rstrip().removesuffix(self.close)
        calls = parse_calls(body, self.quote)
        if calls is None:
            raw = _raw_strings(body, self.quote, tools)
            for mended in [*_repairs(body, self.quote), *([raw] if raw else [])]:
                calls = parse_calls(mended, self.quote)
                if calls:
                    break
        return calls


class Gemma4(_GemmaTokens):
    name: ClassVar[str] = "gemma4"
    markers: ClassVar[tuple[str, ...]] = (G4_OPEN,)
    # SGLang's gemma4 detector keeps "text " before a call (vLLM's drops the
    # blank; the corpus has more fixtures of the first).
    layout_before: ClassVar[bool] = False
    open, close, quote = G4_OPEN, G4_CLOSE, G4_QUOTE


class FunctionGemma(_GemmaTokens):
    name: ClassVar[str] = "functiongemma"
    markers: ClassVar[tuple[str, ...]] = (FG_OPEN,)
    open, close, quote = FG_OPEN, FG_CLOSE, FG_QUOTE


FORMATS: list[Format] = [Gemma4(), FunctionGemma()]


# Gemma 4's thought channel: ``<|channel>thought\n…<channel|>`` before the
# answer (vLLM ``reasoning/gemma4_reasoning_parser.py``). With thinking off
# the template writes an empty one in the prompt. The channel may open
# without its ``thought`` header, or in the prompt (thinking on: only
# ``<channel|>`` shows); an empty channel the model writes again after the
# answer is debris (llama.cpp's Gemma 4 handler).
REASONING: list[Reasoning] = [
    Reasoning(
        "gemma4",
        opens=("<|channel>thought", "<|channel>"),
        closes=("<channel|>",),
        # A ``<channel|>`` later in the reply (one in a call's string) is
        # not the end of reasoning the prompt opened: left to the residue.
        leading=("<channel|>",),
        prefilled=True,
        # The channel may open after text ("Before\n<|channel>…<channel|>\n…",
        # vLLM's Gemma 4 tests): its own special tokens, reasoning there too.
        repeats=True,
    )
]

#: Gemma's turn tokens and FunctionGemma's call tokens, written as words;
#: a channel open left after the answer (its header with it); Gemma 4's
#: tool-response open, which the model may write after its call as the
#: template does (Ollama's Gemma 4 parser drops it there).
RESIDUE: list[Residue] = [
    Residue(
        words=("end_of_turn", "start_of_turn", "start_function_call", "end_function_call"),
        turn_ends=("<start_of_turn>user\n",),
    ),
    Residue(
        tokens=(r"<\|channel>(?:thought)?", r"<\|tool_response>"),
        partials=(r"<\|channel>(?:t(?:h(?:o(?:u(?:g(?:h)?)?)?)?)?)?\Z",),
    ),
]
