"""Structured output against the library a user would pick instead.

``python -m bench.json_corpus``: the corpus of broken model replies from
other projects' suites (tests/data/json_repair_corpus.json) through
streamfix (the chain with ``response_format``, whole, and streamed one
character a chunk: the two must agree) and through ``json-repair``
(``pip install json-repair``), judged alike (tests/support/jsoncorpus.py):
the share of ``certain`` replies that come out as the one right value, and
the share of ``guess`` replies refused (streamfix: flagged ``invalid``;
json-repair: an error, nothing, or what the schema rejects).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.support.jsoncorpus import CASES, failure, json_repair_failure, streamed, whole


def _score(judge: Callable[[dict[str, Any]], str | None]) -> tuple[Counter[str], list[str]]:
    """Right answers per class, and the ids judged wrong."""
    right: Counter[str] = Counter()
    wrong = []
    for c in CASES:
        if judge(c) is None:
            right[c["class"]] += 1
        else:
            wrong.append(c["id"])
    return right, wrong


def _line(name: str, right: Counter[str], total: Counter[str]) -> str:
    cert = right["certain"] / total["certain"]
    guess = right["guess"] / total["guess"]
    return (
        f"  {name:<26s} certain right {right['certain']:3d}/{total['certain']} ({cert:6.1%})"
        f"   guesses refused {right['guess']:3d}/{total['guess']} ({guess:6.1%})"
    )


def main() -> None:
    total = Counter(c["class"] for c in CASES)
    print(f"{len(CASES)} replies: {total['certain']} certain, {total['guess']} guesses")
    sf_whole, wrong = _score(lambda c: failure(c, whole(c)))
    sf_stream, _ = _score(lambda c: failure(c, streamed(c, list(c["text"]))))
    mismatch = [c["id"] for c in CASES if streamed(c, list(c["text"])) != whole(c)]
    print(_line("streamfix, whole", sf_whole, total))
    print(_line("streamfix, 1 char a chunk", sf_stream, total))
    print(f"  stream != whole: {len(mismatch)}" + (f" {mismatch}" if mismatch else ""))
    try:
        import json_repair  # noqa: F401
    except ImportError:
        print("  json-repair not installed")
    else:
        jr, _ = _score(json_repair_failure)
        print(_line("json-repair loads", jr, total))
    if "-v" in sys.argv:
        print("streamfix gets wrong:", *wrong, sep="\n  ")


if __name__ == "__main__":
    main()
