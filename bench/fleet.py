"""The fleet's costs: what ``--state`` adds to the time to first byte, and
whether one tenant at its ``max_concurrent`` slows another.

    python bench/fleet.py [--rounds 300]

Processes on loopback besides this client: a scripted upstream (30-chunk
streams, 10 ms apart; ``--upstream-port`` runs only that), a real ``redis-server``, and
``streamfix serve`` three times: without ``--state``, with it (both with
a tenant limit, so the store is asked on every request), and one with two
tenants (``a`` limited to 4 at once, ``b`` unlimited). Each request is on
a new client connection; the paths take turns request by request.

- **TTFB with the store**: the median over requests of the time from
  sending to the first body byte, through each of the first two proxies;
  reported: what ``--state`` adds (target: at most 1 ms at the median).
- **Tenant isolation**: tenant b's TTFB alone, then while tenant a keeps
  8 clients asking (4 served, the rest refused 429, asking again after
  Retry-After as the SDKs do);
  reported: b's median under a's load over b's alone (target: at most 1.10).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.fleet.fleet import binary, free_port, ready


def upstream_app(pace: float) -> web.Application:
    chunk = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}\n\n'
    )

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(30):
            await resp.write(chunk)
            if pace:
                await asyncio.sleep(pace)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def ttfb(url: str, key: str = "") -> float:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as s:
        t0 = time.perf_counter()
        async with s.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            await r.content.readany()
            took = time.perf_counter() - t0
            if r.status != 200:
                return float("nan")
            await r.read()
            return took


def serve(port: int, upstream: str, *args: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "streamfix", "serve", "--port", str(port), "--upstream"]
    cmd += [upstream, "--probe-interval", "0", "--log-level", "error", *args]
    return subprocess.Popen(cmd)


async def run(rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="streamfix-bench-fleet-"))
    up_port, redis_port = free_port(), free_port()
    procs = [
        subprocess.Popen([sys.executable, __file__, "--upstream-port", str(up_port)]),
        subprocess.Popen(
            [binary("redis-server"), "--port", str(redis_port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        ),
    ]
    upstream = f"http://127.0.0.1:{up_port}/v1"
    limits = tmp / "limits.toml"
    limits.write_text("[limits]\nrpm = 1000000\n")
    tenants = tmp / "tenants.toml"
    tenants.write_text(
        '[[tenant]]\nname = "a"\napi_key = "sk-tenant-a"\nmodels = ["*"]\nmax_concurrent = 4\n'
        '[[tenant]]\nname = "b"\napi_key = "sk-tenant-b"\nmodels = ["*"]\n'
    )
    ports = [free_port() for _ in range(3)]
    state = f"redis://127.0.0.1:{redis_port}/0"
    procs += [
        serve(ports[0], upstream, "--config", str(limits)),
        serve(ports[1], upstream, "--config", str(limits), "--state", state),
        serve(ports[2], upstream, "--config", str(tenants), "--state", state),
    ]
    try:
        for p in ports:
            await asyncio.to_thread(ready, f"http://127.0.0.1:{p}/readyz")
        plain, shared, fair = (f"http://127.0.0.1:{p}" for p in ports)
        for _ in range(20):  # warm up
            await ttfb(plain)
            await ttfb(shared)
        without, with_state = [], []
        for _ in range(rounds):
            without.append(await ttfb(plain))
            with_state.append(await ttfb(shared))
        alone = [await ttfb(fair, "sk-tenant-b") for _ in range(rounds // 2)]
        stop = asyncio.Event()
        refused = 0

        async def greedy() -> None:
            nonlocal refused
            while not stop.is_set():
                if math.isnan(await ttfb(fair, "sk-tenant-a")):  # a 429
                    refused += 1
                    await asyncio.sleep(1.0)  # Retry-After, as the SDKs honour it

        load = [asyncio.create_task(greedy()) for _ in range(8)]
        await asyncio.sleep(0.5)
        loaded = [await ttfb(fair, "sk-tenant-b") for _ in range(rounds // 2)]
        stop.set()
        await asyncio.gather(*load)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    med = statistics.median
    return {
        "ttfb_ms_without_state": round(med(without) * 1e3, 3),
        "ttfb_ms_with_state": round(med(with_state) * 1e3, 3),
        "state_adds_ms": round((med(with_state) - med(without)) * 1e3, 3),
        "tenant_b_ttfb_ms_alone": round(med(alone) * 1e3, 3),
        "tenant_b_ttfb_ms_a_at_limit": round(med(loaded) * 1e3, 3),
        "tenant_b_ratio": round(med(loaded) / med(alone), 3),
        "tenant_a_refusals_seen": refused,
        "rounds": rounds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--upstream-port", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.upstream_port:
        web.run_app(upstream_app(0.01), host="127.0.0.1", port=opts.upstream_port, print=None)
        return 0
    for name, value in asyncio.run(run(opts.rounds)).items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
