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
  ``--greedy`` clients asking (a is limited to 4 at once): the 4 admitted
  hold their slots with slow streams (30 chunks, 100 ms apart), the
  others are refused 429 and ask again after ``Retry-After`` as the SDKs
  do (capped at ``RETRY_CAP`` seconds). Alone and loaded take turns for
  ``--isolation-rounds`` rounds; reported: the median over the rounds of
  b's median loaded over b's median alone (target: at most 1.10), and
  the refusals seen.

Bounded: every request has a timeout (``REQUEST_TIMEOUT``) and the whole
run another (``--timeout``): it ends, or fails, never stalls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def upstream_app(pace: float, slow_pace: float = 0.1) -> web.Application:
    chunk = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}\n\n'
    )

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        wait = slow_pace if SLOW.encode() in body else pace
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(30):
            await resp.write(chunk)
            if wait:
                await asyncio.sleep(wait)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


#: The prompt that makes the upstream's stream slow (tenant a's).
SLOW = "take your time"
#: Seconds one request may take, whatever happens.
REQUEST_TIMEOUT = 30.0
#: The longest ``Retry-After`` a client waits (the SDKs cap theirs too).
RETRY_CAP = 2.0


async def ttfb(url: str, key: str = "") -> float:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as s:
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


async def run(rounds: int, shape: tuple[int, int]) -> dict[str, Any]:
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
        for port in ports:
            await asyncio.to_thread(ready, f"http://127.0.0.1:{port}/readyz")
        plain, shared, fair = (f"http://127.0.0.1:{port}" for port in ports)
        for _ in range(20):  # warm up
            await ttfb(plain)
            await ttfb(shared)
        without, with_state = [], []
        for _ in range(rounds):
            without.append(await ttfb(plain))
            with_state.append(await ttfb(shared))
        isolation = await isolation_rounds(fair, rounds // 2, shape)
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
        **isolation,
        "rounds": rounds,
    }


async def greedy(url: str, stop: asyncio.Event, seen: dict[str, int]) -> None:
    """One of tenant a's clients: a slow stream when admitted, else the
    wait ``Retry-After`` says (capped), again until ``stop``."""
    headers = {"Authorization": "Bearer sk-tenant-a"}
    body = {"model": "m", "messages": [{"role": "user", "content": SLOW}], "stream": True}
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        while not stop.is_set():
            try:
                async with s.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
                    await r.read()
                    if r.status == 200:
                        seen["served"] += 1
                        continue
                    seen["refused"] += 1
                    wait = min(RETRY_CAP, float(r.headers.get("Retry-After", "1")))
            except (aiohttp.ClientError, TimeoutError):
                seen["failed"] += 1
                wait = 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)


async def isolation_rounds(url: str, n: int, shape: tuple[int, int]) -> dict[str, Any]:
    """Tenant b alone and under tenant a's load, taking turns."""
    rounds, clients = shape
    med = statistics.median
    alone: list[float] = []
    loaded: list[float] = []
    ratios: list[float] = []
    seen = {"served": 0, "refused": 0, "failed": 0}
    for _ in range(rounds):
        quiet = [await ttfb(url, "sk-tenant-b") for _ in range(n)]
        stop = asyncio.Event()
        load = [asyncio.create_task(greedy(url, stop, seen)) for _ in range(clients)]
        await asyncio.sleep(0.5)  # a holds its 4 slots, the rest wait out their 429s
        busy = [await ttfb(url, "sk-tenant-b") for _ in range(n)]
        stop.set()
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
        alone += quiet
        loaded += busy
        ratios.append(med(busy) / med(quiet))
    return {
        "tenant_b_ttfb_ms_alone": round(med(alone) * 1e3, 3),
        "tenant_b_ttfb_ms_a_at_limit": round(med(loaded) * 1e3, 3),
        "tenant_b_ratio": round(med(ratios), 3),
        "tenant_b_ratio_per_round": [round(r, 3) for r in ratios],
        "tenant_a_clients": clients,
        "tenant_a_served": seen["served"],
        "tenant_a_refusals_seen": seen["refused"],
        "tenant_a_failed": seen["failed"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--isolation-rounds", type=int, default=5)
    parser.add_argument("--greedy", type=int, default=16, help="tenant a's clients")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--upstream-port", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.upstream_port:
        web.run_app(upstream_app(0.01), host="127.0.0.1", port=opts.upstream_port, print=None)
        return 0
    shape = (opts.isolation_rounds, opts.greedy)
    bounded = asyncio.wait_for(run(opts.rounds, shape), opts.timeout)
    for name, value in asyncio.run(bounded).items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
