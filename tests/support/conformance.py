"""Run canitoolcall's fixtures through streamfix, as a backend without
parsers would send them: the raw output as ``content`` of a chat completion
(non-streamed, and streamed cut many ways), the fixture's model name and
tools in the request, fresh state per fixture.

The request carries only what a real client sends: the model name, the
tools, and, when the fixture says whether thinking was on, the
``chat_template_kwargs`` a client uses to switch it (vLLM, SGLang and
llama.cpp all take ``enable_thinking``). A fixture tagged ``truncated``
ended at the token limit: its finish reason is ``length``.

Used by ``tests/test_conformance.py`` and by ``python -m tests.support.conformance``
(the per-family table in the README).
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from canitoolcall.fixtures import Fixture, load_fixtures
from canitoolcall.pytest_plugin import assert_conforms, assert_equivalent
from canitoolcall.results import ParsedToolCall, ParseResult

import streamfix

from .streamutil import assemble, chunk, run_sse, sse


def request_for(fx: Fixture) -> dict[str, Any]:
    req: dict[str, Any] = {
        "model": fx.models[0],
        "messages": [{"role": "user", "content": "(fixture)"}],
        "tools": [dict(t) for t in fx.tools],
    }
    if fx.thinking is not None:
        req["chat_template_kwargs"] = {"enable_thinking": fx.thinking}
    return req


def finish_of(fx: Fixture) -> str:
    return "length" if fx.truncated else "stop"


def _result(
    content: str | None, reasoning: str | None, calls: Sequence[tuple[str, str]]
) -> ParseResult:
    return ParseResult(
        content=content or None,
        reasoning_content=reasoning or None,
        tool_calls=tuple(ParsedToolCall(n, a) for n, a in calls),
    )


def parse_nonstream(fx: Fixture) -> ParseResult:
    completion = {
        "id": "chatcmpl-fixture",
        "object": "chat.completion",
        "created": 1,
        "model": fx.models[0],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": fx.raw_output},
                "finish_reason": finish_of(fx),
            }
        ],
    }
    out = streamfix.fix_completion(completion, request_for(fx))
    msg = out["choices"][0]["message"]
    calls = [
        (c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls") or []
    ]
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return _result(msg.get("content"), reasoning, calls)


def parse_stream(fx: Fixture, pieces: Sequence[str]) -> ParseResult:
    chunks = [chunk(role="assistant", content="")]
    chunks += [chunk(p) for p in pieces if p]
    chunks.append(chunk(finish=finish_of(fx)))
    a = assemble(run_sse(sse(chunks), request_for(fx)))
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in a.tool_calls]
    return _result(a.content, a.reasoning, calls)


def cuts(text: str, seed: int, max_piece: int) -> list[str]:
    """``text`` in pieces of 1..max_piece characters, drawn from ``seed``."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_piece)
        out.append(text[i : i + n])
        i += n
    return out


#: How each fixture is streamed: per character, and random pieces of up to
#: 4 and 12 characters (the corpus's token strategies need each model's
#: tokenizer, which is not here; characters cut finer than tokens).
STREAMINGS: dict[str, Any] = {
    "char": lambda t: list(t),
    "rand:1:4": lambda t: cuts(t, 1, 4),
    "rand:2:12": lambda t: cuts(t, 2, 12),
}


def check(fx: Fixture) -> str | None:
    """None if ``fx`` conforms non-streamed and streamed every way, else why not."""
    nonstream = parse_nonstream(fx)
    try:
        assert_conforms(fx, nonstream)
    except AssertionError as e:
        return "nonstream: " + str(e)
    for label, split in STREAMINGS.items():
        streamed = parse_stream(fx, split(fx.raw_output))
        try:
            assert_equivalent(nonstream, streamed)
        except AssertionError as e:
            return f"stream {label}: " + str(e)
    return None


def fixtures() -> list[Fixture]:
    return load_fixtures()


def main(argv: Sequence[str]) -> int:
    """Print per family: fixtures passed / total; ``-v`` prints each failure."""
    verbose = "-v" in argv
    only = [a for a in argv if not a.startswith("-")]
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for fx in fixtures():
        if only and not any(fx.id.startswith(o) for o in only):
            continue
        total[fx.family] += 1
        why = check(fx)
        if why is None:
            passed[fx.family] += 1
        elif verbose:
            print(f"--- {fx.id}\n{why}\n")
    for fam in sorted(total):
        print(f"{fam:14} {passed[fam]:4} / {total[fam]}")
    print(f"{'all':14} {sum(passed.values()):4} / {sum(total.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
