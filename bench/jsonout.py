"""The cost of structured output (``transforms/jsonout.py``).

``python -m bench.jsonout``: per chunk, a clean JSON reply streamed through
``SSESession`` with ``response_format`` against the same reply without it
(medians over rounds, alternated); the time to repair a held reply; and the
corpus (tests/data/json_output_corpus.json) repaired by our rewriter and by
the ``json-repair`` library (``pip install json-repair``), right or wrong
against the expected value, and how fast.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from streamfix.session import SSESession
from streamfix.transforms.jsonout import JsonSpec, extract
from tests.support.streamutil import chunk, sse

CORPUS = Path(__file__).parent.parent / "tests" / "data" / "json_output_corpus.json"
ROUNDS = 15


def _reply(n_items: int = 200) -> list[str]:
    value = {"items": [{"id": i, "name": f"item {i}", "ok": i % 2 == 0} for i in range(n_items)]}
    text = json.dumps(value)
    return [text[i : i + 4] for i in range(0, len(text), 4)]  # about one token a chunk


def _per_chunk(pieces: list[str], req: dict[str, Any]) -> float:
    events = [sse([chunk(p)], done=False) for p in pieces]
    session = SSESession(req)
    t0 = time.perf_counter()
    for e in events:
        session.feed(e)
    session.close()
    return (time.perf_counter() - t0) / len(pieces)


def main() -> None:
    pieces = _reply()
    plain = {"model": "m", "messages": []}
    asked = {**plain, "response_format": {"type": "json_object"}}
    a, b = [], []
    for _ in range(ROUNDS):
        a.append(_per_chunk(pieces, plain))
        b.append(_per_chunk(pieces, asked))
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"clean JSON, {len(pieces)} chunks: {ma * 1e6:.2f} µs/chunk plain, "
        f"{mb * 1e6:.2f} µs/chunk with response_format ({mb / ma:.2f}x)"
    )
    cases = json.loads(CORPUS.read_text())["cases"]
    good = [c for c in cases if not c.get("invalid")]
    t = []
    ok = 0
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for c in good:
            spec = JsonSpec("json_schema" if c["schema"] else "json_object", c["schema"], False)
            got = extract(c["content"], spec, False)
            if _ == 0:
                with contextlib.suppress(ValueError):
                    ok += json.loads(got.text) == c["expected"]
        t.append((time.perf_counter() - t0) / len(good))
    print(
        f"streamfix extract+repair+validate: {ok}/{len(good)} right, "
        f"{statistics.median(t) * 1e6:.1f} µs/reply"
    )
    try:
        import json_repair
    except ImportError:
        print("json-repair not installed")
        return
    t, ok = [], 0
    for r in range(ROUNDS):
        t0 = time.perf_counter()
        for c in good:
            v = json_repair.loads(c["content"])
            if r == 0:
                ok += v == c["expected"]
        t.append((time.perf_counter() - t0) / len(good))
    print(f"json-repair loads: {ok}/{len(good)} right, {statistics.median(t) * 1e6:.1f} µs/reply")


if __name__ == "__main__":
    main()
