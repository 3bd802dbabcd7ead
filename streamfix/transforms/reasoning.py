"""Reasoning in ``content`` goes to ``reasoning_content``.

Reasoning models served without a reasoning parser send their thoughts as
text: ``<think>…</think>`` (Qwen3, DeepSeek-R1, and the many models
distilled from them), or, when the chat template opened the ``<think>`` in
the prompt (DeepSeek-R1, Qwen3-thinking-2507), only the closing
``</think>``: everything before it is reasoning (vLLM's ``deepseek_r1``
and ``qwen3`` reasoning parsers treat a lone ``</think>`` the same way).
The tool-tag detector runs after this splitter and only sees ``content``,
so a call drafted inside reasoning is never lifted.

Because of that second form, the start of a reply may be held until it is
known whether it is reasoning: until a ``<think>`` or ``</think>`` shows,
at most ``Context.reasoning_hold`` characters (``UNOPENED_HOLD`` for a
request to a reasoning model or an upstream known to reason; none
otherwise, since holding delays every reply's first text). A ``</think>`` that starts within
that many characters makes all before it reasoning; otherwise the text was
content all along and is released. The decision depends on positions in
the text, not on chunking, so the split is the same for any chunking. The
hold is skipped when the upstream already separates reasoning (a
``reasoning_content`` field arrived first): then nothing in content is an
unopened reasoning section. Only runs when the request offered tools
(``chain.build_pipeline``).
"""

from __future__ import annotations

from typing import Final

from ..context import UNOPENED_HOLD as CONTEXT_UNOPENED_HOLD
from ..context import Context
from ..delta import Delta, take_each

OPEN: Final = "<think>"
CLOSE: Final = "</think>"

#: How much of the start of a reply is held, at most, while it may still be
#: an unopened reasoning section (characters; about 500 tokens). A longer
#: reasoning section whose ``</think>`` comes later is released as content;
#: its stray ``</think>`` is then stripped, and the report says the model
#: reasons (the proxy holds for that upstream from then on).
UNOPENED_HOLD = CONTEXT_UNOPENED_HOLD

_START, _TEXT, _THINK = 0, 1, 2


def _partial(s: str, tag: str) -> int:
    """Length of the longest suffix of ``s`` that is a proper prefix of ``tag``."""
    i = s.rfind("<", max(0, len(s) - len(tag) + 1))
    while i >= 0:
        if tag.startswith(s[i:]):
            return len(s) - i
        i = s.find("<", i + 1)
    return 0


class ReasoningSplitter:
    """Moves ``<think>…</think>`` from content to reasoning (module doc)."""

    __slots__ = ("_held", "_hold_max", "_searched", "_state", "ctx")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        #: 0: never look for an unopened section (see ``Context.reasoning_hold``).
        self._hold_max = ctx.reasoning_hold
        self._state = _START if self._hold_max > 0 else _TEXT
        self._held = ""
        self._searched = 0  # START: how far ``_held`` has been searched

    def feed_text(self, text: str) -> bool:
        """The chain's plain-text lane (``delta.TextLane``)."""
        return self._state == _TEXT and not self._held and "<" not in text

    def feed_texts(self, texts: list[str], joined: str) -> int:
        """A run of texts for the lane: all, or one by one."""
        if self._state == _TEXT and not self._held and "<" not in joined:
            return len(texts)
        return take_each(self.feed_text, texts)

    def feed_reasoning(self, text: str) -> bool:
        """The reasoning lane (``delta.TextLane``): reasoning from the
        upstream means it separates reasoning itself (``_run``); nothing
        else of a reasoning-only delta concerns the splitter."""
        if text and self._state == _START and not self._held:
            self._state = _TEXT
        return True

    def feed_reasonings(self, texts: list[str], joined: str) -> int:
        self.feed_reasoning(joined)
        return len(texts)

    def feed(self, d: Delta) -> None:
        self._run(d, False)

    def close(self, d: Delta) -> None:
        self._run(d, True)

    def _run(self, d: Delta, final: bool) -> None:
        text = d.content
        if self._state == _START and d.reasoning and not self._held:
            self._state = _TEXT  # the upstream separates reasoning itself
        if not text and not (final and self._held):
            return
        text = text or ""
        if self._state == _TEXT and not self._held and "<" not in text:
            return  # the fast path: nothing to look at, same object
        content: list[str] = []
        reasoning: list[str] = []
        s = self._held + text
        self._held = ""
        while s:
            if self._state == _START:
                s = self._start(s, content, reasoning, final)
            elif self._state == _THINK:
                s = self._inside(s, reasoning, final)
            else:
                s = self._outside(s, content, final)
        new_content = "".join(content)
        if new_content != text:
            d.content = new_content
        if reasoning:
            d.reasoning = (d.reasoning or "") + "".join(reasoning)
            self.ctx.report.count("reasoning_split")

    def _start(self, s: str, content: list[str], reasoning: list[str], final: bool) -> str:
        lo = max(0, self._searched - len(CLOSE))
        o = s.find(OPEN, lo)
        c = s.find(CLOSE, lo)
        first = min(i for i in (o, c) if i >= 0) if o >= 0 or c >= 0 else -1
        if 0 <= first < self._hold_max:
            if first == c:
                reasoning.append(s[:c])
                self._state = _TEXT
                return s[c + len(CLOSE) :]
            content.append(s[:o])
            self._state = _THINK
            return s[o + len(OPEN) :]
        if final or first >= 0 or len(s) >= self._hold_max + len(CLOSE):
            self._state = _TEXT
            self._searched = 0
            return s
        self._held = s
        self._searched = len(s)
        return ""

    def _inside(self, s: str, reasoning: list[str], final: bool) -> str:
        c = s.find(CLOSE)
        if c >= 0:
            reasoning.append(s[:c])
            self._state = _TEXT
            return s[c + len(CLOSE) :]
        keep = 0 if final else _partial(s, CLOSE)
        reasoning.append(s[: len(s) - keep])
        self._held = s[len(s) - keep :]
        return ""

    def _outside(self, s: str, content: list[str], final: bool) -> str:
        o = s.find(OPEN)
        c = s.find(CLOSE)
        if c >= 0 and (o < 0 or c < o):
            # A ``</think>`` with nothing open: the end of a reasoning section
            # whose start already went out as content (nothing held). The
            # tag is debris; the model reasons.
            content.append(s[:c])
            self.ctx.report.count("stripped.stray_think")
            self.ctx.report.reasoning = True
            return s[c + len(CLOSE) :]
        if o >= 0:
            content.append(s[:o])
            self._state = _THINK
            return s[o + len(OPEN) :]
        keep = 0 if final else max(_partial(s, OPEN), _partial(s, CLOSE))
        content.append(s[: len(s) - keep])
        self._held = s[len(s) - keep :]
        return ""
