"""Where the content is inside code: inline code or a code block.

An answer that explains a model family's markup (a reasoning tag, a
channel token, a call marker) writes it in inline code or a code block;
that is text the user asked for, and the reasoning splitter and the
residue stripper leave it alone. A position is inside code when an odd
number of backtick runs comes before it (a fence is a run of three or
more), counted incrementally over the text as it goes out.
"""

from __future__ import annotations

import re

_TICKS = re.compile(r"`+")


class CodeSpans:
    """Backtick-run parity over the text seen so far (module doc)."""

    __slots__ = ("inside", "tick_end")

    def __init__(self) -> None:
        self.inside = False
        #: The text seen so far ends with a backtick: a run may go on.
        self.tick_end = False

    def _runs(self, s: str) -> int:
        """Backtick runs that start in ``s`` (one continuing from the text
        before does not start here)."""
        if "`" not in s:
            return 0
        n = len(_TICKS.findall(s))
        return n - 1 if self.tick_end and s[0] == "`" else n

    def note(self, s: str) -> None:
        """Take ``s``, the text that follows what was seen, into the count."""
        if not s:
            return
        if "`" in s:
            if self._runs(s) % 2:
                self.inside = not self.inside
            self.tick_end = s[-1] == "`"
        else:
            self.tick_end = False

    def inside_at(self, s: str, at: int) -> bool:
        """Whether ``s[at]`` is inside code, ``s`` following what was seen."""
        return self.inside != bool(self._runs(s[:at]) % 2)
