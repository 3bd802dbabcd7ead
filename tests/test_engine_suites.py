"""The engines' own parser tests as a second outside corpus, beside
canitoolcall: cases transcribed from the parser test suites of SGLang,
llama.cpp, lmdeploy and mlx-lm (``tests/data/engine_cases.json``, each with
its origin: repository, file, test).

Each case is the model's raw output as a backend without parsers sends it
(the ``content`` of a chat completion), the tools the test offers, and the
parse the engine's test expects. It runs with fresh state through
``fix_completion`` and through ``fix_chunks`` cut at every offset into two
pieces and one character at a time; every one of these must give the
expected content, reasoning and calls (names, and arguments as parsed JSON).
Text is compared strictly, as canitoolcall's check does (an empty string is
no text), except where the engine's own test ignores whitespace at the ends
of content and reasoning (llama.cpp's ``assert_msg_equals`` strips both):
such a case says ``"whitespace": "ends"`` in its options. Cases streamfix
does differently are listed with the reason in ``tests/engine_known.py``;
they must fail (strictly: a listed case that starts passing fails here until
it leaves the list).

``python -m tests.test_engine_suites`` prints the counts per engine and per
family, and the differences grouped by reason (``-v``: each failure).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import streamfix

from .engine_known import KNOWN
from .support.streamutil import chunk

#: The corpus, one file per transcription (``engine_cases.json``: SGLang,
#: llama.cpp, lmdeploy, mlx-lm; ``engine_cases_<source>.json``: later ones).
CASE_FILES = sorted((Path(__file__).resolve().parent / "data").glob("engine_cases*.json"))

#: (content, reasoning, [(name, arguments)]) as a client sees the reply.
Parse = tuple[str | None, str | None, list[tuple[str, Any]]]


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in CASE_FILES:
        cases.extend(json.loads(path.read_text(encoding="utf-8")))
    return cases


CASES = load_cases()


def request_for(case: dict[str, Any]) -> dict[str, Any]:
    """What a client sends: the model name, the tools, and the thinking
    switch (``enable_thinking``) or ``reasoning_effort`` when the test sets one."""
    options = case.get("options") or {}
    req: dict[str, Any] = {
        "model": options.get("model", "test-model"),
        "messages": [{"role": "user", "content": "(engine test case)"}],
    }
    if case["tools"]:
        req["tools"] = case["tools"]
    if "thinking" in options:
        req["chat_template_kwargs"] = {"enable_thinking": options["thinking"]}
    if "tool_choice" in options:
        req["tool_choice"] = options["tool_choice"]
    if "reasoning_effort" in options:
        req["reasoning_effort"] = options["reasoning_effort"]
    return req


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return ("not JSON", raw)


def expected(case: dict[str, Any]) -> Parse:
    want = case["expect"]
    calls = [(c["name"], c["arguments"]) for c in want["calls"]]
    return want.get("content") or None, want.get("reasoning") or None, calls


def parse_whole(case: dict[str, Any]) -> Parse:
    completion = {
        "id": "chatcmpl-engine-case",
        "object": "chat.completion",
        "created": 1,
        "model": request_for(case)["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": case["text"]},
                "finish_reason": finish_of(case),
            }
        ],
    }
    msg = streamfix.fix_completion(completion, request_for(case))["choices"][0]["message"]
    calls = [
        (c["function"]["name"], _arguments(c["function"]["arguments"]))
        for c in msg.get("tool_calls") or []
    ]
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return msg.get("content") or None, reasoning or None, calls


def finish_of(case: dict[str, Any]) -> str:
    """``length`` for a case the test cuts at the token budget, else ``stop``."""
    return str((case.get("options") or {}).get("finish", "stop"))


async def _chunks(pieces: Sequence[str], finish: str) -> AsyncIterator[dict[str, Any]]:
    yield chunk(role="assistant", content="")
    for p in pieces:
        if p:
            yield chunk(p)
    yield chunk(finish=finish)


async def _stream(case: dict[str, Any], pieces: Sequence[str]) -> Parse:
    content, reasoning = "", ""
    calls: dict[int, list[str]] = {}
    async for out in streamfix.fix_chunks(_chunks(pieces, finish_of(case)), request_for(case)):
        for ch in out.get("choices") or []:
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or d.get("reasoning") or ""
            for tc in d.get("tool_calls") or []:
                cur = calls.setdefault(tc["index"], ["", ""])
                fn = tc.get("function") or {}
                cur[0] += fn.get("name") or ""
                cur[1] += fn.get("arguments") or ""
    got = [(calls[i][0], _arguments(calls[i][1])) for i in sorted(calls)]
    return content or None, reasoning or None, got


def streamings(text: str) -> list[tuple[str, list[str]]]:
    """Every cut into two pieces, and one character at a time."""
    out = [(f"cut@{i}", [text[:i], text[i:]]) for i in range(1, len(text))]
    out.append(("char", list(text)))
    return out


def _describe(want: Parse, got: Parse) -> str:
    parts = []
    for label, w, g in zip(("content", "reasoning", "calls"), want, got, strict=True):
        if w != g:
            parts.append(f"{label}: expected {w!r}, got {g!r}")
    return "; ".join(parts)


def _judged(case: dict[str, Any], parse: Parse) -> Parse:
    """``parse`` as the engine's test compares it."""
    if (case.get("options") or {}).get("whitespace") != "ends":
        return parse
    content, reasoning, calls = parse
    return (content or "").strip() or None, (reasoning or "").strip() or None, calls


def check(case: dict[str, Any]) -> str | None:
    """None if ``case`` parses as expected whole and streamed every way,
    else the first way it does not and how."""
    want = _judged(case, expected(case))
    got = _judged(case, parse_whole(case))
    if got != want:
        return "whole: " + _describe(want, got)

    async def streamed() -> str | None:
        for label, pieces in streamings(case["text"]):
            got = _judged(case, await _stream(case, pieces))
            if got != want:
                return f"stream {label}: " + _describe(want, got)
        return None

    return asyncio.run(streamed())


def _param(case: dict[str, Any]) -> object:
    why = KNOWN.get(case["id"])
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_engine_case(case: dict[str, Any]) -> None:
    why = check(case)
    assert why is None, why


def test_the_known_differences_are_cases() -> None:
    ids = {c["id"] for c in CASES}
    assert set(KNOWN) <= ids, sorted(set(KNOWN) - ids)


def test_case_ids_are_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


def _group(reason: str) -> str:
    """``kind: class`` of a reason (``tests/engine_known.py``)."""
    kind, cls = [*reason.split(":"), "", ""][:2]
    return f"{kind}: {cls.strip()}"


def _engine(case: dict[str, Any]) -> str:
    return str(case["origin"]["repo"]).split("/")[-1]


def main(argv: Sequence[str]) -> int:
    """Counts per engine and per family; the differences grouped by reason."""
    verbose = "-v" in argv
    total: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    fam_total: Counter[str] = Counter()
    fam_passed: Counter[str] = Counter()
    groups: defaultdict[str, list[str]] = defaultdict(list)
    for case in CASES:
        why = check(case)
        total[_engine(case)] += 1
        fam_total[case["family"]] += 1
        if why is None:
            passed[_engine(case)] += 1
            fam_passed[case["family"]] += 1
        else:
            groups[_group(KNOWN.get(case["id"], "not listed: -"))].append(case["id"])
            if verbose:
                print(f"--- {case['id']}\n{why}\n")
    for name in sorted(total):
        print(f"{name:14} {passed[name]:4} / {total[name]}")
    print(f"{'all':14} {sum(passed.values()):4} / {sum(total.values())}\n")
    for fam in sorted(fam_total):
        print(f"{fam:14} {fam_passed[fam]:4} / {fam_total[fam]}")
    print()
    for reason in sorted(groups):
        print(f"{reason} ({len(groups[reason])}): {', '.join(groups[reason])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
