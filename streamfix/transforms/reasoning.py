"""Reasoning in ``content`` goes to ``reasoning_content``.

Reasoning models served without a reasoning parser send their thoughts as
text, each family in its own markup. The families declare it in the format
registry (``formats/base.Reasoning``, a module's ``REASONING``): what opens
and closes the reasoning channel (a pair of tags, a channel header and its
end, a section) and the markup around the answer channel (its headers),
which is dropped. The tool-tag
detector runs after this splitter and only sees ``content``, so a call
drafted inside reasoning is never lifted.

**Prefilled reasoning.** When the chat template opened the reasoning in
the prompt (the families say so: ``Reasoning.prefilled``), only the close
arrives: everything before it is reasoning (the serving engines'
reasoning parsers treat a lone close the same way). So the start of a reply may be held until it
is known whether it is reasoning: at most ``Context.reasoning_hold``
characters (``UNOPENED_HOLD`` for a request to a reasoning model, or to a
model the proxy saw reason on that row; none otherwise, since holding
delays every reply's first text, and none when the request switches
thinking off). A close of a family whose template can open the reasoning
(``Reasoning.prefilled``) within that many characters makes all before it
reasoning, unless it is inside inline code or a code block (then it is
the answer's text, as everywhere else). Otherwise the text was content
all along and is released.

*A reply cut by the token limit* (``finish_reason: "length"``) inside the
hold with no markup at all is reasoning only when both hold: the template
is known to open the reasoning in the prompt
(``Context.prompt_opens_reasoning``: the request asks a reasoning model by
name or by a field, or the proxy saw this model on this row close
reasoning it never opened), which a request that switches thinking off
(``chat_template_kwargs``, or a ``/no_think`` soft switch) never is; and no call
began in the text (a call, even cut, is the answer's: the text before it
stays content). A hold that comes only from the proxy having seen the
model reason in its own markup (which it opens itself) does not
make its cut answer reasoning. The decisions depend on positions in
the text, not on chunking, so the split is the same for any chunking. The
hold is skipped when the upstream already separates reasoning (a reasoning
field arrived first). Without a hold, markup is still recognised at the
very start of the reply (after blanks).

**Layout.** The blanks the templates put around the channels (after an
open, before a close, after a close or an answer header, before the first
marker) are layout, not text: the reference parsers drop them, and so does
this splitter. Blanks at the end of reasoning are held (at most
``MAX_BLANK_HOLD``) until it is known whether the close follows.

**Code.** After the start, a marker inside inline code or a code block (an
odd number of backtick runs before it) is text the user asked for: an
answer that explains a closing tag keeps it. Only runs when the request
offered tools (``chain.build_pipeline``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from ..context import UNOPENED_HOLD as CONTEXT_UNOPENED_HOLD
from ..context import Context, Report
from ..delta import Delta, take_each
from ..formats.base import Reasoning
from ..formats.registry import (
    all_formats,
    all_reasoning,
    markers_for,
    on_change,
    prompt_closed_models,
    prompt_opening_models,
)
from .codespans import CodeSpans
from .detect import ToolTagDetector, matcher_for

#: How much of the start of a reply is held, at most, while it may still be
#: an unopened reasoning section (characters; about 500 tokens). A longer
#: reasoning section whose close comes later is released as content; its
#: stray close is then stripped, and the report says the model reasons
#: (the proxy holds for that upstream from then on).
UNOPENED_HOLD = CONTEXT_UNOPENED_HOLD

#: Blanks at the end of reasoning held until it is known whether its close
#: follows (they are layout then). A longer run of blanks is released.
MAX_BLANK_HOLD = 256

#: How much of unclosed reasoning is held, at most, from a family's call
#: marker on, while it may still be a call that ends the reply (and so the
#: reasoning). Longer: it is reasoning, and so is the rest of the section.
DRAFT_MAX = 32 * 1024

#: How many of the call markers in such held text are tried, at the end,
#: as the start of the calls that end the reply.
DRAFT_TRIES = 8

#: How far before a marker a call's marker may begin for the marker to be
#: in that call's header (``_in_call_head``), and what may stand between.
_HEAD_MAX = 256
_HEAD_NAME = re.compile(r"[^\s<]*\s?")
#: A special token (``<|close|>``): where an answer end's start at the
#: reply's end begins with one, the model was writing that end.
_SPECIAL = re.compile(r"<\|[^|<>\s]+\|>")

_START, _TEXT, _THINK = 0, 1, 2
_OPEN, _CLOSE, _ANSWER = 0, 1, 2


def _alternation(markers: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(m) for m in sorted(set(markers), key=len, reverse=True)))


def _prefixes(markers: list[str]) -> frozenset[str]:
    return frozenset(m[:i] for m in markers for i in range(1, len(m)))


@dataclass(frozen=True, slots=True)
class _Table:
    """The markers the splitter looks for in one state, compiled once."""

    pattern: re.Pattern[str]
    prefixes: frozenset[str]
    longest: int
    first: re.Pattern[str]  # the characters markers start with

    @classmethod
    def of(cls, markers: list[str]) -> _Table:
        return cls(
            _alternation(markers),
            _prefixes(markers),
            max(map(len, markers)),
            re.compile("[" + re.escape("".join(sorted({m[0] for m in markers}))) + "]"),
        )

    def partial(self, s: str) -> int:
        """Length of the longest suffix of ``s`` that is a proper prefix of
        one of the markers."""
        for m in self.first.finditer(s, max(0, len(s) - self.longest + 1)):
            if s[m.start() :] in self.prefixes:
                return len(s) - m.start()
        return 0


@dataclass(frozen=True, slots=True)
class _Markup:
    """All families' reasoning markup, as the states need it."""

    #: marker -> (kind, family), for the start and the text states; an
    #: answer marker that is also a close (a channel's end token) is an
    #: answer there.
    kinds: dict[str, tuple[int, Reasoning]]
    start: _Table  # opens, answers, and the closes of prefilled families
    text: _Table  # the same, those that start with ``<`` (mid-reply markup)
    closes: dict[str, _Table]  # per family: its closes
    #: The longest close of a prefilled family: the start of a reply is
    #: held until a close that starts within the hold could have shown.
    unopened_close: int
    #: The markers of the wrapped call formats (family tokens, wrapper
    #: tags): a call there may end unclosed reasoning (``_drafting``).
    calls: _Table | None
    #: The families' answer ends (``Reasoning.ends``): the blanks before
    #: one are layout (``_ends``).
    ends: _Table | None
    #: Blanks right before an answer end.
    blank_ends: re.Pattern[str] | None
    #: Leading markers that are plain words (no ``<``: Granite's "Here is
    #: my thought process:", Harmony's token-stripped "analysis"): after
    #: text they are words of the reply, even within the start's hold.
    leading_words: frozenset[str]
    #: The blanks that begin a reply with no markup at its start are
    #: layout (``Reasoning.blank_first``).
    blank_first: bool


def _markers_of(r: Reasoning) -> set[str]:
    return {*r.opens, *r.closes, *r.answer}


@lru_cache(maxsize=1)
def _gated() -> tuple[tuple[str, re.Pattern[str], bool], ...]:
    """The families whose markup counts only for their models
    (``Reasoning.models``): (name, the models' pattern, whether their
    markup is theirs alone)."""
    shared = {m for r in all_reasoning() if not r.models for m in _markers_of(r)}
    return tuple(
        (
            r.name,
            re.compile("|".join(f"(?:{m})" for m in r.models), re.IGNORECASE),
            not (_markers_of(r) & shared),
        )
        for r in all_reasoning()
        if r.models
    )


def _allowed(ctx: Context) -> frozenset[str]:
    """The gated families whose markup counts for this request: it names
    one of their models, or switches thinking on and the family's markup
    is no other family's (a family that reads another's tags its own way,
    as MiniMax M2 does ``</think>``, counts for its models only)."""
    return frozenset(
        name for name, rx, own in _gated() if rx.search(ctx.model) or (own and ctx.thinking is True)
    )


def _call_markers(skip: set[str]) -> list[str]:
    """The markers of the formats whose every reading is wrapped call syntax."""
    groups = markers_for({}, tuple(all_formats())).groups
    return [m for m, fs in groups.items() if all(f.wrapped for f in fs) and m not in skip]


@lru_cache(maxsize=8)
def _markup(allowed: frozenset[str] = frozenset()) -> _Markup:
    kinds: dict[str, tuple[int, Reasoning]] = {}
    # A gated family that shares markers reads them its way: it comes last.
    families = sorted(
        (r for r in all_reasoning() if not r.models or r.name in allowed),
        key=lambda r: bool(r.models),
    )
    for r in families:
        if r.prefilled:
            for m in r.closes:
                kinds[m] = (_CLOSE, r)
        for m in r.opens:
            kinds[m] = (_OPEN, r)
        for m in r.answer:
            kinds[m] = (_ANSWER, r)
    markers = list(kinds)
    leading = {m for r in families for m in r.leading}
    calls = _call_markers({m for r in families for m in (*r.opens, *r.closes, *r.answer)})
    call_table = _Table.of(calls) if calls else None
    ends = [m for r in families for m in r.ends]
    return _Markup(
        kinds=kinds,
        start=_Table.of(markers),
        text=_Table.of([m for m in markers if m.startswith("<") and m not in leading]),
        # A family with only answer headers (no channel to close) has none:
        # the splitter enters a family's reasoning only at one of its opens.
        closes={r.name: _Table.of(list(r.closes)) for r in families if r.closes},
        unopened_close=max(len(m) for m, (k, _) in kinds.items() if k == _CLOSE),
        calls=call_table,
        ends=_Table.of(ends) if ends else None,
        blank_ends=re.compile(r"\s+(?=" + _alternation(ends).pattern + ")") if ends else None,
        blank_first=any(r.blank_first for r in families),
        leading_words=frozenset(m for m in leading if not m.startswith("<")),
    )


def _blank_tail(s: str) -> int:
    """Length of the run of blanks that ends ``s``."""
    return len(s) - len(s.rstrip())


class _Parts:
    """Text held piece by piece, joined once when it is decided (a held
    call region costs O(delta) per piece, not a copy of all held so far);
    ``tail`` keeps its last characters, where a marker may have begun."""

    __slots__ = ("_keep", "parts", "size", "tail")

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self.parts: list[str] = []
        self.size = 0
        self.tail = ""

    def add(self, s: str) -> None:
        self.parts.append(s)
        self.size += len(s)
        self.tail = (self.tail + s)[-self._keep :] if self._keep > 0 else ""

    def text(self) -> str:
        joined = "".join(self.parts)
        self.parts = [joined]
        return joined


def _only_calls(ctx: Context, text: str) -> bool:
    """Whether ``text`` is the answer's calls: calls the detector lifts,
    with nothing but blanks around them and no markup it would strip, or
    one recognised region in which nothing reads (given back whole: the
    call section the model opened is the answer's, even unread). A fresh
    detector on a copy of the request's context: the report is not
    touched."""
    probe = replace(ctx, report=Report(), options=replace(ctx.options, hold_unreadable=False))
    d = Delta(content=text, finish_reason="stop")
    ToolTagDetector(probe).close(d)
    counts = probe.report.counts
    if any(k.startswith(("stripped.", "dropped_call.")) for k in counts):
        return False
    if d.calls:
        return not (d.content or "").strip()
    return "given_back.unreadable" in counts and d.content == text.strip()


class ReasoningSplitter:
    """Moves each family's reasoning from content to reasoning (module doc)."""

    __slots__ = (
        "_answer",
        "_call_at",
        "_closed",
        "_code",
        "_draft",
        "_ends",
        "_family",
        "_held",
        "_hold_max",
        "_lead",
        "_m",
        "_nodraft",
        "_opened",
        "_said",
        "_sdraft",
        "_searched",
        "_skipped",
        "_state",
        "ctx",
    )

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._m = _markup(_allowed(ctx))
        #: 0: no unopened section is looked for (``Context.reasoning_hold``).
        self._hold_max = ctx.reasoning_hold
        self._state = _START
        self._held = ""
        self._searched = 0  # START: how far ``_held`` has been searched
        self._family: Reasoning | None = None  # THINK: whose channel is open
        #: Drop the blanks that begin the current section (layout).
        self._lead = False
        self._code = CodeSpans()  # TEXT: where inline code and code blocks are
        #: The answer has begun, a section has closed, an open was text:
        #: what the markup of a family that does not repeat means from then
        #: on (``Reasoning.repeats``).
        self._said = False
        self._closed = False
        self._skipped = False
        #: An answer header of a family whose calls have their own channel
        #: went by (``Reasoning.calls_apart``; ``in_answer``).
        self._answer = False
        #: THINK: the reasoning from a call marker on, held while it may be
        #: a call that ends the reply (``_drafting``); None: not held.
        self._draft: _Parts | None = None
        #: START: the held start of a reply from a call marker on (the
        #: template opened the reasoning: ``_start_drafting``).
        self._sdraft: _Parts | None = None
        #: START: where the first call marker in the hold is (-1: none can
        #: be; None: not known yet), see ``_start_call``.
        self._call_at: int | None = None
        #: An answer header of a family that ends its answer with markup
        #: (``Reasoning.ends``) went by: the blanks before that markup are
        #: layout, held until it is known whether it follows.
        self._ends = False
        #: Held text outgrew ``DRAFT_MAX``: this reasoning holds no calls.
        self._nodraft = not (ctx.lifts and self._m.calls is not None)
        #: The template opened the reasoning in the prompt: the request
        #: switched thinking on, or its model's template does so by default
        #: (``PROMPT_OPENS_MODELS``): a call may end it (``_start_call``).
        #: Never for a model whose template does not (LFM2: its
        #: ``PROMPT_NEVER_OPENS_MODELS``), whatever the switch says.
        self._opened = prompt_closed_models().search(ctx.model) is None and (
            ctx.thinking
            if ctx.thinking is not None
            else prompt_opening_models().search(ctx.model) is not None
        )

    def in_answer(self) -> bool:
        """Whether the content now is in an answer channel that never holds
        calls (``Reasoning.calls_apart``): the detector, which runs after
        this splitter, then leaves bare candidates there as text."""
        return self._answer

    # -- the lanes -------------------------------------------------------

    def feed_text(self, text: str) -> bool:
        """The chain's plain-text lane (``delta.TextLane``)."""
        if self._state == _START and not self._hold_max and not self._held:
            # No hold: a reply whose first character begins no markup is text.
            first = text.lstrip()[:1]
            if not first or self._m.start.first.match(first):
                return False
            self._to_text(lead=self._m.blank_first)
        if self._state != _TEXT or self._held or self._lead or self._ends or "<" in text:
            return False
        self._code.note(text)
        return True

    def feed_texts(self, texts: list[str], joined: str) -> int:
        """A run of texts for the lane: all, or one by one."""
        if (
            self._state == _TEXT
            and not (self._held or self._lead or self._ends)
            and "<" not in joined
        ):
            self._code.note(joined)
            return len(texts)
        return take_each(self.feed_text, texts)

    def feed_reasoning(self, text: str) -> bool:
        """The reasoning lane (``delta.TextLane``): reasoning from the
        upstream means it separates reasoning itself (``_run``); nothing
        else of a reasoning-only delta concerns the splitter."""
        if text and self._state == _START and not self._held and self._sdraft is None:
            self._to_text(lead=False, said=False)
        return True

    def feed_reasonings(self, texts: list[str], joined: str) -> int:
        self.feed_reasoning(joined)
        return len(texts)

    # -- the full path ---------------------------------------------------

    def feed(self, d: Delta) -> None:
        self._run(d, False)

    def close(self, d: Delta) -> None:
        self._run(d, True)

    def _run(self, d: Delta, final: bool) -> None:
        text = d.content
        if self._state == _START and d.reasoning and not self._held and self._sdraft is None:
            self._to_text(lead=False, said=False)  # the upstream separates reasoning
        drafts = self._draft is not None or self._sdraft is not None
        if not text and not (final and (self._held or drafts)):
            return
        text = text or ""
        if (
            self._state == _TEXT
            and not (self._held or self._lead or self._ends)
            and "<" not in text
        ):
            self._code.note(text)
            return  # the fast path: nothing to look at, same object
        content: list[str] = []
        reasoning: list[str] = []
        s = self._held + text
        self._held = ""
        cut = final and d.finish_reason == "length"
        while s or (final and (self._draft is not None or self._sdraft is not None)):
            if self._sdraft is not None:
                s = self._start_drafting(s, content, reasoning, final, cut)
            elif self._state == _START:
                s = self._start(s, content, reasoning, final, cut)
            elif self._state == _THINK:
                s = self._inside(s, content, reasoning, final, cut)
            else:
                s = self._outside(s, content, final)
        new_content = "".join(content)
        if new_content != text:
            d.content = new_content
        said = "".join(reasoning)
        if said:
            d.reasoning = (d.reasoning or "") + said
        if reasoning:
            self.ctx.report.count("reasoning_split")
            self.ctx.report.reasoning = True

    def _to_text(self, lead: bool, said: bool = True) -> None:
        """To the text state; ``lead``: drop the blanks that begin it;
        ``said``: without ``lead``, the answer begins here."""
        self._state = _TEXT
        self._searched = 0
        self._lead = lead
        if not lead and said:
            self._said = True

    def _content(self, piece: str, content: list[str]) -> None:
        """``piece`` goes out as content; leading layout blanks dropped."""
        if self._emit(piece, content):
            self._said = True

    def _reasoning(self, piece: str, reasoning: list[str]) -> None:
        """``piece`` goes out as reasoning; leading layout blanks dropped."""
        self._emit(piece, reasoning)

    def _emit(self, piece: str, out: list[str]) -> bool:
        """Append ``piece`` to ``out`` less the blanks that begin a section
        (``_lead``); whether anything was appended."""
        if self._lead:
            piece = piece.lstrip()
            if piece:
                self._lead = False
        if piece:
            out.append(piece)
        return bool(piece)

    def _stale(self, marker: str) -> bool:
        """Whether markup met after the start is text: a family that does
        not repeat (``Reasoning.repeats``) opens once, before the answer,
        and closes once."""
        kind, family = self._m.kinds[marker]
        if kind == _CLOSE and self.ctx.thinking is False:
            return True  # thinking off: a close is the answer's text
        if family.repeats or kind == _ANSWER:
            return False
        if kind == _OPEN and (self._said or self._closed):
            self._skipped = True
            return True
        return kind == _CLOSE and (self._closed or self._skipped)

    def _marker(self, marker: str) -> None:
        """What a marker found in the start or text state does."""
        kind, family = self._m.kinds[marker]
        if kind == _ANSWER and family.calls_apart:
            self._answer = True
        if kind == _ANSWER and family.ends and self._m.ends is not None:
            self._ends = True
        if kind == _OPEN:
            self._state = _THINK
            self._family = family
            self._lead = True
            return
        if kind == _CLOSE and self._state == _TEXT:
            # A close with nothing open: the end of a reasoning section whose
            # start already went out as content. The tag is debris; the model
            # reasons.
            self.ctx.report.count("stripped.stray_think")
            self.ctx.report.reasoning = True
            self.ctx.report.prompt_opened_reasoning = True
            self._closed = True
        self._to_text(lead=True)

    def _start(
        self, s: str, content: list[str], reasoning: list[str], final: bool, cut: bool
    ) -> str:
        table = self._m.start
        hold = self._hold_max
        m = self._first_marker(s, hold)
        if m is not None and not final and s[m.start() :] in table.prefixes:
            self._held = s  # a longer marker may still begin here
            return ""
        if m is None and self._start_call(s, hold) is not None:
            # A call may end the reasoning the prompt opened (``_split_calls``).
            if not final:
                self._searched = len(s)
                self._sdraft = _Parts(table.longest - 1)
                self._sdraft.add(s)
                return ""
            if not cut and self._split_calls(s, self._start_call(s, hold) or 0, content, reasoning):
                self.ctx.report.prompt_opened_reasoning = True
                return ""
        if m is not None:
            before, marker = s[: m.start()], m.group()
            at_start = not before.strip()
            kind, family = self._m.kinds[marker]
            # Within the hold, a close ends reasoning the prompt opened; an
            # open after text is the answer's, unless the family repeats.
            if at_start or (m.start() < hold and (kind == _CLOSE or family.repeats)):
                if kind == _CLOSE:
                    # The prompt opened the reasoning: all before is reasoning.
                    self.ctx.report.prompt_opened_reasoning = True
                    self._lead = True
                    self._closed = True
                    self._reasoning(before.rstrip(), reasoning)
                elif not at_start:
                    self._content(before, content)
                self._marker(marker)
                return s[m.end() :]
        elif not final:
            stripped = s.lstrip()
            if hold > 0 and (len(s) < hold + self._m.unopened_close or self._call_due(s, hold)):
                self._held = s
                self._searched = len(s)
                return ""
            # Without a hold, only markup at the very start of the reply
            # (after layout blanks) counts: hold what may still begin it.
            if (
                hold == 0
                and (not stripped or stripped in table.prefixes)
                and len(s) - len(stripped) <= MAX_BLANK_HOLD
            ):
                self._held = s
                return ""
        elif cut and hold > 0 and self._cut_is_reasoning(s):
            # Cut by the token limit inside reasoning the prompt opened (no
            # close follows: its last blanks are the model's, not layout).
            self._lead = True
            self._reasoning(s, reasoning)
            self._to_text(lead=True)
            return ""
        self._to_text(lead=self._m.blank_first)
        return s

    def _start_drafting(
        self, s: str, content: list[str], reasoning: list[str], final: bool, cut: bool
    ) -> str:
        """The held start of a reply once a call marker came in it (``_start``
        held it for ``_split_calls``): held piece by piece until markup that
        decides the start comes, it outgrows ``DRAFT_MAX`` (then the start
        is read as without a call), or the reply ends (the calls may end the
        reasoning). Reads as ``_start`` would read the whole text."""
        draft = self._sdraft
        assert draft is not None
        hit = self._m.start.pattern.search(draft.tail + s) is not None
        draft.add(s)
        if hit and self._first_marker(draft.text(), self._hold_max) is not None:
            return self._undraft(content, reasoning, final, cut)
        if draft.size > DRAFT_MAX:
            return self._undraft(content, reasoning, final, cut)
        if not final:
            return ""
        if not cut and self._split_calls(draft.text(), self._call_at or 0, content, reasoning):
            self._sdraft = None
            self.ctx.report.prompt_opened_reasoning = True
            return ""
        return self._undraft(content, reasoning, final, cut)

    def _undraft(self, content: list[str], reasoning: list[str], final: bool, cut: bool) -> str:
        """The held start goes to ``_start`` whole, with no call held again."""
        assert self._sdraft is not None
        s = self._sdraft.text()
        self._sdraft = None
        self._nodraft = True
        return self._start(s, content, reasoning, final, cut)

    def _first_marker(self, s: str, hold: int) -> re.Match[str] | None:
        """The first markup in the held start of a reply that decides it:
        not in code (after text), not a close when thinking is off (the
        answer's text; but one that begins the reply of a family whose
        template closes the reasoning then, ``Reasoning.closed_off``, is
        the template's close written again), and, when the request switched
        thinking on, not an open within the hold of a family that does not
        repeat (reasoning the prompt opened may name ``<think>``: its close
        still ends it)."""
        table = self._m.start
        m = table.pattern.search(s, max(0, self._searched - table.longest))
        while m is not None:
            after_text = bool(s[: m.start()].strip())
            kind, family = self._m.kinds[m.group()]
            if after_text and m.group() in self._m.leading_words:
                pass  # a word of the reply, not its first
            elif after_text and CodeSpans().inside_at(s, m.start()):
                pass  # markup in code is text
            elif after_text and self._in_call_head(s, m.start()):
                pass  # a call's own header (Harmony's to=NAME<|channel|>…)
            elif (
                kind == _CLOSE
                and self.ctx.thinking is False
                and not (family.closed_off and not after_text)
            ):
                pass  # the answer's text (not a ``closed_off`` family's echo at the start)
            elif not (
                after_text
                and m.start() < hold
                and kind == _OPEN
                and not family.repeats
                and self.ctx.thinking is True
            ):
                return m
            m = table.pattern.search(s, m.end())
        return None

    def _in_call_head(self, s: str, at: int) -> bool:
        """Whether ``s[at]`` follows a wrapped call's marker and the name
        it addresses (no blanks or markup between, one blank allowed
        after): markup there is the call's header, not a channel of the
        reply (``<|start|>assistant to=functions.X<|channel|>commentary``)."""
        calls = self._m.calls
        if calls is None:
            return False
        for c in calls.pattern.finditer(s, max(0, at - _HEAD_MAX), at):
            if _HEAD_NAME.fullmatch(s, c.end(), at):
                return True
        return False

    def _call_due(self, s: str, hold: int) -> bool:
        """Whether ``s`` ends in what may still become a call marker that
        starts within the hold (``_start_call``): held until it is known."""
        calls = self._m.calls
        if self._nodraft or calls is None or not self._opened:
            return False
        keep = calls.partial(s)
        return keep > 0 and len(s) - keep < hold

    def _start_call(self, s: str, hold: int) -> int | None:
        """Where a call marker begins in the held start of a reply the
        template is known to open reasoning in (within the hold, not in
        code), or None: such a call may end that reasoning."""
        calls = self._m.calls
        if self._nodraft or calls is None or hold <= 0 or not self._opened:
            return None
        if len(s) > DRAFT_MAX:
            return None
        if self._call_at is not None:
            return self._call_at if self._call_at >= 0 else None
        for c in calls.pattern.finditer(s, 0, min(len(s), hold + calls.longest)):
            if c.start() >= hold:
                break
            if not CodeSpans().inside_at(s, c.start()):
                self._call_at = c.start()  # the held text only grows: it stays
                return c.start()
        if len(s) >= hold + calls.longest:
            self._call_at = -1  # none can start within the hold any more
        return None

    def _cut_is_reasoning(self, s: str) -> bool:
        """A reply cut by the token limit inside the hold, with no markup:
        reasoning only when the template is known to open it in the prompt
        (``Context.prompt_opens_reasoning``) and no call began in it (a call
        is the answer's; the text before it stays content)."""
        if not self.ctx.prompt_opens_reasoning:
            return False
        return not matcher_for(self.ctx.tools).has_marker(s)

    def _inside(
        self, s: str, content: list[str], reasoning: list[str], final: bool, cut: bool
    ) -> str:
        assert self._family is not None
        if self._draft is not None:
            # a draft began the section: an open after it is the draft's
            # text, not the open written again (at any split, as whole)
            return self._drafting(s, content, reasoning, final, cut)
        if self._lead:
            again = self._reopened(s, final)
            if again is None:
                self._held = s  # may still be the open again, or blanks
                return ""
            s = again
        table = self._m.closes[self._family.name]
        m = table.pattern.search(s)
        c = self._draft_at(s, len(s) if m is None else m.start())
        if c is not None:
            self._reasoning(s[:c], reasoning)
            self._draft = _Parts(table.longest - 1)
            return self._drafting(s[c:], content, reasoning, final, cut)
        if m is not None:
            self._reasoning(s[: m.start()].rstrip(), reasoning)
            self._closed = True
            if self._m.kinds.get(m.group(), (None,))[0] == _ANSWER:
                self._marker(m.group())  # the next message's header closed it
            else:
                self._to_text(lead=True)
            return s[m.end() :]
        if final:
            # No close came. Cut by the token limit, the last blanks are the
            # model's; a reply that ended (stop) left them before the close
            # it never wrote: layout.
            self._reasoning(s if cut else s.rstrip(), reasoning)
            return ""
        keep = table.partial(s)
        if not self._nodraft and self._m.calls is not None:
            keep = max(keep, self._m.calls.partial(s))
        body = s[: len(s) - keep]
        blanks = _blank_tail(body)
        if blanks > MAX_BLANK_HOLD:
            blanks = 0
        self._reasoning(body[: len(body) - blanks], reasoning)
        self._held = s[len(body) - blanks :]
        return ""

    def _reopened(self, s: str, final: bool) -> str | None:
        """``s`` less the family's opens written again at the start of its
        section (``<think><think>``, ``<|channel><|channel>thought``); None
        while what is there may still grow into one."""
        assert self._family is not None
        opens = sorted(self._family.opens, key=len, reverse=True)
        while True:
            t = s.lstrip()
            if (
                not final
                and len(s) - len(t) <= MAX_BLANK_HOLD
                and any(len(o) > len(t) and o.startswith(t) for o in opens)
            ):
                return None
            o = next((o for o in opens if t.startswith(o)), None)
            if o is None:
                return s
            s = t[len(o) :]

    def _draft_at(self, s: str, before: int) -> int | None:
        """Where the blanks before the first call marker in ``s[:before]``
        begin (reasoning that a call may end), or None."""
        calls = self._m.calls
        if self._nodraft or calls is None:
            return None
        c = calls.pattern.search(s, 0, before)
        if c is None:
            return None
        return len(s[: c.start()].rstrip())

    def _drafting(
        self, s: str, content: list[str], reasoning: list[str], final: bool, cut: bool
    ) -> str:
        """Unclosed reasoning from a call marker on: held until its close
        comes (then all of it was reasoning: a call drafted there is not
        run) or the reply ends; then, if it ends with well-formed calls,
        the reasoning ended where they begin (the engines' parsers end the
        reasoning at a call's token). Longer than ``DRAFT_MAX``: reasoning."""
        assert self._family is not None and self._draft is not None
        draft = self._draft
        table = self._m.closes[self._family.name]
        window = draft.tail + s
        m = table.pattern.search(window)
        if m is not None:
            d = draft.text() + s
            at = len(d) - len(window) + m.start()
            self._draft = None
            self._reasoning(d[:at].rstrip(), reasoning)
            self._to_text(lead=True)
            self._closed = True
            return d[at + len(m.group()) :]
        draft.add(s)
        if draft.size > DRAFT_MAX:
            self._draft = None
            self._nodraft = True
            return draft.text()
        if not final:
            return ""
        d = draft.text()
        self._draft = None
        if cut or not self._split_calls(d, 0, content, reasoning):
            self._reasoning(d, reasoning)
        return ""

    def _split_calls(self, s: str, at: int, content: list[str], reasoning: list[str]) -> bool:
        """At the end of the reply: if calls (nothing but blanks after them)
        begin at one of the first call markers from ``s[at]`` on, all before
        is reasoning and they are content (the detector lifts them)."""
        calls = self._m.calls
        assert calls is not None
        for n, c in enumerate(calls.pattern.finditer(s, at)):
            if n >= DRAFT_TRIES:
                break
            tail = s[c.start() :]
            if _only_calls(self.ctx, tail):
                self._lead = True
                self._reasoning(s[: c.start()].rstrip(), reasoning)
                content.append(tail)
                self._to_text(lead=False)
                self._closed = True
                return True
        return False

    def _outside(self, s: str, content: list[str], final: bool) -> str:
        if self._lead and self._closed and self._family is not None:
            header = self._answer_header(s, final)
            if header is None:
                self._held = s  # may still grow into the family's answer header
                return ""
            if header:
                self._marker(header)  # right after the close: the answer's header
                return s.lstrip()[len(header) :]
        table = self._m.text
        if self._ends and self._m.blank_ends is not None:
            s = self._m.blank_ends.sub("", s)  # the blanks before an answer end
        pos = 0
        while True:
            m = table.pattern.search(s, pos)
            if m is None or not (self._code.inside_at(s, m.start()) or self._stale(m.group())):
                break
            pos = m.end()  # a marker inside code is text
        if m is not None and not final and s[m.start() :] in table.prefixes:
            # A longer marker may still begin here: hold from it.
            self._code.note(s[: m.start()])
            self._content(s[: m.start()], content)
            self._held = s[m.start() :]
            return ""
        if m is not None:
            self._code.note(s[: m.start()])
            self._code.note(m.group())
            self._content(s[: m.start()], content)
            self._marker(m.group())
            return s[m.end() :]
        keep = 0 if final else table.partial(s)
        if self._ends and self._m.ends is not None:
            if not final:
                keep = self._end_keep(s, keep, self._m.ends)
            elif (cut := self._m.ends.partial(s)) and _SPECIAL.match(s, len(s) - cut):
                # The reply stopped inside an answer end it had begun with
                # a special token (Kimi K3's '<|close|>res'): markup, not text.
                s = s[: len(s) - cut]
                self.ctx.report.count("stripped.special_token")
        out = s[: len(s) - keep]
        self._code.note(out)
        self._content(out, content)
        self._held = s[len(s) - keep :]
        return ""

    def _answer_header(self, s: str, final: bool) -> str | None:
        """The answer header of the family whose section just closed that
        begins ``s`` after blanks, even a short form that counts elsewhere
        only at the reply's start (``Reasoning.leading``: right after the
        close it is no call's header); "" if none, None while ``s`` may
        still grow into one."""
        assert self._family is not None
        t = s.lstrip()
        for a in self._family.answer:
            if t.startswith(a):
                return a
        if (
            not final
            and len(s) - len(t) <= MAX_BLANK_HOLD
            and any(a.startswith(t) for a in self._family.answer)
        ):
            return None
        return ""

    @staticmethod
    def _end_keep(s: str, keep: int, ends: _Table) -> int:
        """How much of the end of ``s`` to hold after an answer header of a
        family with answer ends: a marker's prefix, and the blanks before
        it (at most ``MAX_BLANK_HOLD``), which are layout if an end follows."""
        keep = max(keep, ends.partial(s))
        blanks = _blank_tail(s[: len(s) - keep])
        return keep + (blanks if blanks <= MAX_BLANK_HOLD else 0)


on_change(_markup.cache_clear)  # a format plugin's REASONING joins the markup
on_change(_gated.cache_clear)
