"""Proxy overhead: direct vs a byte-passthrough aiohttp proxy vs streamfix.

    .venv/bin/python bench/proxy.py [--chunks N] [--streams 32] [--json]

Three processes besides this client: a fast scripted upstream, a minimal
aiohttp proxy that copies bytes (the fair baseline: same framework, same
event loop, no repair), and ``streamfix serve``. In one run:

- **Latency per chunk, one stream.** The upstream paces chunks (one per
  ``--pace`` ms, so each is its own network read) and stamps each with
  ``time.monotonic_ns()`` in a vendor field; the client subtracts on
  arrival (CLOCK_MONOTONIC is system-wide on Linux). Reported: p50 and
  p99 per path, and what each proxy adds over the direct path.
  Each stamped chunk also carries per-token ``logprobs``: no two chunks
  have the same bytes around their content (the harder case: each is
  decoded). A second stream per round measures the common case, chunks
  alike around the content as servers send them when no logprobs are
  asked: the upstream keeps each chunk's send time itself and the client
  fetches them afterwards (``/v1/sent/ID``), matching them by position.
- **Throughput, 32 concurrent streams.** The upstream sends as fast as it
  can; chunks per second over all streams, per path. These chunks have the
  same bytes around the content, as servers send them when no logprobs are
  asked (``--logprobs``: stamped chunks like the latency run's instead).
- **Vendor fields.** Every chunk's unowned fields (``system_fingerprint``,
  ``logprobs``, ``x_vendor``, the stamp) must reach the client unchanged.
- **The front doors** (``--no-doors`` skips them). The same streams through
  streamfix's ``/v1/messages`` and ``/v1/responses``, in the same rounds:
  latency per chunk (chunks alike around the content, timed by the send
  times the upstream keeps: the doors' events carry no vendor stamp; one
  text delta event per chunk) and throughput (text delta events per
  second). Reported: what each door adds over the direct path, as a
  multiple of what ``/v1/chat/completions`` adds (target: within 1.3x).
  The bench parameters reach the upstream in an ``X-Bench`` header, which
  the proxy forwards (the doors' translation keeps no unknown body field).

- **Time to first byte** (``--first-byte-only``: this alone, ~10 s).
  A new client connection per request (nothing reused between the client
  and any path; each proxy keeps its pooled connections to the upstream),
  30-chunk replies sent unpaced (``--first-byte-pace``: one chunk per
  that many ms after the role chunk), with and without ``tools``, the
  lanes and the paths taking turns request by request in each round.
  Reported per lane: what each proxy adds over direct to the time from
  sending the request to the first body byte (the median over rounds of
  each round's median), streamfix's as a multiple of the byte copy's
  (target: within 1.5x), the same to the first text chunk, and the CPU
  each proxy process spent per request.

``--traces``: a second ``streamfix serve`` with ``--traces``, exporting
over OTLP/HTTP to a receiver on loopback (a fourth process, which counts
what it gets), measured in the same rounds as a fourth path; reported:
what traces add to the latency and their throughput ratio, traced over
untraced, and the spans' exports the receiver got.

``--ui``: streamfix runs with the operator page on (``--ui``, which needs
a key: every client sends one, on every path) and an operator watching it:
``/ui`` and ``/ui/unrecognised`` fetched once a second through the run.
Compare with the same run without ``--ui``. With ``--traces`` too, the
traced streamfix has the page (and is the one watched) and the other has
neither: the traces figures are then both on against both off.

Both are measured in ``--rounds`` rounds (15) that take the paths in turn,
so a slow moment of the machine falls on all of them; medians are reported.
A throughput round is about a tenth of a second, so one round's ratio moves
by ±0.15 on two shared cores; the median of 15 moves by a few hundredths
(5 rounds moved it by ±0.1).
The request offers tools, so every chunk goes through the whole chain
(reasoning, repetition, detector, residue), not just the no-tools lane.
The latency target is judged on the stamped stream (the harder case).
Bounded: about 70 s on two shared cores.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from streamfix.tools.local import free_port

ROOT = Path(__file__).resolve().parents[1]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]
_VOCAB = [
    "the",
    "order",
    "shipped",
    "on",
    "Monday",
    "and",
    "should",
    "arrive",
    "soon",
    "from",
    "our",
    "warehouse",
    "in",
    "Lyon",
    "please",
    "check",
    "tracking",
    "number",
    "later",
    "today",
    "tomorrow",
    "parcel",
    "courier",
    "delayed",
    "weather",
    "customer",
    "service",
    "team",
    "will",
    "contact",
    "you",
    "if",
    "anything",
    "changes",
    "meanwhile",
    "thank",
    "patience",
    "refund",
    "policy",
    "allows",
    "returns",
    "within",
    "thirty",
    "days",
    "receipt",
    "invoice",
    "attached",
    "email",
]
#: Prose that never repeats (a stream of one sentence over and over is
#: a loop, and streamfix would rightly cut it): word i is fixed by i. Each
#: token carries its space in front, as the BPE tokenizers of Llama 3,
#: Qwen, Mistral and GPT write them (" word"): with tools offered, a chunk
#: that ends in blanks is re-split (the blanks may be the layout before a
#: call), so trailing-space tokens would measure a stream no server sends.
WORDS = [" " + random.Random(i).choice(_VOCAB) for i in range(4096)]


#: Chunks per upstream write in the throughput run. Engines write one
#: chunk per token (vLLM, llama.cpp flush each); ``--batch`` raises it to
#: see the case where every network read carries many chunks.
BATCH = 1
#: ``--logprobs``: the throughput run's chunks are stamped and carry
#: per-token logprobs, like the latency run's (no two alike).
LOGPROBS = False
#: ``--reasoning``: the first half of every stream is reasoning
#: (``delta.reasoning_content``), as llama.cpp and vLLM stream a thinking
#: model's reply (Qwen3, DeepSeek-R1 distills), the rest content.
REASONING = False


def _word(i: int) -> str:
    return WORDS[i % len(WORDS)]


def _chunk(i: int, stamp: int | None, key: str = "content") -> bytes:
    """Chunk ``i``. Stamped (the latency run): its sequence number and send
    time in a vendor field, and per-token ``logprobs``, so every chunk's
    bytes differ around the content. Unstamped (the throughput run, unless
    ``--logprobs``): the same bytes around the content in every chunk,
    as vLLM, llama.cpp and Ollama send them when no logprobs are asked."""
    word = _word(i)
    varying = stamp is not None
    obj = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
        "system_fingerprint": "fp_bench",
        "x_vendor": {"seq": i, "t": stamp} if varying else {"region": "eu"},
        "choices": [
            {
                "index": 0,
                "delta": {key: word},
                "logprobs": (
                    {"content": [{"token": word, "logprob": -0.5, "bytes": None}]}
                    if varying
                    else None
                ),
                "finish_reason": None,
            }
        ],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


_ROLE = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
)
_FINISH = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


# -- the servers (each runs in its own process) ------------------------------


#: Send times (``time.monotonic_ns()``) of the chunks of the alike latency
#: streams, by the id the client gave (``x_alike``), until it fetches them.
SENT: dict[str, list[int]] = {}


async def _sent_handler(request: web.Request) -> web.Response:
    return web.json_response(SENT.pop(request.match_info["id"], []))


async def _upstream_handler(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if "X-Bench" in request.headers:  # a front door's request (see the docstring)
        body.update(json.loads(request.headers["X-Bench"]))
    n = int(body.get("x_chunks", 200))
    pace = float(body.get("x_pace_ms", 0)) / 1000
    thinking = n // 2 if body.get("x_reasoning") else 0

    def key(i: int) -> str:
        return "reasoning_content" if i < thinking else "content"

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    now = time.monotonic_ns
    try:
        await resp.write(_ROLE)
        alike = body.get("x_alike")
        if pace and alike:  # not stamped: the send times are kept here
            times = SENT[alike] = []
            for i in range(n):
                await asyncio.sleep(pace)
                times.append(now())
                await resp.write(_chunk(i, None, key(i)))
        elif pace:
            for i in range(n):
                await asyncio.sleep(pace)
                await resp.write(_chunk(i, now(), key(i)))
        else:
            batch = BATCH
            stamp = now if body.get("x_logprobs") else lambda: None
            for start in range(0, n, batch):
                await resp.write(
                    b"".join(
                        _chunk(i, stamp(), key(i)) for i in range(start, min(n, start + batch))
                    )
                )
        await resp.write(_FINISH)
    except ConnectionResetError:
        pass  # the client (or a proxy) hung up
    return resp


async def _passthrough_handler(request: web.Request) -> web.StreamResponse:
    session: aiohttp.ClientSession = request.app["session"]
    upstream: str = request.app["upstream"]
    data = await request.read()
    async with session.post(
        upstream + "/chat/completions", data=data, headers={"Content-Type": "application/json"}
    ) as up:
        resp = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        async for part in up.content.iter_any():
            await resp.write(part)
        return resp


async def _otlp_handler(request: web.Request) -> web.Response:
    got = request.app["got"]
    got["exports"] += 1
    got["bytes"] += len(await request.read())
    return web.Response(body=b"", content_type="application/x-protobuf")


async def _otlp_count(request: web.Request) -> web.Response:
    return web.json_response(request.app["got"])


def _serve(kind: str, port: int, upstream: str | None) -> None:
    app = web.Application()
    if kind == "otlp":  # --traces: a receiver that counts the exports
        app["got"] = {"exports": 0, "bytes": 0}
        app.router.add_post("/v1/traces", _otlp_handler)
        app.router.add_get("/received", _otlp_count)
    elif kind == "upstream":
        app.router.add_post("/v1/chat/completions", _upstream_handler)
        app.router.add_get("/v1/sent/{id}", _sent_handler)
    else:

        async def ctx(app: web.Application) -> Any:
            app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
            yield
            await app["session"].close()

        app["upstream"] = upstream
        app.cleanup_ctx.append(ctx)
        app.router.add_post("/v1/chat/completions", _passthrough_handler)
    web.run_app(
        app, host="127.0.0.1", port=port, print=None, access_log=None, handler_cancellation=True
    )


# -- the client ----------------------------------------------------------------


#: ``--ui``: the key streamfix is started with and every client sends.
UI_KEY: dict[str, str] = {}


async def _watch_ui(root: str) -> None:
    """An operator with the page open: its views fetched once a second."""
    async with aiohttp.ClientSession(headers=UI_KEY) as s:
        while True:
            for path in ("/ui", "/ui/unrecognised"):
                async with s.get(root + path) as r:
                    assert r.status == 200, r.status
                    await r.read()
            await asyncio.sleep(1.0)


async def _wait(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession(headers=UI_KEY) as s:
        while time.monotonic() < deadline:
            try:
                async with s.post(url + "/chat/completions", json=_req(1, 0)) as r:
                    await r.read()
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")


def _req(
    chunks: int, pace_ms: float, tools: bool = True, alike: str | None = None
) -> dict[str, Any]:
    req: dict[str, Any] = {
        "model": "bench",
        "stream": True,
        "messages": [{"role": "user", "content": "Where is my order?"}],
        "x_chunks": chunks,
        "x_pace_ms": pace_ms,
        "x_logprobs": LOGPROBS,
        "x_reasoning": REASONING,
        "x_alike": alike,
    }
    if tools:
        req["tools"] = TOOLS
    return req


class _Check:
    """Every chunk's fields that streamfix does not own arrive unchanged;
    the content adds up to the same text."""

    def __init__(self) -> None:
        self.chunks = 0
        self.bad = 0
        self.bad_text = 0

    def event(self, obj: dict[str, Any]) -> None:
        xv = obj.get("x_vendor")
        if xv is None:
            return
        self.chunks += 1
        ch = obj["choices"][0]
        if "seq" in xv:
            word = _word(xv["seq"])
            logprobs = {"content": [{"token": word, "logprob": -0.5, "bytes": None}]}
        else:
            logprobs = None
            if xv != {"region": "eu"}:
                self.bad += 1
                return
        ok = obj.get("system_fingerprint") == "fp_bench" and ch.get("logprobs") == logprobs
        self.bad += not ok

    def text(self, content: str, n: int) -> None:
        self.bad_text += content != "".join(_word(i) for i in range(n))


async def _stream(
    session: aiohttp.ClientSession,
    url: str,
    chunks: int,
    pace_ms: float,
    lat: list[tuple[int, float]] | None,
    check: _Check,
    tools: bool = True,
    first: list[float] | None = None,
    alike: tuple[str, str] | None = None,
    first_byte: list[float] | None = None,
) -> int:
    """One stream; its latencies (chunk number, µs) into ``lat``: from the
    stamps, or with ``alike`` (the upstream's URL, an id) from the send
    times the upstream kept for unstamped chunks. ``first``: µs from the
    request to the first chunk of the upstream's text; ``first_byte``: to
    the first byte of the body."""
    n = 0
    buf = b""
    text: list[str] = []
    arrivals: list[int] = []
    t_req = time.monotonic_ns()
    body = _req(chunks, pace_ms, tools, alike[1] if alike else None)
    async with session.post(url + "/chat/completions", json=body) as r:
        async for part in r.content.iter_any():
            t = time.monotonic_ns()
            if first_byte is not None:  # the first read of the body
                first_byte.append((t - t_req) / 1000)
                first_byte = None
            buf += part
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if not ev.startswith(b"data: {"):
                    continue
                obj = orjson.loads(ev[6:])
                check.event(obj)
                for ch in obj.get("choices") or ():
                    delta = ch.get("delta", {})
                    text.append(delta.get("reasoning_content") or delta.get("content") or "")
                xv = obj.get("x_vendor")
                if xv is not None:
                    n += 1
                    if alike is not None:
                        arrivals.append(t)
                    elif lat is not None:
                        lat.append((xv["seq"], (t - xv["t"]) / 1000))  # µs
                    if first is not None and n == 1:
                        first.append((t - t_req) / 1000)
    check.text("".join(text), chunks)
    if alike is not None and lat is not None:
        await _pair_sent(session, alike, arrivals, lat, check)
    return n


async def _pair_sent(
    session: aiohttp.ClientSession,
    alike: tuple[str, str],
    arrivals: list[int],
    lat: list[tuple[int, float]],
    check: _Check,
) -> None:
    """Latencies (chunk number, µs) into ``lat``: each arrival paired by
    position with the send time the upstream kept for stream ``alike``."""
    async with session.get(f"{alike[0]}/sent/{alike[1]}") as r:
        sent: list[int] = await r.json()
    if len(sent) != len(arrivals):
        check.bad_text += 1  # not one arrival per chunk sent: reported BAD
    else:
        pairs = enumerate(zip(arrivals, sent, strict=True))
        lat.extend((i, (a - t) / 1000) for i, (a, t) in pairs)


async def _chain_time(url: str) -> dict[str, float]:
    """Mean time streamfix spent inside ``SSESession.feed`` per upstream
    read, from its own ``/metrics`` histogram."""
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        text = await r.text()
    vals = {}
    for line in text.splitlines():
        for key in ("streamfix_chunk_seconds_sum", "streamfix_chunk_seconds_count"):
            if line.startswith(key + " "):
                vals[key] = float(line.split()[1])
    total, count = (
        vals.get("streamfix_chunk_seconds_sum", 0.0),
        vals.get("streamfix_chunk_seconds_count", 0.0),
    )
    return {
        "reads": count,
        "mean_us_per_read": total / count * 1e6 if count else 0.0,
        "total_s": total,
    }


#: The doors' request bodies (the same question and tool as ``_req``), and
#: the bytes that mark the event carrying one text delta.
DOORS: dict[str, tuple[str, bytes]] = {
    "messages": ("/messages", b'"type":"text_delta"'),
    "responses": ("/responses", b'"type":"response.output_text.delta"'),
}


def _door_body(door: str, tools: bool) -> dict[str, Any]:
    question = "Where is my order?"
    params = TOOLS[0]["function"]["parameters"]
    if door == "messages":
        body: dict[str, Any] = {
            "model": "bench",
            "max_tokens": 4096,
            "stream": True,
            "messages": [{"role": "user", "content": question}],
        }
        if tools:
            body["tools"] = [{"name": "lookup_order", "input_schema": params}]
        return body
    body = {"model": "bench", "stream": True, "input": question}
    if tools:
        body["tools"] = [{"type": "function", "name": "lookup_order", "parameters": params}]
    return body


async def _door_stream(
    session: aiohttp.ClientSession,
    url: str,
    door: str,
    chunks: int,
    pace_ms: float,
    lat: list[tuple[int, float]] | None,
    check: _Check,
    tools: bool = True,
    alike: tuple[str, str] | None = None,
) -> int:
    """One stream through a door; text delta events counted, their text
    checked, and with ``alike`` their latencies into ``lat`` (as
    ``_stream`` does for chat chunks)."""
    path, marker = DOORS[door]
    bench: dict[str, Any] = {"x_chunks": chunks, "x_pace_ms": pace_ms, "x_logprobs": False}
    bench["x_reasoning"] = False
    if alike is not None:
        bench["x_alike"] = alike[1]
    n = 0
    buf = b""
    text: list[str] = []
    arrivals: list[int] = []
    headers = {"X-Bench": json.dumps(bench)}
    async with session.post(url + path, json=_door_body(door, tools), headers=headers) as r:
        async for part in r.content.iter_any():
            t = time.monotonic_ns()
            buf += part
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if marker not in ev:
                    continue
                obj = orjson.loads(ev[ev.index(b"data: ") + 6 :])
                delta = obj["delta"]
                text.append(delta["text"] if door == "messages" else delta)
                n += 1
                arrivals.append(t)
    check.text("".join(text), chunks)
    if alike is not None and lat is not None:
        await _pair_sent(session, alike, arrivals, lat, check)
    return n


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process (Linux ``/proc``), or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    paths: dict[str, str], args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    # "steady": the second half of each latency stream, past any hold at
    # the start of a reply (the reasoning splitter holds up to 2048 chars)
    steady = args.latency_chunks // 2
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=60), headers=UI_KEY
    ) as session:
        doors = [] if args.no_doors else list(DOORS)
        # warm up every path (connections, imports, JIT-free but caches)
        for url in paths.values():
            await _stream(session, url, 50, 0, None, _Check())
        for door in doors:
            await _door_stream(session, paths["streamfix"], door, 50, 0, None, _Check())
        every = [*paths, *doors]
        checks = {name: _Check() for name in every}
        lat: dict[str, list[tuple[int, float]]] = {name: [] for name in paths}
        lat_alike: dict[str, list[tuple[int, float]]] = {name: [] for name in every}
        stream_ids = itertools.count()
        first: dict[str, list[float]] = {name: [] for name in paths}
        rates: dict[str, list[float]] = {name: [] for name in every}
        cpu: dict[str, float | None] = {name: 0.0 for name in paths}
        sent = dict.fromkeys(paths, 0)
        complete = dict.fromkeys(every, True)
        tools = not args.no_tools
        # Rounds, each path in turn, so that a slow moment of the machine
        # falls on all paths alike; chunks/s is the median round.
        for _ in range(args.rounds):
            for name, url in paths.items():
                for _ in range(args.latency_streams):
                    await _stream(
                        session,
                        url,
                        args.latency_chunks,
                        args.pace,
                        lat[name],
                        checks[name],
                        tools,
                        first[name],
                    )
                    await _stream(
                        session,
                        url,
                        args.latency_chunks,
                        args.pace,
                        lat_alike[name],
                        checks[name],
                        tools,
                        alike=(paths["direct"], f"s{next(stream_ids)}"),
                    )
                cpu0 = _cpu_seconds(pids.get(name))
                t0 = time.perf_counter()
                counts = await asyncio.gather(
                    *(
                        _stream(session, url, args.chunks, 0, None, checks[name], tools)
                        for _ in range(args.streams)
                    )
                )
                wall = time.perf_counter() - t0
                cpu1 = _cpu_seconds(pids.get(name))
                used = cpu[name]
                cpu[name] = (
                    used + cpu1 - cpu0
                    if used is not None and cpu0 is not None and cpu1 is not None
                    else None
                )
                sent[name] += sum(counts)
                rates[name].append(sum(counts) / wall)
                complete[name] = complete[name] and all(c == args.chunks for c in counts)
            for door in doors:
                for _ in range(args.latency_streams):
                    await _door_stream(
                        session,
                        paths["streamfix"],
                        door,
                        args.latency_chunks,
                        args.pace,
                        lat_alike[door],
                        checks[door],
                        tools,
                        alike=(paths["direct"], f"s{next(stream_ids)}"),
                    )
                t0 = time.perf_counter()
                counts = await asyncio.gather(
                    *(
                        _door_stream(
                            session, paths["streamfix"], door, args.chunks, 0, None, checks[door]
                        )
                        for _ in range(args.streams)
                    )
                )
                rates[door].append(sum(counts) / (time.perf_counter() - t0))
                complete[door] = complete[door] and all(c == args.chunks for c in counts)
        for door in doors:
            check = checks[door]
            results[door] = {
                "alike_p50_us": statistics.median(v for _, v in lat_alike[door]),
                "alike_p99_us": _pct([v for _, v in lat_alike[door]], 0.99),
                "chunks_per_s": statistics.median(rates[door]),
                "text_mismatches": check.bad_text,
                "complete": complete[door],
            }
        for name in paths:
            values = [v for _, v in lat[name]]
            alike_values = [v for _, v in lat_alike[name]] or [float("nan")]
            steady_values = [v for i, v in lat[name] if i >= steady]
            used = cpu[name]
            check = checks[name]
            results[name] = {
                # CPU the proxy process spent per chunk in the throughput
                # runs: robust to other load on the machine, unlike chunks/s
                "proxy_cpu_us_per_chunk": (
                    used / sent[name] * 1e6 if used is not None and name in pids else None
                ),
                "p50_us": statistics.median(values),
                "p99_us": _pct(values, 0.99),
                "steady_p50_us": statistics.median(steady_values),
                "steady_p99_us": _pct(steady_values, 0.99),
                "alike_p50_us": statistics.median(alike_values),
                "alike_p99_us": _pct(alike_values, 0.99),
                "first_chunk_us": statistics.median(first[name]),
                "chunks_per_s": statistics.median(rates[name]),
                "chunks_checked": check.chunks,
                "vendor_mismatches": check.bad,
                "text_mismatches": check.bad_text,
                "complete": complete[name],
            }
    return results


#: Chunks per reply in the first-byte run (a short reply, as a chat turn's).
FIRST_BYTE_CHUNKS = 30
#: Requests per path and lane before the first-byte run's rounds (with 3,
#: streamfix's ratio ran higher in the first rounds than in the later ones).
WARM_REQUESTS = 20
#: The first-byte run's lanes: requests without tools and with them.
LANES = {"no_tools": False, "tools": True}


async def _measure_first_byte(
    paths: dict[str, str],
    rounds: int,
    per_round: int,
    pace_ms: float = 0,
    pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What each proxy adds to the time to the first byte of a reply.

    Every request is a new client connection (``force_close``: nothing is
    reused between this client and any path; each proxy keeps its own
    pooled connections to the upstream, as it would in service). Replies
    are ``FIRST_BYTE_CHUNKS`` chunks, read whole and checked, sent unpaced
    (``pace_ms``: one per that many ms, after the role chunk at once).
    In each round the lanes and paths take turns request by request (the
    order of the paths rotating), so a slow moment falls on all alike; a
    path's figure per lane is the median over rounds of its round's
    median. Added = the path's figure minus the direct path's; the ratio
    is streamfix's added over the byte copy's. With ``pids``, the CPU
    each proxy process spent per request over the run (both lanes; robust
    to other load, unlike the times).
    """
    names = list(paths)
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout, headers=UI_KEY) as session:
        check = _Check()
        counts: list[int] = []

        async def one(name: str, tools: bool, byte: list[float], chunk: list[float]) -> None:
            counts.append(
                await _stream(
                    session,
                    paths[name],
                    FIRST_BYTE_CHUNKS,
                    pace_ms,
                    None,
                    check,
                    tools,
                    first=chunk,
                    first_byte=byte,
                )
            )

        for _ in range(WARM_REQUESTS):  # warm: the tool set's matcher, the pools, imports
            for name in names:
                for tools in LANES.values():
                    await one(name, tools, [], [])
        counts.clear()
        pids = pids or {}
        cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        per: dict[str, dict[str, dict[str, list[float]]]] = {
            lane: {name: {"byte": [], "chunk": []} for name in names} for lane in LANES
        }
        for _ in range(rounds):
            got: dict[str, dict[str, tuple[list[float], list[float]]]] = {
                lane: {name: ([], []) for name in names} for lane in LANES
            }
            for i in range(per_round):
                order = names[i % len(names) :] + names[: i % len(names)]
                for lane, tools in LANES.items():
                    for name in order:
                        byte, chunk = got[lane][name]
                        await one(name, tools, byte, chunk)
            for lane in LANES:
                for name in names:
                    byte, chunk = got[lane][name]
                    per[lane][name]["byte"].append(statistics.median(byte))
                    per[lane][name]["chunk"].append(statistics.median(chunk))
        cpu1 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    asked = rounds * per_round * len(LANES)
    cpu_us: dict[str, float] = {}
    for name in pids:
        before, after = cpu0[name], cpu1[name]
        if before is not None and after is not None:
            cpu_us[name] = (after - before) / asked * 1e6
    out: dict[str, Any] = {
        "rounds": rounds,
        "requests_per_round": per_round,
        "chunks": FIRST_BYTE_CHUNKS,
        "pace_ms": pace_ms,
        "complete": all(c == FIRST_BYTE_CHUNKS for c in counts) and not check.bad_text,
        "vendor_mismatches": check.bad,
        "proxy_cpu_us_per_request": cpu_us,
    }
    for lane in LANES:
        med = {
            name: {k: statistics.median(v) for k, v in per[lane][name].items()} for name in names
        }
        added = {
            name: med[name]["byte"] - med["direct"]["byte"] for name in names if name != "direct"
        }
        added_chunk = {
            name: med[name]["chunk"] - med["direct"]["chunk"] for name in names if name != "direct"
        }
        # the ratio of each round on its own: the spread behind the median
        byrounds = [
            (sf - d) / (pt - d) if pt > d else float("nan")
            for d, pt, sf in zip(
                per[lane]["direct"]["byte"],
                per[lane]["passthrough"]["byte"],
                per[lane]["streamfix"]["byte"],
                strict=True,
            )
        ]
        pt_added = added["passthrough"]
        out[lane] = {
            "first_byte_us": {name: med[name]["byte"] for name in names},
            "first_chunk_us": {name: med[name]["chunk"] for name in names},
            "added_us": added,
            "added_first_chunk_us": added_chunk,
            "ratio": added["streamfix"] / pt_added if pt_added > 0 else float("nan"),
            "ratio_first_chunk": (
                added_chunk["streamfix"] / added_chunk["passthrough"]
                if added_chunk["passthrough"] > 0
                else float("nan")
            ),
            "round_ratios": byrounds,
        }
    return out


def _print_first_byte(fb: dict[str, Any]) -> None:
    print(
        f"time to first byte, a new connection per request, {fb['chunks']}-chunk replies "
        f"({f'one per {pace} ms' if (pace := fb['pace_ms']) else 'unpaced'}), "
        f"medians of {fb['rounds']} rounds x {fb['requests_per_round']} requests per path "
        f"and lane; replies complete: {fb['complete']}"
    )
    for lane in LANES:
        r = fb[lane]
        a, ac = r["added_us"], r["added_first_chunk_us"]
        spread = ", ".join(f"{x:.2f}" for x in r["round_ratios"])
        print(
            f"  {lane.replace('_', ' ')}: direct {r['first_byte_us']['direct'] / 1000:.2f} ms; "
            f"added: passthrough {a['passthrough'] / 1000:.2f} ms, streamfix "
            f"{a['streamfix'] / 1000:.2f} ms = {r['ratio']:.2f}x (target <= 1.5; rounds "
            f"{spread}); to the first text chunk {ac['passthrough'] / 1000:.2f} vs "
            f"{ac['streamfix'] / 1000:.2f} ms ({r['ratio_first_chunk']:.2f}x)"
        )
    cpu = fb["proxy_cpu_us_per_request"]
    if "passthrough" in cpu and "streamfix" in cpu:
        print(
            f"  proxy CPU per request (both lanes): passthrough {cpu['passthrough']:.0f} µs, "
            f"streamfix {cpu['streamfix']:.0f} µs ({cpu['streamfix'] / cpu['passthrough']:.2f}x)"
        )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--chunks", type=int, default=400, help="chunks per stream in the throughput run"
    )
    p.add_argument(
        "--streams", type=int, default=32, help="concurrent streams in the throughput run"
    )
    p.add_argument("--latency-chunks", type=int, default=600, help="chunks per latency stream")
    p.add_argument(
        "--latency-streams", type=int, default=1, help="latency streams per path and round"
    )
    p.add_argument(
        "--rounds", type=int, default=15, help="rounds over the three paths (medians are kept)"
    )
    p.add_argument("--pace", type=float, default=1.0, help="ms between chunks in the latency run")
    p.add_argument(
        "--batch", type=int, default=1, help="chunks per upstream write (throughput run)"
    )
    p.add_argument(
        "--no-tools", action="store_true", help="requests without tools (the plain lane)"
    )
    p.add_argument(
        "--logprobs",
        action="store_true",
        help="throughput chunks carry a stamp and per-token logprobs (every chunk differs)",
    )
    p.add_argument(
        "--reasoning",
        action="store_true",
        help="the first half of every stream is reasoning_content (a thinking model)",
    )
    p.add_argument("--no-doors", action="store_true", help="skip /v1/messages and /v1/responses")
    p.add_argument(
        "--ui", action="store_true", help="streamfix with --ui (and a key), /ui read every second"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument(
        "--first-byte-only",
        action="store_true",
        help="only the time to first byte (new connection per request, with and without tools)",
    )
    p.add_argument("--first-byte-rounds", type=int, default=9, help="rounds of the first-byte run")
    p.add_argument(
        "--first-byte-pace",
        type=float,
        default=0.0,
        help="ms between the first-byte run's chunks (default: unpaced)",
    )
    p.add_argument(
        "--first-byte-requests",
        type=int,
        default=30,
        help="first-byte requests per path, lane and round",
    )
    p.add_argument(
        "--traces",
        action="store_true",
        help="also streamfix with --traces, exporting to a loopback OTLP receiver",
    )
    p.add_argument("--serve", choices=["upstream", "passthrough", "otlp"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--upstream", help=argparse.SUPPRESS)
    args = p.parse_args()
    global BATCH, LOGPROBS, REASONING
    BATCH = args.batch
    LOGPROBS = args.logprobs
    REASONING = args.reasoning
    if args.serve:
        _serve(args.serve, args.port, args.upstream)
        return 0

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ui_flags = ["--ui", "--api-key", "sk-bench-ui-key"] if args.ui else []
    if args.ui:
        UI_KEY["Authorization"] = "Bearer sk-bench-ui-key"
    ports = {k: free_port() for k in ("upstream", "passthrough", "streamfix")}
    up_url = f"http://127.0.0.1:{ports['upstream']}/v1"
    me = [sys.executable, str(Path(__file__).resolve())]

    # --ui with --traces: the traced streamfix has the page too, the other
    # neither (both on against both off, in the same rounds)
    both = args.ui and args.traces

    def streamfix_cmd(port: int, ui: bool = True) -> list[str]:
        return [
            *(sys.executable, "-m", "streamfix", "serve", "--upstream", up_url),
            *("--port", str(port), "--log-level", "error", "--probe-interval", "0"),
            *(ui_flags if ui else []),
        ]

    procs = [
        subprocess.Popen(
            [
                *me,
                "--serve",
                "upstream",
                "--port",
                str(ports["upstream"]),
                "--batch",
                str(args.batch),
            ],
            env=env,
        ),
        subprocess.Popen(
            [
                *me,
                "--serve",
                "passthrough",
                "--port",
                str(ports["passthrough"]),
                "--upstream",
                up_url,
            ],
            env=env,
        ),
        subprocess.Popen(streamfix_cmd(ports["streamfix"], ui=not both), env=env),
    ]
    paths = {
        "direct": up_url,
        "passthrough": f"http://127.0.0.1:{ports['passthrough']}/v1",
        "streamfix": f"http://127.0.0.1:{ports['streamfix']}/v1",
    }
    otlp = f"http://127.0.0.1:{free_port()}"
    if args.traces:  # the same streamfix with traces on, exporting to a loopback receiver
        traced = free_port()
        paths["traced"] = f"http://127.0.0.1:{traced}/v1"
        procs.append(
            subprocess.Popen(
                [*streamfix_cmd(traced), "--traces"],
                env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_SERVICE_NAME": "bench"},
            )
        )
        procs.append(
            subprocess.Popen([*me, "--serve", "otlp", "--port", otlp.rsplit(":", 1)[1]], env=env)
        )

    async def run() -> dict[str, Any]:
        deadline = time.monotonic() + 20
        for url in paths.values():
            await _wait(url, deadline)
        fb_args = (args.first_byte_rounds, args.first_byte_requests, args.first_byte_pace)
        pids = {"passthrough": procs[1].pid, "streamfix": procs[2].pid}
        if args.first_byte_only:
            return {"first_byte": await _measure_first_byte(paths, *fb_args, pids)}
        if args.traces:
            pids["traced"] = procs[3].pid
        root = paths["traced" if both else "streamfix"].removesuffix("/v1")
        watch = asyncio.create_task(_watch_ui(root)) if args.ui else None
        res = await asyncio.wait_for(_measure(paths, args, pids), 600)
        if watch is not None:
            if watch.done():
                watch.result()  # the page failed: say so
            watch.cancel()
        res["first_byte"] = await _measure_first_byte(paths, *fb_args, pids)
        res["chain"] = await _chain_time(f"http://127.0.0.1:{ports['streamfix']}/metrics")
        if args.traces:
            await asyncio.sleep(6)  # the batch processor's schedule (5 s): the last spans out
            async with aiohttp.ClientSession() as s, s.get(otlp + "/received") as r:
                res["otlp"] = await r.json()
        return res

    t0 = time.monotonic()
    try:
        results = asyncio.run(run())
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
    first_byte = results.pop("first_byte")
    if args.first_byte_only:
        first_byte["seconds"] = time.monotonic() - t0
        if args.json:
            print(json.dumps({"first_byte": first_byte}, indent=2))
        else:
            _print_first_byte(first_byte)
        return 0
    chain = results.pop("chain")
    otlp_got = results.pop("otlp", None)
    doors = {door: results.pop(door) for door in DOORS if door in results}
    d, pt, sf = results["direct"], results["passthrough"], results["streamfix"]
    chat_added = sf["alike_p50_us"] - d["alike_p50_us"]
    for r in doors.values():
        r["added_p50_us"] = r["alike_p50_us"] - d["alike_p50_us"]
        r["added_ratio"] = r["added_p50_us"] / chat_added if chat_added > 0 else float("nan")
        r["throughput_ratio"] = r["chunks_per_s"] / sf["chunks_per_s"]
    summary = {
        "added_p50_us": {
            "passthrough": pt["p50_us"] - d["p50_us"],
            "streamfix": sf["p50_us"] - d["p50_us"],
        },
        "added_p99_us": {
            "passthrough": pt["p99_us"] - d["p99_us"],
            "streamfix": sf["p99_us"] - d["p99_us"],
        },
        "latency_ratio_p50": sf["p50_us"] / pt["p50_us"],
        "latency_ratio_p99": sf["p99_us"] / pt["p99_us"],
        "alike_latency_ratio_p50": sf["alike_p50_us"] / pt["alike_p50_us"],
        "alike_latency_ratio_p99": sf["alike_p99_us"] / pt["alike_p99_us"],
        "steady_latency_ratio_p50": sf["steady_p50_us"] / pt["steady_p50_us"],
        "steady_latency_ratio_p99": sf["steady_p99_us"] / pt["steady_p99_us"],
        "throughput_ratio": sf["chunks_per_s"] / pt["chunks_per_s"],
        "cpu_ratio": (
            sf["proxy_cpu_us_per_chunk"] / pt["proxy_cpu_us_per_chunk"]
            if sf["proxy_cpu_us_per_chunk"] and pt["proxy_cpu_us_per_chunk"]
            else None
        ),
        "seconds": time.monotonic() - t0,
        "chain": chain,
        "first_byte": first_byte,
        "doors": doors,
        "doors_meet_target": all(
            r["added_ratio"] <= 1.3 and r["complete"] and not r["text_mismatches"]
            for r in doors.values()
        ),
    }
    tr = results.get("traced")
    if tr is not None:  # --traces: traced over untraced, same rounds
        summary["traces"] = {
            "added_p50_us": tr["p50_us"] - sf["p50_us"],
            "added_p99_us": tr["p99_us"] - sf["p99_us"],
            "latency_ratio_p50": tr["p50_us"] / sf["p50_us"],
            "alike_latency_ratio_p50": tr["alike_p50_us"] / sf["alike_p50_us"],
            "throughput_ratio": tr["chunks_per_s"] / sf["chunks_per_s"],
            "cpu_ratio": (
                tr["proxy_cpu_us_per_chunk"] / sf["proxy_cpu_us_per_chunk"]
                if tr["proxy_cpu_us_per_chunk"] and sf["proxy_cpu_us_per_chunk"]
                else None
            ),
            "received": otlp_got,
        }
    summary["meets_targets"] = (
        summary["latency_ratio_p50"] <= 1.1
        and summary["throughput_ratio"] >= 0.9
        and all(r["vendor_mismatches"] == 0 and r["complete"] for r in results.values())
    )
    if args.json:
        print(json.dumps({"paths": results, "summary": summary}, indent=2))
        return 0
    lane = "without tools" if args.no_tools else "with tools (whole chain)"
    kind = "stamped, with logprobs" if args.logprobs else "alike around the content"
    if args.reasoning:
        kind += "; the first half of each stream is reasoning_content"
    print(f"requests {lane}; upstream writes {args.batch} chunk(s) per write")
    print(f"throughput chunks: {kind}")
    print("latency columns: stamped chunks, each different around the content (logprobs)")
    head = f"{'path':<12} {'p50 µs':>9} {'p99 µs':>9} {'steady p50':>10} {'steady p99':>10}"
    tput = f"chunks/s @{args.streams}"
    print(f"{head} {'1st chunk µs':>12} {tput:>15} {'vendor ok':>12} {'text':>5}")
    for name, r in results.items():
        ok = f"{r['chunks_checked'] - r['vendor_mismatches']}/{r['chunks_checked']}"
        txt = "ok" if r["text_mismatches"] == 0 and r["complete"] else "BAD"
        row = f"{name:<12} {r['p50_us']:>9.0f} {r['p99_us']:>9.0f} {r['steady_p50_us']:>10.0f}"
        row += f" {r['steady_p99_us']:>10.0f} {r['first_chunk_us']:>12.0f}"
        print(f"{row} {r['chunks_per_s']:>15.0f} {ok:>12} {txt:>5}")
    a50, a99 = summary["added_p50_us"], summary["added_p99_us"]
    print(
        f"added over direct, p50/p99 µs: passthrough {a50['passthrough']:.0f}/"
        f"{a99['passthrough']:.0f}, streamfix {a50['streamfix']:.0f}/{a99['streamfix']:.0f}"
    )
    print(
        f"streamfix / passthrough: latency p50 {summary['latency_ratio_p50']:.2f}x "
        f"(target <= 1.1), p99 {summary['latency_ratio_p99']:.2f}x; "
        f"throughput {summary['throughput_ratio']:.2f}x (target >= 0.9)"
    )
    if summary["cpu_ratio"] is not None:
        print(
            f"proxy CPU per chunk at {args.streams} streams: passthrough "
            f"{pt['proxy_cpu_us_per_chunk']:.1f} µs, "
            f"streamfix {sf['proxy_cpu_us_per_chunk']:.1f} µs ({summary['cpu_ratio']:.2f}x)"
        )
    print(
        f"latency, chunks alike around the content, p50/p99 µs: direct "
        f"{d['alike_p50_us']:.0f}/{d['alike_p99_us']:.0f}, passthrough "
        f"{pt['alike_p50_us']:.0f}/{pt['alike_p99_us']:.0f}, streamfix "
        f"{sf['alike_p50_us']:.0f}/{sf['alike_p99_us']:.0f}; streamfix / passthrough "
        f"p50 {summary['alike_latency_ratio_p50']:.2f}x, "
        f"p99 {summary['alike_latency_ratio_p99']:.2f}x"
    )
    print(
        f"steady state (second half of each stream): latency p50 "
        f"{summary['steady_latency_ratio_p50']:.2f}x, "
        f"p99 {summary['steady_latency_ratio_p99']:.2f}x"
    )
    print(
        f"time inside the chain (SSESession.feed): {chain['mean_us_per_read']:.1f} µs per "
        f"upstream read, {chain['total_s']:.2f} s over {chain['reads']:.0f} reads"
    )
    for door, r in doors.items():
        txt = "ok" if r["text_mismatches"] == 0 and r["complete"] else "BAD"
        print(
            f"/v1/{door}: latency p50/p99 {r['alike_p50_us']:.0f}/{r['alike_p99_us']:.0f} µs, "
            f"adds {r['added_p50_us']:.0f} µs over direct ({r['added_ratio']:.2f}x the chat "
            f"path's {chat_added:.0f} µs; target <= 1.3); {r['chunks_per_s']:.0f} chunks/s "
            f"@{args.streams} ({r['throughput_ratio']:.2f}x the chat path's); text {txt}"
        )
    if doors:
        print(f"doors within 1.3x of the chat path's added latency: {summary['doors_meet_target']}")
    if "traces" in summary:
        t = summary["traces"]
        print(
            f"traces on / off: adds {t['added_p50_us']:.0f}/{t['added_p99_us']:.0f} µs p50/p99 "
            f"(latency p50 {t['latency_ratio_p50']:.2f}x, "
            f"alike {t['alike_latency_ratio_p50']:.2f}x), throughput "
            f"{t['throughput_ratio']:.2f}x; OTLP receiver got {t['received']}"
        )
    _print_first_byte(first_byte)
    print(f"targets met: {summary['meets_targets']}  ({summary['seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
