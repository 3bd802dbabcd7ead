"""What flows between transformers: one choice's owned fields of one chunk.

A transformer is fed ``Delta`` objects and edits them in place: it may hold
back text (shorten ``content``), release held text, lift complete calls
into ``calls``, change ``finish_reason`` or end the turn (``stop``). The
chain compares the result with what came in, by identity, to decide
whether the upstream's own bytes can be forwarded unchanged.
"""

from __future__ import annotations

import uuid
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


@dataclass(slots=True)
class Delta:
    content: str | None = None
    reasoning: str | None = None
    #: Structured tool-call fragments from the upstream (the accumulator's input).
    fragments: list[ToolCallDelta] | None = None
    #: Complete calls to emit, in order (the accumulator's and detector's output).
    calls: list[ToolCall] | None = None
    finish_reason: str | None = None
    #: Our extension field on the choice, e.g. ``{"cut": "repetition", "period": 7}``.
    ext: dict[str, Any] | None = None
    #: Argument text that arrived in this delta, per upstream call index:
    #: the accumulator fills it so the repetition cutter can watch it.
    arg_text: list[tuple[int, str]] | None = None
    #: Set by a transformer that ends the turn here (a loop cut): the
    #: transformers after it are closed, the ones before it abandoned.
    stop: bool = False

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
