"""The cost of structured output (``transforms/jsonout.py``).

``python -m bench.jsonout``: per chunk, a clean JSON reply streamed through
``SSESession`` with ``response_format`` against the same reply without it
(medians over rounds, alternated); the time to repair a held reply; and the
corpus (tests/data/json_output_corpus.json) repaired by our rewriter and by
the ``json-repair`` library (``pip install json-repair``), right or wrong
against the expected value, and how fast; and the latency of a repaired
reply through the proxy (``proxy_latency``): a scripted loopback upstream
streams a JSON reply (about 600 tokens, one event a write), and the time
to the last byte at the client is compared, medians over alternated
rounds, for the clean reply without ``response_format``, the same with it
(sent byte for byte), the reply fenced and broken (single quotes, a
trailing comma, ``True``) with it (repaired as it streams), and the
broken one under ``strict: true`` (held, repaired whole, sent at the end).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from streamfix.session import SSESession
from streamfix.spec import JsonSpec
from streamfix.transforms.jsonout import extract
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


LATENCY_ROUNDS = 31
MESSAGES = [{"role": "user", "content": "The records, as JSON."}]


def _records(n: int, broken: bool) -> list[str]:
    """A reply of ``n`` records in about-one-token pieces; ``broken``: in a
    fence, single-quoted, ``True``/``False`` and a trailing comma."""
    rows = [{"id": i, "name": f"item {i}", "ok": i % 2 == 0, "tags": ["a", "b"]} for i in range(n)]
    text = json.dumps({"items": rows}, indent=1)
    if broken:
        text = text.replace('"', "'").replace("true", "True").replace("false", "False")
        text = "```json\n" + text[:-1].rstrip() + ",\n}\n```"
    return [text[i : i + 4] for i in range(0, len(text), 4)]


async def _latency() -> dict[str, float]:
    import aiohttp
    import orjson

    from tests.support.streamutil import assemble, text_stream
    from tests.support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

    schema = {"type": "object", "properties": {"items": {"type": "array"}}}

    def fmt(strict: bool) -> dict[str, Any]:
        js: dict[str, Any] = {"name": "records", "schema": schema}
        if strict:
            js["strict"] = True
        return {"type": "json_schema", "json_schema": js}

    # 16 records: a longer list with counting ids is cut by the repetition
    # cutter as a counted loop (about 2 KiB in), with or without response_format
    clean, broken = _records(16, False), _records(16, True)
    cases: dict[str, tuple[list[str], dict[str, Any] | None]] = {
        "clean, no response_format": (clean, None),
        "clean, response_format": (clean, fmt(False)),
        "fenced+broken, response_format": (broken, fmt(False)),
        "fenced+broken, strict": (broken, fmt(True)),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, retries=0)) as px,
        aiohttp.ClientSession() as http,
    ):
        for r in range(LATENCY_ROUNDS + 1):
            for name, (pieces, rf) in cases.items():
                data = text_stream(pieces)
                events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
                up.push(Reply.stream(events))
                body: dict[str, Any] = {"model": "m", "messages": MESSAGES, "stream": True}
                if rf is not None:
                    body["response_format"] = rf
                t0 = time.perf_counter()
                async with http.post(px.url + "/chat/completions", data=orjson.dumps(body)) as resp:
                    got = await resp.read()
                t = time.perf_counter() - t0
                assert resp.status == 200 and b"[DONE]" in got, got[-200:]
                if r:  # the first round warms up
                    times[name].append(t)
                elif pieces is clean:  # the upstream's bytes (the public model name put back)
                    assert got.replace(b'"model":"m"', b'"model":"test-model"') == data
                else:  # what the client got parses, and is the value
                    assert json.loads(assemble(got).content) == json.loads("".join(clean))
    return {k: statistics.median(v) for k, v in times.items()}


def proxy_latency() -> None:
    med = asyncio.run(_latency())
    base = med["clean, no response_format"]
    n = len(_records(16, False))
    print(
        f"through the proxy, a {n}-chunk JSON reply, time to last byte "
        f"(medians of {LATENCY_ROUNDS} alternated rounds):"
    )
    for name, t in med.items():
        print(f"  {name:<32s}{t * 1e3:7.2f} ms  ({t / base:.2f}x)")


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
    proxy_latency()
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
