"""What flows between transformers: one choice's owned fields of one chunk.

A transformer is fed ``Delta`` objects and edits them in place: it may hold
back text (shorten ``content``), release held text, lift complete calls
into ``calls``, change ``finish_reason`` or end the turn (``stop``). The
chain compares the result with what came in, by identity, to decide
whether the upstream's own bytes can be forwarded unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .chunks import ToolCallDelta


def new_call_id() -> str:
    """An id in OpenAI's shape, for calls that arrived without one."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True)
class ToolCall:
    """A complete, valid call, ready for the client. ``arguments`` is JSON
    text of an object. ``source`` names the format (or ``structured``) it
    came from, for the metrics."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)
    source: str = "structured"


class Delta:
    """One choice's owned fields of one chunk (see module docstring).

    A plain class with slots rather than a dataclass: one is made per chunk
    per choice on the hot path, and this ``__init__`` is the cheapest.
    """

    __slots__ = (
        "arg_text",
        "calls",
        "content",
        "ext",
        "finish_reason",
        "fragments",
        "reasoning",
        "stop",
    )

    def __init__(
        self,
        content: str | None = None,
        reasoning: str | None = None,
        fragments: list[ToolCallDelta] | None = None,
        finish_reason: str | None = None,
        calls: list[ToolCall] | None = None,
        ext: dict[str, Any] | None = None,
        arg_text: list[tuple[int, str]] | None = None,
        stop: bool = False,
    ) -> None:
        self.content = content
        self.reasoning = reasoning
        #: Structured tool-call fragments from the upstream (the accumulator's input).
        self.fragments = fragments
        self.finish_reason = finish_reason
        #: Complete calls to emit, in order (the accumulator's and detector's output).
        self.calls = calls
        #: Our extension field on the choice, e.g. ``{"cut": "repetition", "period": 7}``.
        self.ext = ext
        #: Argument text that arrived in this delta, per upstream call index:
        #: the accumulator fills it so the repetition cutter can watch it.
        self.arg_text = arg_text
        #: Set by a transformer that ends the turn here (a loop cut): the
        #: transformers after it are closed, the ones before it abandoned.
        self.stop = stop

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if getattr(self, k))
        return f"Delta({fields})"

    def add_call(self, call: ToolCall) -> None:
        if self.calls is None:
            self.calls = [call]
        else:
            self.calls.append(call)


class Transform(Protocol):
    """A sans-I/O stream transformer for one choice.

    ``feed`` is called for every delta of the choice but the last; ``close``
    for the last one (the delta that carries the upstream's finish_reason,
    an empty one at end of stream, or the delta in which an earlier
    transformer set ``stop``). Both edit the delta in place; ``close`` must
    release or resolve everything still held. Neither may block or await.
    """

    def feed(self, d: Delta) -> None: ...

    def close(self, d: Delta) -> None: ...


class TextLane(Protocol):
    """The optional fast lane of a Transform, for the common delta that
    carries only content (no finish, no reasoning, no tool calls).

    ``feed_text(text)`` returns True when the transformer would pass this
    content through unchanged, having taken it into its state exactly as
    ``feed`` would have. It returns False when it would hold, rewrite or
    cut: the chain then calls ``feed`` with a Delta of this very text (the
    same object), and never offers the text to ``feed_text`` again. A
    decline changes nothing, or only what that ``feed`` needs (the
    repetition cutter keeps its verdict for it).
    A chunk on which every step returns True is forwarded as the upstream's
    own bytes without a Delta ever being made. A pipeline in which any step
    lacks ``feed_text`` always takes the full path (correct, slower); a step
    that never looks at content says so with ``ignores_content = True`` and
    is left out of the lane.

    A step may also offer ``feed_texts(texts, joined)`` for a run of such
    deltas read at once (``joined`` is ``"".join(texts)``): it takes the
    first k texts exactly as k calls of ``feed_text`` would and returns k,
    where k < len(texts) only if ``feed_text`` would have declined
    ``texts[k]``. Its point is to look at ``joined`` once (one search, one
    append) instead of each text; ``take_each`` is the plain loop, the
    fallback for a run it cannot decide at once.

    The reasoning lane is the same for the delta that carries only
    reasoning text (``reasoning_content`` or ``reasoning``; no content, no
    finish, no tool calls), with ``feed_reasoning``, ``feed_reasonings``
    and ``ignores_reasoning``. Thinking models stream hundreds of such
    deltas before the answer.
    """

    def feed_text(self, text: str) -> bool: ...


def take_each(feed_text: Callable[[str], bool], texts: Sequence[str], joined: str = "") -> int:
    """``feed_texts`` by one ``feed_text`` call per text (see ``TextLane``);
    ``joined`` is not needed, only taken (the chain's fallback for a step
    with ``feed_text`` alone calls it as ``feed_texts``)."""
    for i, text in enumerate(texts):
        if not feed_text(text):
            return i
    return len(texts)
