"""Structured output: the reply a ``response_format`` asked for, made to be JSON.

A request that asks for JSON (``response_format`` ``json_object`` or
``json_schema`` on chat; ``text.format`` on ``/v1/responses``, which the
door maps to it) gets this step last among the built-in ones; a request that
does not is never touched by it (``json_spec`` is None: the step is not in
the pipeline). Reasoning markup before the JSON was moved to
``reasoning_content`` by the splitter, which such a request also gets.

Two modes, decided once, at the first ``{`` or ``[`` of the content (so the
choice does not depend on how the reply was split):

- **stream**: the JSON starts the reply, or follows a leading fence
  (```` ```json ````) or a sentence that ends its line ("Here is the
  data:"). The lead is dropped (counted ``json_fence`` / ``json_prose``) and
  the value is forwarded as it comes through ``jsonsyntax.JsonRewriter``:
  clean tokens leave as the model's own characters, broken ones repaired
  in place, only a comma, a key or a number held until the next token.
  A chunk whose tail is so held is kept back whole by the chain and, when
  the next tokens show nothing needed changing, sent as the upstream's own
  bytes (``chain``'s module doc: a valid reply passes byte for byte,
  chunk by chunk); only a chunk that was repaired is re-encoded.
  After the value, blanks are kept and a closing fence or prose dropped.
  At the end the value is checked against the schema; bytes already sent
  cannot be asked again, so a value that does not validate (or was cut by
  the token limit) keeps what was sent, completed to valid syntax, with a
  note on the finish chunk: ``"streamfix": {"json": "invalid", "error":
  "…"}``. No value is coerced in this mode.
- **hold**: ``json_schema`` with ``strict: true``, or a ``{`` inside a
  sentence, or none in the first ``MAX_LEAD`` characters. Nothing is sent
  until the end (the proxy keeps the client alive meanwhile); then the
  value is taken out of the text (``extract``: the first ``{``/``[``/``(``,
  or a top-level scalar the schema asks for; a later start only when the
  one before failed at its first token, i.e. was prose; prose and fences
  around it dropped and counted, JSON after it an error: ``tail_verdict``),
  repaired, coerced by the schema where the reading is certain
  (``toolargs.coerce`` on the top-level properties, as for tool
  arguments: ``"5"`` -> 5 for an integer), validated and sent as one
  delta. If it does not validate or was cut off, ``Report.json_invalid``
  says why: the proxy asks once more with that error in the instruction
  (``server/reask.py``), and the reply after that is sent with the note.

A reply that is already valid JSON and validates leaves byte for byte
(stream mode forwards its chunks as they came; hold mode checks the whole
text first, and sends it as one delta). A non-streamed reply is the same
step fed once, so it equals the streamed one at any split. Held text is
bounded by ``max_call_chars``: past it the reply is released as it came,
with the note (``json_too_long``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from .. import jsoncodec, schemas, toolargs
from ..delta import Delta
from ..spec import JsonSpec
from .jsonsyntax import JsonRewriter

if TYPE_CHECKING:
    from ..context import Context

#: Characters of lead (before the first ``{`` or ``[``) looked at; a reply
#: with none in them is held whole.
MAX_LEAD = 2048
#: ``{``/``[`` positions tried when a held reply is taken apart.
MAX_STARTS = 16

_FENCE_OPEN = re.compile(r"(?:```|~~~)[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n[ \t]*\Z")
_FENCE_CLOSE = re.compile(r"\s*(?:```|~~~)\s*\Z")
# a sentence that ends its line before the value: "Here is the data:\n"
_PROSE_LINE = re.compile(r"[\s\S]*(?:\n[ \t]*|:[ \t]*)\Z")


# -- the schema ------------------------------------------------------------


def schema_error(value: Any, spec: JsonSpec) -> str | None:
    """Why ``value`` is not what ``spec`` asks for, in a sentence; None
    when it is. The schema is compiled as data (``schemas``: nothing
    fetched, patterns on RE2, depth bounded); one streamfix will not run
    (refused with a 400 by the proxy) gives its reason here."""
    if spec.schema is None:
        return None if isinstance(value, dict) else "the reply is not a JSON object"
    try:
        v = schemas.compile_schema(spec.schema)
    except schemas.SchemaRefused as exc:
        return f"not checked against the schema: {exc}"
    if not v:
        return None
    return schemas.errors(v, value)


def coerce_value(value: Any, schema: dict[str, Any] | None) -> Any:
    """Top-level properties converted where certain (``toolargs.coerce``);
    a top-level scalar the same way (``"1"`` for an integer; JSON written
    as a string where the schema wants the object or array)."""
    if schema is None:
        return value
    if not isinstance(value, dict):
        return toolargs.convert_value(value, schema)
    out, changed = toolargs.coerce(value, schema)
    return out if changed else value


# -- taking a held reply apart ---------------------------------------------


class Extracted(NamedTuple):
    text: str  # the JSON to send (strict), "" when none was found
    error: str | None  # why it is not what was asked, or None
    counts: dict[str, int]


def _lead_kind(lead: str) -> str:
    """``json_fence`` or ``json_prose`` for the text before the value."""
    return "json_fence" if "```" in lead or "~~~" in lead else "json_prose"


def _rewrite(text: str, cut: bool) -> tuple[str, JsonRewriter]:
    rw = JsonRewriter()
    out = rw.feed(text)
    return out + rw.close(cut), rw


_BLANKS = " \t\r\n\xa0\u200b\ufeff\u3000"
_LEAD_FENCE = re.compile(r"\s*(?:```|~~~)[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n")
_FENCE_AT = re.compile(r"(?:```|~~~)")
_JSONP = re.compile(
    r"(?:\s|/\*[\s\S]*?\*/|//[^\n]*\n)*"
    r"(?!(?:NumberLong|NumberInt|NumberDecimal|ObjectId|ISODate|Timestamp|BinData)\b)"
    r"[A-Za-z_$][\w$.]*[ \t]*\((?=\s*[\[{\"'\d-])"
)
_JSONP_END = re.compile(r"\)[ \t\r\n]*;?[ \t\r\n]*\Z")
#: A reference mark in prose (``see [1]``, ``[2, 3]``): a list of numbers
#: that prose after the value cites, not a second value the model answered.
_CITATION = re.compile(r"\[[ \t]*\d{1,3}(?:[ \t]*,[ \t]*\d{1,3})*[ \t]*\]")


def tail_verdict(tail: str) -> tuple[str | None, str | None]:
    """What the text after the value is: ``(count, error)``. Blanks: nothing.
    A closing fence, or prose with no JSON in it: dropped and counted
    (``json_fence`` / ``json_prose``). A lone trailing comma: dropped
    (``json_comma``). Anything that reads as JSON (a second value, members
    after the closed object, a fenced value after the fence): an error,
    since dropping it would lose what the model wrote."""
    t = tail.strip(_BLANKS)
    if not t:
        return None, None
    if t == ",":
        return "json_comma", None
    if not t.strip(_BLANKS + "}]"):
        return "json_bracket", None  # closers with nothing open: dropped
    if t[0] in ",:}])\"'{[(":
        return None, f"text after the JSON value reads as JSON: {t[:60]!r}"
    for starts, m in enumerate(re.finditer(r"[\[{]", t)):
        if starts >= MAX_STARTS:
            break
        if _CITATION.match(t, m.start()):
            continue
        rw = JsonRewriter()
        rw.feed(t[m.start() :])
        rw.close()
        if rw.error is None:
            return None, f"a second JSON value after the first: {t[m.start() : m.start() + 60]!r}"
    return ("json_fence" if _FENCE_AT.match(t) else "json_prose"), None


def _starts(text: str, spec: JsonSpec) -> list[int]:
    """Where a value may start: each ``{``, ``[`` and ``(``; and, with a
    schema, the first character (after a leading fence) when it is a quote
    (a string, or JSON written as one) or the schema asks for no object or
    array at the top (a top-level scalar), tried first."""
    at = [m.start() for m in re.finditer(r"[\[{(]", text)][:MAX_STARTS]
    m = _LEAD_FENCE.match(text)
    first = m.end() if m is not None else 0
    while first < len(text) and text[first] in _BLANKS:
        first += 1
    if first < len(text) and first not in at and spec.schema is not None:
        types = toolargs.schema_types(spec.schema)
        if text[first] in "\"'\u201c\u2018\\" or (types and not types & {"object", "array"}):
            at.insert(0, first)
    return at


def extract(text: str, spec: JsonSpec, cut: bool) -> Extracted:
    """The value in a whole reply, repaired, coerced and checked. A later
    start is tried only when the one before failed at its first token
    (prose with a bracket in it: ``(see below)``); a value that began to
    read and then failed is the answer, refused."""
    try:
        value = jsoncodec.loads(text)
    except (orjson.JSONDecodeError, ValueError):
        pass
    else:
        err = schema_error(value, spec)
        if err is None:
            return Extracted(text, None, {})
    m = _JSONP.match(text)
    if m is not None:
        # ``callback({...});``: the call around the value is dropped
        end = _JSONP_END.search(text, m.end())
        text = text[m.end() : end.start() if end is not None else len(text)]
    best: tuple[str, JsonRewriter, int] | None = None
    for start in _starts(text, spec):
        out, rw = _rewrite(text[start:], cut)
        best = (out, rw, start)
        if rw.error is None or rw.tokens > 1:
            break
    if best is None or (best[1].error is not None and best[1].tokens <= 1):
        # nothing to repair: the text as it came, with the note
        return Extracted(text, "the reply holds no JSON value", {})
    out, rw, at = best
    counts = dict(rw.counts)
    if text[:at].strip(_BLANKS):
        counts[_lead_kind(text[:at])] = counts.get(_lead_kind(text[:at]), 0) + 1
    kind, tail_error = tail_verdict(rw.tail)
    if kind is not None:
        counts[kind] = counts.get(kind, 0) + 1
    try:
        value = jsoncodec.loads(out)
    except (orjson.JSONDecodeError, ValueError):
        return Extracted(out, f"not JSON after repair: {rw.error or 'unreadable'}", counts)
    if rw.error is not None:
        error: str | None = f"not repaired: {rw.error}"
    elif cut and (rw.counts["json_cut"] or rw.counts["json_dropped"]):
        error = "cut off by the token limit inside the JSON"
    elif tail_error is not None:
        error = tail_error
    else:
        fixed = coerce_value(value, spec.schema)
        if fixed is not value:
            counts["json_coerced"] = counts.get("json_coerced", 0) + 1
            out = jsoncodec.dumps(fixed).decode()
            value = fixed
        error = schema_error(value, spec)
    return Extracted(out, error, counts)


# -- the step -------------------------------------------------------------

_LEAD, _STREAM, _HOLD, _OFF = range(4)


class JsonOutput:
    """The step (see the module docstring)."""

    ignores_reasoning = True

    __slots__ = (
        "_called",
        "_lane",
        "_lead",
        "_mode",
        "_opened",
        "_rw",
        "_sent",
        "_sent_chars",
        "ctx",
        "spec",
    )

    def __init__(self, ctx: Context, spec: JsonSpec) -> None:
        self.ctx = ctx
        self.spec = spec
        self._mode = _HOLD if spec.strict else _LEAD
        self._lead: list[str] = []  # held text (lead, or the whole reply in hold mode)
        self._rw: JsonRewriter | None = None
        self._sent: list[str] = []  # what stream mode released (for the check)
        self._sent_chars = 0
        self._lane: tuple[str, str] | None = None  # a declined text and its output
        self._called = False  # a tool call was emitted: an answer without JSON
        self._opened = False  # a ``{`` or ``[`` was taken (``holds_value``)

    @property
    def streaming(self) -> bool:
        """The reply may still leave as it came (stream mode, or the lead
        before it): the chain keeps a chunk back whole while part of its
        text is held (``chain``'s module doc)."""
        return self._mode == _STREAM or self._mode == _LEAD

    @property
    def holding(self) -> bool:
        """The reply is held until its end (hold mode, or not decided yet)."""
        return self._mode in (_LEAD, _HOLD)

    def holds_value(self, pending: str) -> bool:
        """Whether the content seen so far, then ``pending`` (text not fed
        yet), is inside the JSON value: a ``{`` or ``[`` has come. For the
        repetition cutter, which runs before us
        (``RepetitionCutter.watch_calls``): counted repetition in the value
        is data, as in a call's arguments; in a lead of prose it is a loop.
        Cautious: text after the value still counts, which only makes a
        cut later. It changes nothing."""
        return self._opened or self._mode == _STREAM or "{" in pending or "[" in pending

    # -- the text lane ---------------------------------------------------

    def feed_text(self, text: str) -> bool:
        if self._mode == _STREAM:
            out = self._stream(text)
            if out == text:
                return True
            self._lane = (text, out)  # feed() gives this output for this very text
            return False
        return self._mode == _OFF

    def feed(self, d: Delta) -> None:
        if d.calls:
            self._called = True
        if d.content is None:
            return
        lane = self._lane
        if lane is not None and lane[0] is d.content:
            self._lane = None
            d.content = lane[1]
            return
        d.content = self._take(d.content)

    def close(self, d: Delta) -> None:
        text = self._take(d.content) if d.content else ""
        cut = d.finish_reason == "length"
        report = self.ctx.report
        error: str | None = None
        if d.calls or self._called:
            self._called = True
            if self._mode in (_LEAD, _HOLD) and not "".join(self._lead).strip():
                return  # the turn is a tool call, not an answer
        if self._mode == _OFF:
            d.content = text or None
            return
        if self._mode == _STREAM:
            assert self._rw is not None
            rw = self._rw
            rest = rw.close(cut)
            self._sent.append(rest)
            kind, tail_error = tail_verdict(rw.tail)
            if kind is not None:
                report.count(kind)
            text += rest
            for k, n in rw.counts.items():
                report.count(k, n)
            if rw.error is not None:
                error = f"not repaired: {rw.error}"
            elif cut and (rw.counts["json_cut"] or rw.counts["json_dropped"]):
                error = "cut off by the token limit inside the JSON"
            elif tail_error is not None:
                error = tail_error
            elif self._sent_chars <= self.ctx.options.max_call_chars:
                try:
                    value = jsoncodec.loads("".join(self._sent))
                except (orjson.JSONDecodeError, ValueError):
                    error = "not JSON after repair"
                else:
                    error = schema_error(value, self.spec)
        else:
            whole = "".join(self._lead)
            self._lead.clear()
            if self._mode == _LEAD or self._mode == _HOLD:
                got = extract(whole, self.spec, cut)
                for k, n in got.counts.items():
                    report.count(k, n)
                text, error = got.text, got.error
        d.content = text or None
        if error is not None:
            report.count("json_invalid")
            report.json_invalid = error
            d.ext = {**(d.ext or {}), "json": "invalid", "error": error}

    # -- inside ----------------------------------------------------------

    def _take(self, text: str) -> str:
        """Content in; what to release now."""
        mode = self._mode
        if mode == _STREAM:
            return self._stream(text)
        if mode == _OFF:
            return text
        if not self._opened and ("{" in text or "[" in text):
            self._opened = True
        self._lead.append(text)
        self._sent_chars += len(text)
        if self._sent_chars > self.ctx.options.max_call_chars:
            # held past the bound: released as it came, with the note
            self._mode = _OFF
            self.ctx.report.count("json_too_long")
            self.ctx.report.json_invalid = "the reply is longer than streamfix holds"
            out = "".join(self._lead)
            self._lead.clear()
            return out
        if mode == _HOLD:
            return ""
        return self._decide()

    def _decide(self) -> str:
        """In the lead: stream mode once the value's start is seen after
        nothing, a fence or a sentence that ends its line; hold otherwise."""
        lead = "".join(self._lead)
        m = re.search(r"[\[{]", lead[: MAX_LEAD + 1])
        if m is None:
            if len(lead) > MAX_LEAD:
                self._mode = _HOLD
                self._lead = [lead]
            return ""
        before = lead[: m.start()]
        if before.strip() and not (_FENCE_OPEN.search(before) or _PROSE_LINE.match(before)):
            self._mode = _HOLD
            self._lead = [lead]
            return ""
        self._lead.clear()
        self._sent_chars = 0
        self._mode = _STREAM
        self._rw = JsonRewriter()
        out = ""
        if before.strip():
            self.ctx.report.count(_lead_kind(before))
        else:
            out = before  # blanks before the value leave as they came
            self._sent.append(before)
        return out + self._stream(lead[m.start() :])

    def _stream(self, text: str) -> str:
        assert self._rw is not None
        out = self._rw.feed(text)
        if out:
            self._sent_chars += len(out)
            if self._sent_chars <= self.ctx.options.max_call_chars:
                self._sent.append(out)
        return out
