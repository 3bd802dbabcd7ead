"""In-process cost of the chain, as ratios measured in one run.

    python -m bench.chain [--chunks 20000] [--repeat 5] [--json FILE] [--shapes FILE ...]

1. Plain text, no tools: ``fix_sse`` per chunk against a bare
   ``orjson.loads`` + ``orjson.dumps`` of each chunk in the same async loop
   (what a naive decode/re-encode proxy would do). Target: ratio <= 1.0.
2. Plain text with ``tools`` declared (the detector and the other
   tool-aware transformers in the chain): target ratio <= 1.5.
3. A text tool call whose arguments arrive in 2,000 chunks against one in
   20,000: per-chunk cost must stay flat (ratio <= 1.1), i.e. O(delta).

The plain text of 1 and 2 is prose from a small vocabulary. The same two
ratios are also given, with no target, for a harder text: the Python
documentation (``pydoc_data``, shipped with CPython) cut into tokens the
way a BPE tokenizer cuts them. It is full of brackets, code and the words
"function" and "call", which are prefixes of markers and are held until
the next token shows they are not.

4. A clean JSON reply (an object of records, cut into tokens by the same
   rule) streamed with ``response_format`` (``json_schema``, not strict)
   against the same reply without it: the added cost per chunk of the
   structured-output step (``transforms/jsonout.py``: the rewriter reads
   every token, the chain keeps a chunk back whole while its tail is held
   and sends it as its own bytes). The two alternate ``--repeat`` times and
   the medians are compared (no target). The output is checked to be the
   input, byte for byte.

``--shapes FILE`` (repeatable) registers the declared shapes of a TOML
file (``formats/declared.py``; ``examples/shapes/*.toml``) for the whole
run: their markers join the detector's, so the same figures show what
declared shapes cost beside the built-ins.

Each case takes the best of ``--repeat`` runs (the least disturbed by the
rest of the machine); ratios compare runs made moments apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson

import streamfix

WORDS = [
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "a",
    "model",
    "streams",
    "its",
    "answer",
    "token",
    "by",
    "token",
    "and",
    "the",
    "proxy",
    "must",
    "not",
    "add",
    "latency",
    "to",
    "any",
    "of",
    "them",
]

TOOLS_REQUEST: dict[str, Any] = {
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                },
            },
        },
        {
            "type": "function",
            "function": {"name": "lookup_order", "parameters": {"type": "object"}},
        },
    ]
}


def frame(content: str | None, *, role: str | None = None, finish: str | None = None) -> bytes:
    """A chunk shaped like llama.cpp's (id, model, created, logprobs…)."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {
        "id": "chatcmpl-91b2b01f-98a0-48bb-8525-a07ca0dc71bd",
        "model": "smollm2",
        "created": 1796012909,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def stream_of(pieces: Iterable[str]) -> list[bytes]:
    """A whole reply, one network read per chunk as a token-by-token server
    sends them: the role chunk, one chunk per piece of content, the finish
    chunk, ``[DONE]``."""
    reads = [frame("", role="assistant")] + [frame(p) for p in pieces]
    reads.append(frame(None, finish="stop"))
    reads.append(b"data: [DONE]\n\n")
    return reads


def plain_stream(n: int) -> list[bytes]:
    """Natural text in tokens with spaces (no loop: words vary by position)."""
    words = (WORDS[i % len(WORDS)] for i in range(n))
    return stream_of((" " if i else "") + (w if i % 7 else w + str(i)) for i, w in enumerate(words))


_TOKEN = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
)


def docs_stream(n: int) -> list[bytes] | None:
    """The first ``n`` tokens of the Python documentation (GPT-2's
    pre-tokenisation rule), one chunk each; None if this Python has no
    ``pydoc_data``."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped-down Python builds
        return None
    text = "\n\n".join(topics[k] for k in sorted(topics))
    return stream_of(_TOKEN.findall(text)[:n])


def tool_call_stream(n: int) -> list[bytes]:
    """``<tool_call>{"name": "write_file", "arguments": {"path": …, "text": "…"}}</tool_call>``
    with the text argument arriving in ``n`` chunks."""
    pieces = [
        "<tool",
        "_call",
        ">",
        '{"name": "write_file", "arguments": {"path": "a.txt", "text": "',
    ]
    pieces += [WORDS[i % len(WORDS)] + str(i) + " " for i in range(n)]
    pieces += ['"}}', "</tool_call>"]
    return stream_of(pieces)


#: What a clean JSON reply is asked for with (``json_clean_stream``).
JSON_REQUEST: dict[str, Any] = {
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "records",
            "schema": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "object"}}},
                "required": ["items"],
            },
        },
    }
}


def json_clean_stream(n: int) -> list[bytes]:
    """A valid JSON object of records, about ``n`` tokens (the GPT-2 rule
    above), one chunk each: keys, numbers, strings, booleans, nesting."""
    items, size = [], 0
    while size < n:
        i = len(items)
        items.append(
            {"id": i, "name": f"{WORDS[i % len(WORDS)]} {i}", "ok": i % 3 == 0, "score": i * 0.5}
        )
        size += 31  # tokens per record, about
    text = json.dumps({"items": items}, indent=1)
    return stream_of(_TOKEN.findall(text))


def _timed_once(make: Pipe, reads: list[bytes]) -> float:
    loop = asyncio.new_event_loop()
    try:
        t0 = time.perf_counter()
        loop.run_until_complete(_consume(make(reads)))
        return time.perf_counter() - t0
    finally:
        loop.close()


def json_row(chunks: int, repeat: int) -> dict[str, Any]:
    """Case 4: medians of alternated runs, with and without
    ``response_format``, on the same clean JSON reply."""
    reads = json_clean_stream(chunks)
    n = len(reads)

    async def out(req: dict[str, Any]) -> bytes:
        return b"".join([b async for b in streamfix.fix_sse(_source(reads), req)])

    assert asyncio.run(out(JSON_REQUEST)) == b"".join(reads), "not byte for byte"
    plain: list[float] = []
    asked: list[float] = []
    for _ in range(max(3, repeat)):
        plain.append(_timed_once(lambda r: streamfix.fix_sse(_source(r)), reads))
        asked.append(_timed_once(lambda r: streamfix.fix_sse(_source(r), JSON_REQUEST), reads))
    mp, ma = statistics.median(plain), statistics.median(asked)
    return {
        "json_chunks": n,
        "json_plain_us_per_chunk": mp / n * 1e6,
        "json_asked_us_per_chunk": ma / n * 1e6,
        "json_added_us_per_chunk": (ma - mp) / n * 1e6,
        "json_ratio": ma / mp,
    }


async def _source(reads: list[bytes]) -> AsyncIterator[bytes]:
    for r in reads:
        yield r


async def bare(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The baseline: decode and re-encode every chunk."""
    async for raw in source:
        if raw.startswith(b"data: {"):
            obj = orjson.loads(raw[6:-2])
            yield b"data: " + orjson.dumps(obj) + b"\n\n"
        else:
            yield raw


Pipe = Callable[[list[bytes]], AsyncIterator[bytes]]


async def _consume(gen: AsyncIterator[bytes]) -> int:
    n = 0
    async for b in gen:
        n += len(b)
    return n


def timed(make: Pipe, reads: list[bytes], repeat: int) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        loop = asyncio.new_event_loop()
        try:
            t0 = time.perf_counter()
            loop.run_until_complete(_consume(make(reads)))
            best = min(best, time.perf_counter() - t0)
        finally:
            loop.close()
    return best


def run(chunks: int, repeat: int) -> dict[str, Any]:
    plain = plain_stream(chunks)
    n = len(plain)
    results: dict[str, Any] = {"chunks": chunks}

    t_bare = timed(lambda r: bare(_source(r)), plain, repeat)
    t_plain = timed(lambda r: streamfix.fix_sse(_source(r)), plain, repeat)
    t_tools = timed(lambda r: streamfix.fix_sse(_source(r), TOOLS_REQUEST), plain, repeat)
    results["bare_us_per_chunk"] = t_bare / n * 1e6
    results["plain_us_per_chunk"] = t_plain / n * 1e6
    results["tools_us_per_chunk"] = t_tools / n * 1e6
    results["plain_ratio"] = t_plain / t_bare
    results["tools_ratio"] = t_tools / t_bare

    docs = docs_stream(chunks)
    if docs is not None:
        t_dbare = timed(lambda r: bare(_source(r)), docs, repeat)
        t_dplain = timed(lambda r: streamfix.fix_sse(_source(r)), docs, repeat)
        t_dtools = timed(lambda r: streamfix.fix_sse(_source(r), TOOLS_REQUEST), docs, repeat)
        results["docs_bare_us_per_chunk"] = t_dbare / len(docs) * 1e6
        results["docs_plain_ratio"] = t_dplain / t_dbare
        results["docs_tools_ratio"] = t_dtools / t_dbare

    small, large = tool_call_stream(2_000), tool_call_stream(20_000)
    t_small = timed(lambda r: streamfix.fix_sse(_source(r), TOOLS_REQUEST), small, repeat)
    t_large = timed(
        lambda r: streamfix.fix_sse(_source(r), TOOLS_REQUEST), large, max(1, repeat // 2)
    )
    results["call_2k_us_per_chunk"] = t_small / len(small) * 1e6
    results["call_20k_us_per_chunk"] = t_large / len(large) * 1e6
    results["call_flatness_ratio"] = (
        results["call_20k_us_per_chunk"] / results["call_2k_us_per_chunk"]
    )
    results.update(json_row(chunks, repeat))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument(
        "--shapes", action="append", default=[], metavar="FILE", help="declared shapes to load"
    )
    args = ap.parse_args(argv)
    if args.shapes:
        from streamfix.formats import register
        from streamfix.formats.declared import compile_shapes, load_shapes

        for path in args.shapes:
            register(*compile_shapes(load_shapes(path)), name=f"shapes:{path}")
        print(f"declared shapes loaded from {len(args.shapes)} file(s)")
    r = run(args.chunks, args.repeat)
    row = "  {:<24s}{:7.2f} us/chunk   ratio {:.2f}  (target <= {})"
    print(f"chain cost over {args.chunks} plain-text chunks (best of {args.repeat})")
    print(f"  {'bare orjson loads+dumps':<24s}{r['bare_us_per_chunk']:7.2f} us/chunk")
    print(row.format("fix_sse, no tools", r["plain_us_per_chunk"], r["plain_ratio"], "1.0"))
    print(row.format("fix_sse, tools declared", r["tools_us_per_chunk"], r["tools_ratio"], "1.5"))
    if "docs_bare_us_per_chunk" in r:
        print(f"Python docs text, {args.chunks} tokens (no target)")
        print(f"  {'bare orjson loads+dumps':<24s}{r['docs_bare_us_per_chunk']:7.2f} us/chunk")
        print(f"  {'fix_sse, no tools':<24s}{'':17s}ratio {r['docs_plain_ratio']:.2f}")
        print(f"  {'fix_sse, tools declared':<24s}{'':17s}ratio {r['docs_tools_ratio']:.2f}")
    print("text tool call, per chunk")
    print(f"  {'2,000 argument chunks':<24s}{r['call_2k_us_per_chunk']:7.2f} us/chunk")
    flat = r["call_flatness_ratio"]
    print(row.format("20,000 argument chunks", r["call_20k_us_per_chunk"], flat, "1.1"))
    print(
        f"clean JSON reply, {r['json_chunks']} chunks, response_format json_schema "
        f"(medians of {max(3, args.repeat)} alternated runs; output byte for byte)"
    )
    print(f"  {'fix_sse, no response_format':<30s}{r['json_plain_us_per_chunk']:7.2f} us/chunk")
    print(
        f"  {'fix_sse, response_format':<30s}{r['json_asked_us_per_chunk']:7.2f} us/chunk"
        f"   +{r['json_added_us_per_chunk']:.2f} us, ratio {r['json_ratio']:.2f}  (no target)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
