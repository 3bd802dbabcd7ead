"""What hostile clients and a hostile model cost an ordinary client (issue 37).

    python -m bench.hostile [--requests N] [--hostile K] [--only KIND ...]

Starts ``streamfix serve`` as its own process (``--narrow-tools auto``, an
upstream key configured so that redaction is on) in front of a scripted
upstream in this process, and measures an ordinary client's time to first
byte (a streamed chat request, a new connection each, sent one after the
other): ``--requests`` of them alone, then as many while ``--hostile``
clients of each kind send, back to back:

- a ``response_format`` schema whose ``pattern`` is ``^(a+)+$``, answered
  with 25 ``a`` and a ``!`` (seconds of backtracking in Python's ``re``);
- a schema with a ``$ref`` to an address on loopback (a 400, never fetched);
- a reply nested 3,000 levels deep (call arguments, streamed);
- 500 tools never seen before (a new set each request, so nothing is cached).

Prints the two medians and their difference (the target: under 100 ms at
the median), and how many hostile requests were answered and how. The
hostile bodies are encoded before the clock starts: the client's own JSON
work is not the proxy's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import string
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-bench-hostile-key-0123456789"
MESSAGES = [{"role": "user", "content": "Say hello."}]
EVIL = "^(a+)+$"
DEEP = 3000


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


ORDINARY = b"".join(
    [
        _event({"role": "assistant"}),
        *(_event({"content": w}) for w in ("Hello ", "there")),
        _event({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)
DEEP_ARGS = '{"a": ' + "[" * DEEP + "]" * DEEP + "}"
DEEP_CALL = b"".join(
    [
        _event({"role": "assistant"}),
        _event(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}
                ]
            }
        ),
        _event({"tool_calls": [{"index": 0, "function": {"arguments": DEEP_ARGS}}]}),
        _event({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
)


async def upstream(request: web.Request) -> web.StreamResponse:
    """The scripted model: an evil string for the pattern, a deep call for
    the deep request, a short greeting otherwise."""
    body = orjson.loads(await request.read())
    if "response_format" in body:
        content = orjson.dumps({"a": "a" * 25 + "!"}).decode()
        data = b"".join([_event({"role": "assistant"}), _event({"content": content})])
        data += _event({}, "stop") + b"data: [DONE]\n\n"
    elif body.get("tools") and body["tools"][0]["function"]["name"] == "f":
        data = DEEP_CALL
    else:
        data = ORDINARY
    if not body.get("stream"):
        return web.json_response({"error": {"message": "stream only"}}, status=400)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(data)
    await resp.write_eof()
    return resp


def _tools(seed: int, n: int = 500) -> list[dict[str, Any]]:
    rnd = random.Random(seed)

    def word() -> str:
        return "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(4, 9)))

    def text(k: int) -> str:
        return " ".join(word() for _ in range(k))

    return [
        {
            "type": "function",
            "function": {
                "name": f"t{seed}_{i}_{word()}",
                "description": text(30),
                "parameters": {
                    "type": "object",
                    "properties": {word(): {"type": "string", "description": text(12)}},
                },
            },
        }
        for i in range(n)
    ]


def hostile_bodies(port: int, sets: int) -> dict[str, list[bytes]]:
    def fmt(schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}

    base = {"model": "m", "messages": MESSAGES, "stream": True}
    pattern = {"type": "object", "properties": {"a": {"type": "string", "pattern": EVIL}}}
    ref = {"type": "object", "properties": {"a": {"$ref": f"http://127.0.0.1:{port}/admin"}}}
    deep_tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    return {
        "pattern": [orjson.dumps({**base, "response_format": fmt(pattern)})],
        "ref": [orjson.dumps({**base, "response_format": fmt(ref)})],
        "deep": [orjson.dumps({**base, "tools": deep_tools})],
        "tools": [
            orjson.dumps(
                {**base, "messages": [{"role": "user", "content": "x"}], "tools": _tools(s)}
            )
            for s in range(sets)
        ],
    }


async def first_byte(url: str, body: bytes) -> float:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        t = time.perf_counter()
        async with s.post(url, data=body, headers=headers) as r:
            await r.content.readany()
            took = time.perf_counter() - t
            await r.read()
    return took


async def ordinary(url: str, n: int) -> list[float]:
    body = orjson.dumps({"model": "m", "messages": MESSAGES, "stream": True})
    return [await first_byte(url, body) for _ in range(n)]


def _answer(status: int, raw: bytes) -> str:
    """How a hostile request was answered, in a few words."""
    if status != 200:
        return f"HTTP {status}"
    if b'data: {"error"' in raw:
        return "an error event"
    if b'"json":"invalid"' in raw:
        return "200 with the invalid note"
    return "200"


async def hostile(url: str, bodies: list[bytes], stop: asyncio.Event, seen: Counter[str]) -> None:
    i = 0
    async with aiohttp.ClientSession() as s:
        while not stop.is_set():
            data = bodies[i % len(bodies)]
            i += 1
            try:
                async with s.post(
                    url, data=data, headers={"Content-Type": "application/json"}
                ) as r:
                    raw = await r.read()
                    seen[_answer(r.status, raw)] += 1
            except aiohttp.ClientError as exc:
                seen[type(exc).__name__] += 1


async def main(args: argparse.Namespace) -> dict[str, Any]:
    hits: list[str] = []

    async def internal(request: web.Request) -> web.Response:
        hits.append(request.path_qs)
        return web.json_response({"type": "object"})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", upstream)
    app.router.add_route("*", "/admin", internal)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up_port = runner.addresses[0][1]
    from streamfix.tools.local import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "streamfix", "serve"),
            *("--upstream", f"http://127.0.0.1:{up_port}/v1#api_key={KEY}"),
            *("--port", str(port), "--narrow-tools", "auto"),
            *("--log-level", "error", "--probe-interval", "0"),
        ],
        env=env,
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await first_byte(url, orjson.dumps({"model": "m", "messages": MESSAGES}))
                break
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        bodies = hostile_bodies(up_port, sets=max(8, args.requests))
        await ordinary(url, 5)  # warm
        alone = await ordinary(url, args.requests)
        stop = asyncio.Event()
        seen: dict[str, Counter[str]] = {k: Counter() for k in bodies}
        kinds = [k for k in bodies if not args.only or k in args.only]
        tasks = [
            asyncio.create_task(hostile(url, bodies[k], stop, seen[k]))
            for k in kinds
            for _ in range(args.hostile)
        ]
        await asyncio.sleep(1.0)  # the hostile clients under way
        loaded = await ordinary(url, args.requests)
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        proc.terminate()
        proc.wait(10)
        await runner.cleanup()
    return {
        "alone_ms": 1000 * statistics.median(alone),
        "loaded_ms": 1000 * statistics.median(loaded),
        "alone_p90_ms": 1000 * statistics.quantiles(alone, n=10)[-1],
        "loaded_p90_ms": 1000 * statistics.quantiles(loaded, n=10)[-1],
        "hostile": {k: dict(v) for k, v in seen.items() if v},
        "fetched": len(hits),
    }


def cli() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=40, help="ordinary requests per phase")
    p.add_argument("--hostile", type=int, default=1, help="clients of each hostile kind")
    p.add_argument(
        "--only", nargs="*", choices=["pattern", "ref", "deep", "tools"], help="these kinds only"
    )
    args = p.parse_args()
    res = asyncio.run(main(args))
    added = res["loaded_ms"] - res["alone_ms"]
    print(f"ordinary TTFB alone:   median {res['alone_ms']:.1f} ms, p90 {res['alone_p90_ms']:.1f}")
    print(
        f"with hostile clients:  median {res['loaded_ms']:.1f} ms, p90 {res['loaded_p90_ms']:.1f}"
    )
    print(f"added at the median:   {added:.1f} ms (target: under 100 ms)")
    for kind, answers in res["hostile"].items():
        print(f"  {kind:8} {answers}")
    print(f"schema $refs fetched: {res['fetched']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
