"""Upstream keys kept out of what the proxy writes: plain, escaped, or
split between two writes.

An upstream may echo the key it was sent ("Incorrect API key provided:
sk-…") in a body, an error event inside a stream, or a header, and what
it says is relayed. The key must not reach a client in any spelling a
client would read as the key:

- **plain**, found with one ``bytes.find`` per key (the hot path: a write
  with no key and no escape costs that and two more finds);
- **escaped** as JSON writes it (``\\u0073`` for ``s``, ``\\/``), as URLs
  write it (``%73``) or as HTML numeric entities (``&#115;``, ``&#x73;``),
  any mix of characters so written: one regular expression per table,
  run only on a write that holds ``\\u``, ``%`` or ``&#``;
- **split between writes** (a write ending ``…sk-zq7`` and the next
  beginning ``w9E2…``): a stream keeps back the end of a write that could
  begin a key (``held_from``), at most one key's length less one byte,
  and only when it does, so an ordinary event (which ends in a blank
  line) is never delayed;
- **split between events** (one delta's text ending ``…sk-zq7``, the
  next one's beginning ``w9E2…``, joined by the client): ``StreamScrub``
  keeps back an event whose delta text ends with three or more characters
  that begin a key (one regular expression per event finds the candidates
  without decoding), until the texts joined either hold the key (then
  the held events are written again with it redacted) or go another way
  (then they leave as they were). A key split after its first one or two
  characters leaves the rest, which is found as a fragment of the key.

Each is replaced by ``[redacted]``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import orjson

REDACTED = b"[redacted]"


def _spellings(byte: int) -> bytes:
    """A pattern for one byte of a key: itself, or escaped (JSON, URL,
    HTML numeric), hex digits in either case."""
    h = f"{byte:02x}"
    hexes = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in h)
    alts = [
        re.escape(bytes([byte])),
        rb"\\u00" + hexes.encode(),
        b"%" + hexes.encode(),
        b"&#0*" + str(byte).encode() + b";",
        b"&#[xX]0*" + hexes.encode() + b";",
    ]
    if byte == ord("/"):
        alts.append(rb"\\/")
    return b"(?:" + b"|".join(alts) + b")"


def _html(key: bytes) -> bytes:
    return html.escape(key.decode("utf-8", "surrogateescape"), quote=True).encode(
        "utf-8", "surrogateescape"
    )


def _begins(key: bytes) -> bytes:
    """A pattern for three or more of ``key``'s first bytes that end a JSON
    string (``"…sk-zq7"``)."""
    tail = b""
    for b in reversed(key[3:-1]):
        tail = b"(?:" + re.escape(bytes([b])) + tail + b")?"
    return re.escape(key[:3]) + tail + b'"'


class Secrets:
    """The upstream keys of one table, and how to take them out (a
    callable: ``secrets(data)`` is ``data`` redacted)."""

    __slots__ = ("_begins", "_ends", "_escaped", "_firsts", "keys", "longest", "whole")

    def __init__(self, keys: Sequence[bytes]) -> None:
        #: The keys, longest first.
        self.whole = sorted(set(keys), key=len, reverse=True)
        #: And each as HTML escapes it (``&amp;``, ``&lt;``, ``&quot;``…: a
        #: page escaped after it was redacted is redacted again), and less
        #: its first one or two bytes (a key split after them,
        #: ``StreamScrub``: a held event ends with three or more).
        self.keys = self.whole + [e for e in map(_html, self.whole) if e not in self.whole]
        self.keys += [k[i:] for i in (1, 2) for k in self.whole if len(k) > 8]
        self.longest = max((len(k) for k in self.whole), default=0)
        self._firsts = sorted({k[:1] for k in self.whole})
        self._escaped = (
            re.compile(b"|".join(b"".join(_spellings(b) for b in k) for k in self.whole))
            if self.whole
            else None
        )
        self._begins = (
            re.compile(b"|".join(_begins(k) for k in self.whole if len(k) > 3))
            if any(len(k) > 3 for k in self.whole)
            else None
        )

        #: One or two of a key's first bytes ending a JSON string value.
        self._ends = (
            re.compile(
                b"(?:"
                + b"|".join(re.escape(k[:i]) for k in self.whole for i in (2, 1))
                + rb')"\s*[,}]'
            )
            if self.whole
            else None
        )

    def __bool__(self) -> bool:
        return bool(self.whole)

    def __call__(self, data: bytes) -> bytes:
        """``data`` without any key, in any spelling above."""
        for key in self.keys:
            if key in data:
                data = data.replace(key, REDACTED)
        if self._escaped is not None and (
            b"\\u" in data or b"\\/" in data or b"%" in data or b"&#" in data
        ):
            out, n = self._escaped.subn(REDACTED, data)
            if n:
                return out
        return data

    def text(self, value: str) -> str:
        """A string (a header's value, a page's text) without any key."""
        raw = value.encode("utf-8", "surrogateescape")
        out = self(raw)
        return value if out is raw else out.decode("utf-8", "surrogateescape")

    def held_from(self, data: bytes) -> int:
        """Where the end of ``data`` that could begin a key starts
        (``len(data)`` when no end could): a stream writes what is before
        it now and the rest with the next write."""
        n = len(data)
        start = max(0, n - self.longest + 1)
        cut = n
        for first in self._firsts:
            i = data.find(first, start)
            while i != -1:
                tail = data[i:]
                if any(k.startswith(tail) for k in self.whole):
                    cut = min(cut, i)
                    break
                i = data.find(first, i + 1)
        return cut

    def may_begin(self, event: bytes) -> bool:
        """Whether a string in ``event`` ends with the start of a key."""
        return self._begins is not None and self._begins.search(event) is not None

    def may_end(self, event: bytes) -> bool:
        """Whether a string value in ``event`` ends with one or two of a
        key's first bytes (the text may go on in the next event)."""
        return self._ends is not None and self._ends.search(event) is not None

    def tail(self, text: str) -> str:
        """The one or two last characters of ``text`` that begin a key, or ""."""
        for i in (2, 1):
            end = text[-i:].encode("utf-8", "surrogateescape")
            if len(text) >= i and any(k.startswith(end) for k in self.whole):
                return text[-i:]
        return ""

    def begins(self, text: str) -> bool:
        """Whether ``text`` ends with three or more of a key's first characters."""
        raw = text.encode("utf-8", "surrogateescape")
        return any(
            raw.endswith(k[:i]) for k in self.whole for i in range(3, min(len(k), len(raw) + 1))
        )


#: The delta fields a client joins across events.
_TEXTS = ("content", "reasoning_content", "reasoning")


def _event_text(event: bytes) -> str | None:
    """The delta text an SSE ``data:`` event adds (its choices' texts and
    call arguments, joined), or None for anything else."""
    if not event.startswith(b"data:"):
        return None
    try:
        obj = orjson.loads(event[5:])
    except orjson.JSONDecodeError:
        return None
    out = []
    for ch in obj.get("choices") or () if isinstance(obj, dict) else ():
        d = ch.get("delta") if isinstance(ch, dict) else None
        if not isinstance(d, dict):
            continue
        out += [d[f] for f in _TEXTS if isinstance(d.get(f), str)]
        for c in d.get("tool_calls") or ():
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                out.append(fn["arguments"])
    return "".join(out)


def _emptied(event: bytes) -> bytes:
    """``event`` with its delta texts emptied (a piece of a key whose
    whole is written, redacted, by the first held event)."""
    obj: Any = orjson.loads(event[5:])
    for ch in obj.get("choices") or ():
        d = ch.get("delta") or {}
        for f in _TEXTS:
            if isinstance(d.get(f), str):
                d[f] = ""
        for c in d.get("tool_calls") or ():
            fn = c.get("function") or {}
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = ""
    return b"data: " + orjson.dumps(obj)


def _with_text(event: bytes, text: str) -> bytes:
    """``event`` with its first delta text set to ``text``."""
    obj: Any = orjson.loads(_emptied(event)[6:])
    for ch in obj.get("choices") or ():
        d = ch.get("delta") or {}
        for f in _TEXTS:
            if isinstance(d.get(f), str):
                d[f] = text
                return b"data: " + orjson.dumps(obj)
        for c in d.get("tool_calls") or ():
            fn = c.get("function") or {}
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = text
                return b"data: " + orjson.dumps(obj)
    return event


class StreamScrub:
    """A stream's writes with the keys out, also split between writes or
    between events (module doc). ``feed(data)`` returns what to write now;
    ``close()`` the rest."""

    __slots__ = ("carry", "held", "joined", "secrets", "tail")

    def __init__(self, secrets: Secrets) -> None:
        self.secrets = secrets
        self.carry = b""  # the end of a write that could begin a key
        self.held: list[bytes] = []  # events whose texts may begin a key
        self.joined = ""  # their texts, joined
        #: The one or two characters that the text already written ends
        #: with, when they begin a key (the next event may go on with it).
        self.tail = ""

    def feed(self, data: bytes) -> bytes:
        secrets = self.secrets
        if self.carry:
            data = self.carry + data
        cut = secrets.held_from(data)
        data, self.carry = data[:cut], data[cut:]
        if not (self.held or self.tail or secrets.may_begin(data) or secrets.may_end(data)):
            return secrets(data)
        out = []
        events = data.split(b"\n\n")
        rest = events.pop()  # after the last blank line: an event's start, or b""
        for event in events:
            out.append(self._event(event))
        if rest:
            out.append(self._flush() + secrets(rest))
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        secrets = self.secrets
        text = _event_text(event)
        if text is None:
            if event.startswith(b":"):  # a comment (a keep-alive): it joins nothing
                return secrets(event + b"\n\n")
            return self._flush() + secrets(event + b"\n\n")
        body = self.joined + text
        if self.held and secrets.text(body) != body:
            # the key completed: written once, redacted, by the first held event
            first, *others = [*self.held, event]
            self.held, self.joined, self.tail = [], "", ""
            parts = [_with_text(first, secrets.text(body))] + [_emptied(e) for e in others]
            return b"".join(p + b"\n\n" for p in parts)
        if secrets.begins(self.tail + body):
            self.held.append(event)
            self.joined = body
            return b""
        out = self._flush() + secrets(event + b"\n\n")
        self.tail = secrets.tail(self.tail + body) if body else self.tail
        return out

    def _flush(self) -> bytes:
        held, self.held, self.joined = self.held, [], ""
        return b"".join(self.secrets(e + b"\n\n") for e in held)

    def close(self) -> bytes:
        """What is still kept back, redacted."""
        out = self._flush() + self.secrets(self.carry)
        self.carry = b""
        return out


__all__ = ["REDACTED", "Secrets", "StreamScrub"]
