"""The end of the model's turn, where the server did not stop it.

A server that does not honour a family's end-of-turn token sends on what
the model writes next: the next turn, often the user's, written by the
model (``Paris.<|im_end|>\\n<|im_start|>user\\nAnd Spain?…``), or PLaMo 3's
``<|plamo:tag|>`` and whatever follows it. None of it is the reply: the
residue stripper would remove the tokens and join that text to the answer.

The families declare the markup (``Residue.turn_ends``). At the first one,
in the content (after the calls are lifted: in a call's arguments it is
data) or in the reasoning, the turn ends: the text before it goes out, the
rest is dropped, the upstream is told to stop (``Delta.stop``), the finish
is ``stop`` (``tool_calls`` when a call went out) and the choice says
``{"cut": "end_of_turn"}``; counted ``turn_end``. Only a marker's possible
start at the end of a piece is held (at most the longest marker less one
character), so the cost is O(delta).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..context import Context
from ..delta import Delta
from ..formats import registry

#: The choice's note on a turn ended here.
NOTE = {"cut": "end_of_turn"}


@lru_cache(maxsize=1)
def _markers() -> tuple[str, ...]:
    """The families' ``turn_ends`` (markup opens with ``<``: the lane's test)."""
    return tuple(m for m in registry.all_residue().turn_ends if m.startswith("<"))


@lru_cache(maxsize=1)
def _pattern() -> re.Pattern[str]:
    """Any of the markers: one search per piece."""
    return re.compile("|".join(map(re.escape, _markers())))


def _changed() -> None:
    _markers.cache_clear()
    _pattern.cache_clear()


registry.on_change(_changed)


def _held_start(text: str, markers: tuple[str, ...], longest: int) -> int:
    """Where a marker may begin at the end of ``text`` (``len(text)``
    when none can): only at a ``<`` within the longest marker of the end."""
    n = len(text)
    i = text.find("<", max(0, n - longest + 1))
    while i >= 0:
        tail = text[i:]
        if any(m.startswith(tail) for m in markers):
            return i
        i = text.find("<", i + 1)
    return n


class _Channel:
    """One text channel's scan (content, or reasoning)."""

    __slots__ = ("held", "longest", "pattern")

    def __init__(self, longest: int, pattern: re.Pattern[str]) -> None:
        self.held = ""
        self.longest = longest
        self.pattern = pattern

    def scan(self, text: str, markers: tuple[str, ...], final: bool) -> tuple[str, bool]:
        """(the text to release, whether a marker ended the turn)."""
        if self.held:
            text = self.held + text
            self.held = ""
        elif "<" not in text:
            return text, False
        m = self.pattern.search(text)
        if m is not None:
            return text[: m.start()], True
        if final:
            return text, False
        cut = _held_start(text, markers, self.longest)
        self.held = text[cut:]
        return text[:cut], False


class TurnEnd:
    """Ends the turn at a family's end-of-turn markup (see module doc)."""

    __slots__ = ("_called", "_content", "_markers", "_reasoning", "ctx")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._markers = _markers()
        longest = max(map(len, self._markers), default=0)
        pattern = _pattern()
        self._content = _Channel(longest, pattern)
        self._reasoning = _Channel(longest, pattern)
        self._called = False

    def feed_text(self, text: str) -> bool:
        """The plain-text lane: every marker opens with ``<``."""
        return not self._content.held and "<" not in text

    def feed_reasoning(self, text: str) -> bool:
        return not self._reasoning.held and "<" not in text

    def feed(self, d: Delta) -> None:
        self._run(d, False)

    def close(self, d: Delta) -> None:
        self._run(d, True)

    def _run(self, d: Delta, final: bool) -> None:
        markers = self._markers
        if d.calls:
            self._called = True
        if not markers:
            return
        ended = False
        if d.reasoning is not None or self._reasoning.held:
            out, ended = self._reasoning.scan(d.reasoning or "", markers, final)
            d.reasoning = out if out or d.reasoning is not None else None
        if ended:
            d.content = None
        elif d.content is not None or self._content.held:
            out, ended = self._content.scan(d.content or "", markers, final)
            d.content = out if out or d.content is not None else None
        if ended:
            d.stop = True
            d.finish_reason = "tool_calls" if self._called else "stop"
            d.ext = dict(NOTE)
            self.ctx.report.count("turn_end")
