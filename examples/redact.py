"""A user step for streamfix: e-mail addresses in the reply are redacted
while it streams, however the stream is cut.

    import streamfix
    from redact import RedactEmails

    async for out in streamfix.fix_sse(upstream, request, transforms=[RedactEmails]):
        ...

    streamfix serve --upstream http://127.0.0.1:8080/v1 --transform redact:RedactEmails

It runs after the built-in repairs (a call written as text is already
lifted) and sees only what the client would read as content. An address is
a maximal run of address characters (letters, digits, ``._%+-@``) that
reads as ``local@domain.tld`` once a trailing full stop is set aside; the
run is held until the character after it shows where it ends, so an
address split between chunks is redacted like a whole one. A run longer
than any address (``MAX_RUN``) is released as it comes: held text stays
bounded.

The step offers ``feed_text`` (the plain-text lane): a chunk with no ``@``
that ends in a blank or punctuation, while nothing is held, is accepted
unchanged and leaves as the upstream's own bytes.
"""

from __future__ import annotations

import re
from typing import Any

from streamfix import Delta

REDACTED = "[email]"
#: The longest address (RFC 5321's path limit); a longer run is not one.
MAX_RUN = 254

_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+@-")
_RUN = re.compile(r"[A-Za-z0-9._%+@-]+")
_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _tail(s: str) -> int:
    """Where the run of address characters that ends ``s`` starts."""
    i = len(s)
    while i and s[i - 1] in _CHARS:
        i -= 1
    return i


def _redact(run: str) -> str:
    """A whole run: redacted when it is an address (and not too long)."""
    core = run.rstrip(".")
    if len(run) <= MAX_RUN and "@" in core and _ADDRESS.fullmatch(core):
        return REDACTED + run[len(core) :]
    return run


class RedactEmails:
    """The step (a ``streamfix.Transform``), one per choice."""

    #: Reasoning text is left as it is: the lane skips this step there.
    ignores_reasoning = True

    def __init__(self, ctx: Any = None) -> None:
        self._held = ""  # the run of address characters not yet ended
        self._long = False  # inside a run already too long to be an address

    def _push(self, text: str, final: bool = False) -> str:
        s = self._held + text
        self._held = ""
        cut = len(s) if final else _tail(s)
        body, tail = s[:cut], s[cut:]
        out = []
        if self._long:
            # The run that went out unredacted goes on up to its end.
            m = _RUN.match(body)
            head = m.end() if m else 0
            if head < len(body) or final:
                self._long = False
            out.append(body[:head])
            body = body[head:]
        if body:
            out.append(_RUN.sub(lambda m: _redact(m.group()), body))
        if tail:
            if self._long or len(tail) > MAX_RUN:
                out.append(tail)  # never an address: released, not held
                self._long = True
            else:
                self._held = tail
        return "".join(out)

    def feed_text(self, text: str) -> bool:
        """Accepted unchanged: nothing held, no ``@``, and the text does not
        end inside a run (its last character is not an address one)."""
        if self._held or self._long or "@" in text:
            return False
        return not text or text[-1] not in _CHARS

    def feed(self, d: Delta) -> None:
        if d.content:
            d.content = self._push(d.content)

    def close(self, d: Delta) -> None:
        d.content = self._push(d.content or "", final=True) or d.content
