"""Load and soak test of ``streamfix serve``, loopback only, bounded.

    .venv/bin/python bench/load.py            # full: 500 concurrent + 20,000 soak (~1-3 min)
    .venv/bin/python bench/load.py --quick    # smoke: 50 concurrent + 1,000 soak (~10 s)
    .venv/bin/python bench/load.py --json     # the figures as JSON

Three processes: a fast scripted upstream (``--serve-upstream``, this
file), the proxy as ``python -m streamfix serve`` (a separate process, so
its resident memory is read from ``/proc/PID/status``), and this client.
Every request offers tools, so every chunk goes through the whole chain;
one request in four carries a tool call written as text (split over
chunks) that must come out as a structured call.

Phases:

1. **Direct baseline**: requests straight to the upstream, same shape and
   concurrency as the soak, for the latency the proxy adds.
2. **Concurrent**: ``--concurrent`` streams open at once (each one paced,
   so they overlap); resident memory sampled while all are open gives the
   memory per open stream.
3. **Soak**: ``--soak`` requests, ``--soak-concurrency`` at a time, RSS
   sampled every 10 %; the end RSS against the RSS a quarter in shows
   whether memory grows with requests served.

Reported: requests, errors (any non-200, missing ``[DONE]``, wrong
content, missing call, exception; expected 0), p50/p99 time to first byte
and total time, direct and through the proxy, and the difference (the
latency the proxy adds, including its share of two shared cores), RSS at
start / peak (VmHWM) / end, memory per open stream. Bounded in count and
time: every phase has a deadline and the whole run a hard limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from streamfix.tools.local import free_port

ROOT = Path(__file__).resolve().parents[1]

#: Hard limit on the whole run (seconds): the bench stops itself.
RUN_LIMIT = 300.0

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]

WORDS = ["the", "order", "shipped", "on", "Monday", "and", "should", "arrive", "by", "Friday"]
CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-%d"}}</tool_call>'


# -- the upstream (its own process) ---------------------------------------------


def _chunk(content: str | None, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    obj = {
        "id": "chatcmpl-load",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "load",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def pieces_for(seq: int, chunks: int, call: bool) -> list[str]:
    """The content pieces of reply ``seq`` (distinct text: no loop to cut)."""
    out = [f"{WORDS[(seq + i) % len(WORDS)]}{i} " for i in range(chunks)]
    if call:
        text = CALL % seq
        out += [text[i : i + 9] for i in range(0, len(text), 9)]
    return out


async def _upstream(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    seq, chunks = int(body["x_seq"]), int(body["x_chunks"])
    delay = float(body.get("x_delay_ms", 0)) / 1000
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_chunk("", role=True))
    for p in pieces_for(seq, chunks, bool(body.get("x_call"))):
        if delay:
            await asyncio.sleep(delay)
        await resp.write(_chunk(p))
    await resp.write(_chunk(None, "stop") + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": []})


def serve_upstream(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _upstream)
    app.router.add_get("/v1/models", _models)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=2048)


# -- processes ------------------------------------------------------------------


def rss(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of ``pid``, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


async def wait_ready(url: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    async with aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


# -- the client -----------------------------------------------------------------


@dataclass
class Phase:
    name: str
    ttfb: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    n: int = 0
    seconds: float = 0.0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


def check_reply(data: bytes, seq: int, chunks: int, call: bool, repaired: bool) -> str | None:
    """None if ``data`` is the expected stream (repaired, through the proxy:
    the text call became a structured one), else the error kind."""
    if not data.endswith(b"data: [DONE]\n\n"):
        return "no_done"
    if b'"error"' in data:
        return "error_event"
    if not repaired:
        return None
    content = ""
    calls: list[dict[str, Any]] = []
    for block in data.split(b"\n\n"):
        if not block.startswith(b"data: {"):
            continue
        obj = orjson.loads(block[6:])
        for ch in obj.get("choices") or ():
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            calls += d.get("tool_calls") or ()
    want = "".join(pieces_for(seq, chunks, False))
    if call:
        if len(calls) != 1 or calls[0]["function"]["name"] != "lookup_order":
            return "missing_call"
        args = orjson.loads(calls[0]["function"]["arguments"])
        if args != {"order_id": f"A-{seq}"}:
            return "wrong_call"
        content = content.rstrip()
        want = want.rstrip()
    if content != want:
        return "wrong_content"
    return None


async def one(
    s: aiohttp.ClientSession, url: str, seq: int, chunks: int, delay_ms: float, phase: Phase
) -> None:
    repaired = phase.name != "direct" and not phase.name.startswith("direct")
    call = seq % 4 == 0
    body = {
        "model": "load",
        "stream": True,
        "messages": [{"role": "user", "content": f"request {seq}"}],
        "tools": TOOLS,
        "x_seq": seq,
        "x_chunks": chunks,
        "x_delay_ms": delay_ms,
        "x_call": call,
    }
    t0 = time.perf_counter()
    first: float | None = None
    parts: list[bytes] = []
    try:
        async with s.post(url + "/chat/completions", data=orjson.dumps(body)) as r:
            if r.status != 200:
                phase.error(f"http_{r.status}")
                await r.read()
                return
            async for part in r.content.iter_any():
                if first is None:
                    first = time.perf_counter()
                parts.append(part)
    except (aiohttp.ClientError, TimeoutError) as exc:
        phase.error(type(exc).__name__)
        return
    end = time.perf_counter()
    kind = check_reply(b"".join(parts), seq, chunks, call, repaired)
    if kind is not None:
        phase.error(kind)
        return
    phase.ttfb.append((first or end) - t0)
    phase.total.append(end - t0)


async def run_phase(
    name: str,
    url: str,
    count: int,
    concurrency: int,
    chunks: int,
    delay_ms: float,
    limit: float,
    on_progress: Any = None,
) -> Phase:
    phase = Phase(name)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    next_seq = 0
    deadline = time.monotonic() + limit
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as s:

        async def worker() -> None:
            nonlocal next_seq
            while next_seq < count and time.monotonic() < deadline:
                seq = next_seq
                next_seq += 1
                await one(s, url, seq, chunks, delay_ms, phase)
                phase.n += 1
                if on_progress is not None:
                    on_progress(phase.n)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    phase.seconds = time.perf_counter() - t0
    if phase.n < count:
        phase.error("not_run_deadline")
    return phase


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, int(q * len(vs)))]


def ms(x: float) -> float:
    return round(x * 1000, 2)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    up_port, px_port = free_port(), free_port()
    up_url = f"http://127.0.0.1:{up_port}/v1"
    px_url = f"http://127.0.0.1:{px_port}/v1"
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--serve-upstream", str(up_port)],
                env=env,
                stdout=subprocess.DEVNULL,
            )
        )
        await wait_ready(up_url + "/models")
        pool = max(args.concurrent, args.soak_concurrency) + 64
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamfix",
                "serve",
                "--upstream",
                up_url,
                "--port",
                str(px_port),
                "--log-level",
                "warning",
                "--pool-limit",
                str(pool),
                "--probe-interval",
                "0",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proxy)
        await wait_ready(f"http://127.0.0.1:{px_port}/healthz")
        # warm-up (imports, caches, connection pools) before the start figure
        await run_phase("warmup", px_url, 50, 10, args.chunks, 0, 30)
        mem: dict[str, Any] = {"start_kib": rss(proxy.pid)["VmRSS"]}

        # 1. latency one request at a time (direct, proxy), then the direct
        # baseline at the soak's concurrency
        serial_direct = await run_phase("direct_serial", up_url, args.serial, 1, args.chunks, 0, 60)
        serial_proxy = await run_phase("proxy_serial", px_url, args.serial, 1, args.chunks, 0, 60)
        direct = await run_phase(
            "direct", up_url, args.direct, args.soak_concurrency, args.chunks, 0, 60
        )

        # 2. concurrent streams, all open at once (paced so they overlap)
        sampled: list[int] = []
        idle = rss(proxy.pid)["VmRSS"]

        async def sampler() -> None:
            while True:
                await asyncio.sleep(0.1)
                sampled.append(rss(proxy.pid)["VmRSS"])

        task = asyncio.create_task(sampler())
        conc = await run_phase(
            "concurrent",
            px_url,
            args.concurrent,
            args.concurrent,
            args.chunks,
            args.pace_ms,
            90,
        )
        task.cancel()
        mem["idle_before_concurrent_kib"] = idle
        mem["during_concurrent_max_kib"] = max(sampled) if sampled else None
        if sampled:
            mem["per_open_stream_kib"] = round((max(sampled) - idle) / args.concurrent, 1)

        # 3. soak
        soak_rss: list[tuple[int, int]] = []
        step = max(1, args.soak // 10)

        def progress(n: int) -> None:
            if n % step == 0:
                soak_rss.append((n, rss(proxy.pid)["VmRSS"]))

        soak_rss.append((0, rss(proxy.pid)["VmRSS"]))
        soak = await run_phase(
            "soak",
            px_url,
            args.soak,
            args.soak_concurrency,
            args.chunks,
            0,
            RUN_LIMIT - 60,
            progress,
        )
        await asyncio.sleep(1.0)  # let the last connections close
        end = rss(proxy.pid)
        mem["soak_samples_kib"] = soak_rss
        mem["end_kib"] = end["VmRSS"]
        mem["peak_kib"] = end["VmHWM"]
        quarter = next((r for n, r in soak_rss if n >= args.soak // 4), soak_rss[0][1])
        mem["growth_last_three_quarters_kib"] = end["VmRSS"] - quarter
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in reversed(procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def figures(ph: Phase) -> dict[str, Any]:
        return {
            "requests": ph.n,
            "errors": sum(ph.errors.values()),
            "error_kinds": ph.errors,
            "seconds": round(ph.seconds, 2),
            "req_per_s": round(ph.n / ph.seconds, 1) if ph.seconds else None,
            "ttfb_p50_ms": ms(pct(ph.ttfb, 0.5)),
            "ttfb_p99_ms": ms(pct(ph.ttfb, 0.99)),
            "total_p50_ms": ms(pct(ph.total, 0.5)),
            "total_p99_ms": ms(pct(ph.total, 0.99)),
        }

    out = {
        "settings": {
            "concurrent": args.concurrent,
            "soak": args.soak,
            "soak_concurrency": args.soak_concurrency,
            "chunks_per_reply": args.chunks,
            "pace_ms_concurrent": args.pace_ms,
            "cpus": os.cpu_count(),
        },
        "direct_serial": figures(serial_direct),
        "proxy_serial": figures(serial_proxy),
        "direct": figures(direct),
        "concurrent": figures(conc),
        "soak": figures(soak),
        "added_serial_ms": {
            "total_p50": ms(pct(serial_proxy.total, 0.5) - pct(serial_direct.total, 0.5)),
            "total_p99": ms(pct(serial_proxy.total, 0.99) - pct(serial_direct.total, 0.99)),
        },
        "added_ms": {
            "ttfb_p50": ms(pct(soak.ttfb, 0.5) - pct(direct.ttfb, 0.5)),
            "ttfb_p99": ms(pct(soak.ttfb, 0.99) - pct(direct.ttfb, 0.99)),
            "total_p50": ms(pct(soak.total, 0.5) - pct(direct.total, 0.5)),
            "total_p99": ms(pct(soak.total, 0.99) - pct(direct.total, 0.99)),
        },
        "memory": mem,
    }
    out["errors_total"] = sum(out[k]["errors"] for k in PHASES)
    return out


PHASES = ("direct_serial", "proxy_serial", "direct", "concurrent", "soak")


def report(r: dict[str, Any]) -> str:
    s = r["settings"]
    m = r["memory"]
    lines = [
        f"streamfix load test: {s['concurrent']} concurrent streams, soak of {s['soak']} requests "
        f"({s['soak_concurrency']} at a time), {s['chunks_per_reply']} content chunks per reply, "
        f"tools offered, 1 in 4 replies with a text tool call; {s['cpus']} CPUs",
        "",
        f"{'phase':<14}{'requests':>9}{'errors':>8}{'req/s':>8}"
        f"{'ttfb p50':>10}{'ttfb p99':>10}{'total p50':>11}{'total p99':>11}  (ms)",
    ]
    for k in PHASES:
        f = r[k]
        lines.append(
            f"{k:<14}{f['requests']:>9}{f['errors']:>8}{f['req_per_s'] or 0:>8}"
            f"{f['ttfb_p50_ms']:>10}{f['ttfb_p99_ms']:>10}{f['total_p50_ms']:>11}"
            f"{f['total_p99_ms']:>11}"
        )
        if f["error_kinds"]:
            lines.append(f"{'':<14}error kinds: {f['error_kinds']}")
    a = r["added_ms"]
    b = r["added_serial_ms"]
    lines += [
        "",
        f"added by the proxy, one request at a time: whole reply p50 {b['total_p50']} ms, "
        f"p99 {b['total_p99']} ms",
        f"added under load ({s['soak_concurrency']} at a time, soak vs direct): "
        f"time to first byte p50 {a['ttfb_p50']} ms, "
        f"p99 {a['ttfb_p99']} ms; whole reply p50 {a['total_p50']} ms, p99 {a['total_p99']} ms",
        f"errors: {r['errors_total']}",
        "",
        f"proxy RSS: start {m['start_kib'] / 1024:.1f} MiB, peak {m['peak_kib'] / 1024:.1f} MiB, "
        f"end {m['end_kib'] / 1024:.1f} MiB; with {s['concurrent']} streams open "
        f"{(m['during_concurrent_max_kib'] or 0) / 1024:.1f} MiB "
        f"(~{m.get('per_open_stream_kib', '?')} KiB per open stream)",
        "soak RSS (requests done: MiB): "
        + ", ".join(f"{n}: {kib / 1024:.1f}" for n, kib in m["soak_samples_kib"]),
        f"growth over the last three quarters of the soak: "
        f"{m['growth_last_three_quarters_kib'] / 1024:+.1f} MiB",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="smoke run: 50 concurrent, 1,000 soak")
    p.add_argument("--concurrent", type=int, default=500, help="streams open at once (500)")
    p.add_argument("--soak", type=int, default=20_000, help="soak requests (20,000)")
    p.add_argument("--soak-concurrency", type=int, default=32, help="soak streams at once (32)")
    p.add_argument("--serial", type=int, default=300, help="requests one at a time (300)")
    p.add_argument("--direct", type=int, default=3000, help="baseline requests direct (3,000)")
    p.add_argument("--chunks", type=int, default=12, help="content chunks per reply (12)")
    p.add_argument(
        "--pace-ms", type=float, default=50, help="ms between chunks, concurrent phase (50)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    if args.quick:
        args.concurrent, args.soak, args.direct, args.serial = 50, 1000, 300, 100
    result = asyncio.run(asyncio.wait_for(main_async(args), RUN_LIMIT))
    print(
        orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() if args.json else report(result)
    )
    return 0 if result["errors_total"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
