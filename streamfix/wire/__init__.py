"""Front doors: other wire APIs translated to chat completions and back.

Chat completions stays the internal currency (every local server speaks
it, and the repair chain works on its chunks). A door is three pure
pieces, one module per wire format:

- a request translator: the client's body -> a chat-completions body
  (``messages.MessagesDoor``, ``responses.ResponsesDoor``), plus what the reply needs
  to know about the request (tool names to map back, the model name);
- a sans-I/O encoder fed the *repaired* chat SSE bytes, exactly as the
  proxy would have written them to a chat client, returning the door's
  own events (``Encoder.feed``);
- the non-streamed reply built by the same encoder from a repaired
  ``chat.completion`` (``Door.reply``).

The proxy routes a door's request through its one chat path (budgets,
failover, asking again, the repair chain) and swaps the last step, the
bytes written to the client, for the door's encoder. ``turn.py`` holds
what both doors share: reading repaired chat SSE into turn events.
"""

from __future__ import annotations

from typing import Any, Protocol


class Encoder(Protocol):
    """Repaired chat-completions SSE bytes in, the door's SSE bytes out."""

    def feed(self, data: bytes) -> bytes: ...


class Door(Protocol):
    """One translated request: its chat body, its encoder, its reply."""

    #: The chat-completions request sent through the proxy's chat path.
    chat_body: dict[str, Any]
    #: What the translation left out, by kind (counted in the metrics).
    dropped: dict[str, int]
    #: Input parts left out (an image, a PDF), by part: the model read a
    #: note in their place (``dropped_parts_total{door,part}``).
    omitted: dict[str, int]
    #: The door's name in the metrics (``requests_total{endpoint}``).
    endpoint: str
    #: The prompt's size in tokens as the proxy estimates it (0: unknown),
    #: reported when the upstream sends no usage (``TurnEncoder.tokens``).
    input_estimate: int

    def encoder(self) -> Encoder:
        """A fresh encoder for this request's streamed reply."""
        ...

    def reply(self, completion: dict[str, Any]) -> dict[str, Any]:
        """The door's non-streamed reply for a repaired ``chat.completion``."""
        ...
