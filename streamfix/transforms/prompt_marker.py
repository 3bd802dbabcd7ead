"""The marker the chat template wrote at the end of the prompt.

Some templates end the prompt with the start of the model's first message
(Functionary v3.2's ``>>>`` before a recipient line): the reply then
begins after it and shows none, so its first call (``get_weather\\n{…}``)
has no marker for the detector to find. For a request to such a model
(``Format.prompt_marker``, ``prompt_models``), this step holds the reply's
first line and, when the format says it reads as what follows the marker
(``Format.prompt_head``), writes the marker back before it; the detector
and the format's own rules do the rest. Any other first line goes out as
written, unchanged.

Bounded: at most ``MAX_HEAD`` characters are held; a first line longer
than that, or one with a character no head can have, is released at once.
After the first line the step passes everything through (O(delta)).
"""

from __future__ import annotations

import re
from typing import Final

from ..context import Context
from ..delta import Delta
from ..formats import Format
from ..formats.registry import prompt_marker_format

#: The longest first line held while it may still be a head.
MAX_HEAD: Final = 128

_HEAD_CHARS = re.compile(r"[\w.:-]*")


class PromptMarker:
    """Writes a template's prompt marker back before the reply's first line
    (see module doc)."""

    __slots__ = ("_done", "_fmt", "_held", "ctx")

    def __init__(self, ctx: Context, fmt: Format) -> None:
        self.ctx = ctx
        self._fmt = fmt
        self._held = ""
        self._done = False

    @classmethod
    def for_context(cls, ctx: Context) -> PromptMarker | None:
        """The step for this request, or None when its model's template
        writes no marker."""
        fmt = prompt_marker_format(ctx.model)
        return None if fmt is None else cls(ctx, fmt)

    def feed_text(self, text: str) -> bool:
        """The plain-text lane: past the first line, nothing changes."""
        return self._done

    def feed_reasoning(self, text: str) -> bool:
        return True

    def feed(self, d: Delta) -> None:
        self._run(d, False)

    def close(self, d: Delta) -> None:
        self._run(d, True)

    def _run(self, d: Delta, final: bool) -> None:
        if self._done or (d.content is None and not self._held):
            return
        text = self._held + (d.content or "")
        nl = text.find("\n")
        head = text if nl < 0 else text[:nl]
        undecided = nl < 0 and not final
        if undecided and len(head) <= MAX_HEAD and _HEAD_CHARS.fullmatch(head):
            self._held = text
            d.content = None if d.content is None else ""
            return
        self._done = True
        self._held = ""
        if nl >= 0 and self._fmt.prompt_head(head, self.ctx.tools):
            self.ctx.report.count(f"prompt_marker.{self._fmt.name}")
            text = self._fmt.prompt_marker + text
        d.content = text
