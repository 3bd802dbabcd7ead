"""Plain prose through the whole chain: the texts every chain, with any
plugin, must pass byte-identical, and the runner that shows it.

``run`` feeds SSE bytes through ``SSESession`` as ``fix_sse`` does;
``reply`` is what an SDK client assembles of the result. A registered
format is measured with them (``plugins.check_prose``); ``streamfix.testing``
hands the same names to plugin authors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from .seen import assemble
from .session import SSESession, chunk_event

#: Plain prose and code that every chain, with any plugin, must pass
#: byte-identical (tools offered or not): braces, brackets, tags in code,
#: a JSON example in a fence, shifts, arrows, non-ASCII text.
PROSE: tuple[str, ...] = (
    "The capital of France is Paris. It has about two million inhabitants.",
    "Sure! Here are three ideas:\n\n1. Walk along the river.\n2. Visit a museum.\n"
    "3. Try a café — the croissants are great.\n",
    "In C you shift with `x << 2`, and in C++ you print with `std::cout << x;`.\n",
    "```python\ndef area(r: float) -> float:\n    return 3.14159 * r ** 2  # {not a call}\n```\n",
    'The config looks like this:\n\n```json\n{"debug": true, "level": [1, 2, 3]}\n```\n',
    "function f(a) { return a.map((x) => x * 2); } // arrow => fine\n",
    "Use <b>bold</b> or <em>emphasis</em> in HTML; a <div> holds blocks.",
    "Résumé, naïve, 東京, Ελληνικά, emoji 🙂 and maths: a < b > c, {x | x > 0}.",
    "Note: call me later. The weather (sunny, 21 °C) is nice; search: none needed.",
)

#: The request of the checks that need tools offered (``register``'s
#: measured check among them).
CHECK_REQUEST: dict[str, Any] = {
    "model": "check",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        },
    ],
}


class Reply(NamedTuple):
    """What a client assembles from a reply (call ids left out: they are
    made up anew for each lifted call)."""

    content: str
    reasoning: str
    calls: tuple[tuple[str, Any], ...]
    finish: str | None
    errors: tuple[str, ...]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return chunk_event(delta, finish, "check")


def sse_stream(pieces: Sequence[str], finish: str = "stop", done: bool = True) -> bytes:
    """An upstream stream: a role chunk, one chunk per piece of content, a
    finish chunk, ``[DONE]``."""
    out = [_chunk({"role": "assistant", "content": ""})]
    out.extend(_chunk({"content": p}) for p in pieces)
    out.append(_chunk({}, finish))
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def run(
    reads: bytes | Sequence[bytes], request: dict[str, Any] | None = None, **options: Any
) -> bytes:
    """``reads`` through ``SSESession`` (what ``fix_sse`` does, without a
    loop): the bytes the client gets."""
    if isinstance(reads, bytes):
        reads = [reads]
    session = SSESession(request, **options)
    out = []
    for data in reads:
        out.append(session.feed(data))
        if session.finished:
            break
    out.append(session.close())
    return b"".join(out)


def reply(data: bytes) -> Reply:
    """What an OpenAI SDK client assembles from ``data`` (SSE bytes)."""
    seen = assemble(data)
    calls = []
    for _, c in sorted(seen.calls.items()):
        try:
            args: Any = orjson.loads(c["arguments"] or "{}")
        except orjson.JSONDecodeError:
            args = c["arguments"]
        calls.append((c["name"], args))
    return Reply(seen.content, seen.reasoning, tuple(calls), seen.finish, tuple(seen.errors))


def passthrough_failures(
    texts: Sequence[str] = PROSE,
    request: dict[str, Any] | None = None,
    cuts: str = "all",
    frames: bool | None = None,
    **options: Any,
) -> list[tuple[str, str]]:
    """The texts of ``texts`` that do not pass byte-identical, with what
    the client got of each. With no tools offered the stream's bytes must
    come out as they came (the fast path); with tools, the text the client
    reads (blanks before a possible call are held a moment, so frames may
    differ). ``frames`` True or False asks for the bytes or only the
    text whatever the tools (a step that holds text a moment, like the
    redaction example, changes frames but not text). ``cuts``: how each is chunked: ``"words"`` (at
    each blank, and whole; cheap), ``"all"`` (also at every character and
    one character per chunk)."""
    bad: list[tuple[str, str]] = []
    for text in texts:
        chunkings: list[list[str]] = [[text], re.findall(r"\S+\s*|\s+", text)]
        if cuts == "all":
            chunkings.append(list(text))
            chunkings.extend([text[:i], text[i:]] for i in range(1, len(text)))
        exact = not (request or {}).get("tools") if frames is None else frames
        for pieces in chunkings:
            data = sse_stream(pieces)
            out = run(data, request, **options)
            if out == data:
                continue
            got = reply(out)
            if exact or got != reply(data):
                bad.append((text, got.content if got.content != text else f"{out[:300]!r}"))
                break
    return bad
