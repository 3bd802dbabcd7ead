"""The benchmark a user runs: a real model server, direct and through streamfix.

    python -m bench                                   # starts the local SmolLM2 server
    python -m bench --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B

In one run, for the same prompts sent alternately direct and through
``streamfix serve`` (a separate process, as deployed):

- **time to first token** (request sent -> first chunk with content);
- **added latency per chunk** (p50, p99): a recording tap sits in front of
  the server on both paths and stamps each SSE event as it arrives from
  the server; the client stamps it again on arrival. Tap and client share
  one event loop and one clock, so ``client - tap`` is the time an event
  takes to reach the client: over one loopback hop directly, or through
  streamfix. The difference is what streamfix adds. Events are matched by
  their bytes, in order (streamfix forwards unchanged events as the
  upstream's own bytes);
- **chunks per second** per stream (bounded by the model's speed);
- **in-process chain cost per chunk**: the streams recorded by the tap are
  replayed through ``SSESession`` (the sans-I/O core the proxy runs), without
  and with ``tools`` in the request (the tool-aware transformers then run
  on every chunk), timing each ``feed``.

Prints a table, writes JSON (``bench/results/run-<time>.json``), and draws the
latency distributions (PNG) when matplotlib is installed. Bounded: a fixed
number of requests (``--requests``) and a wall-clock budget
(``--max-seconds``); everything listens on loopback only, and a non-loopback
``--base-url`` needs ``--allow-remote``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import ipaddress
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp import web

import streamfix
from streamfix.session import SSESession
from streamfix.sse import SSEDecoder
from streamfix.tools.local import LocalServer, LocalServerError, free_port

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Varied, short prompts; each is sent once direct and once through streamfix.
PROMPTS = [
    "Name three colours and say one thing about each.",
    "Explain in a few sentences why the sky is blue.",
    "Write a short poem about the sea.",
    "List five fruits and their colours.",
    "Describe a cat in four sentences.",
    "Give three tips for writing clear code.",
]
#: The tool offered when timing the chain with tools.
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
#: Replays of each recorded stream through the chain (the minimum per chunk
#: over replays is the least disturbed by the rest of the machine).
CHAIN_REPLAYS = 5
#: Largest SSE event the tap and the client accept.
MAX_EVENT = 4 * 1024 * 1024
HEADER = "X-Streamfix-Bench"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "mean": sum(values) / len(values) if values else None,
        "max": max(values) if values else None,
    }


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- the tap: stamps each event as it arrives from the server ---------------------


@dataclass
class Tapped:
    events: list[tuple[int, bytes]] = field(default_factory=list)  # (ns, raw event)


class Tap:
    """A relay in front of the server, in this process's event loop, that
    records (arrival time, raw bytes) of every SSE event of each chat reply,
    keyed by the ``X-Streamfix-Bench`` request header."""

    def __init__(self, target_base: str, session: aiohttp.ClientSession) -> None:
        parts = urlsplit(target_base)
        self.root = f"{parts.scheme}://{parts.netloc}"
        self.session = session
        self.tapped: dict[str, Tapped] = {}
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        skip = {"host", "content-length", "transfer-encoding", "connection"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        rec = self.tapped.setdefault(request.headers.get(HEADER, ""), Tapped())
        async with self.session.request(
            request.method, self.root + request.path_qs, data=body, headers=headers
        ) as up:
            resp = web.StreamResponse(status=up.status)
            resp.content_type = up.content_type
            await resp.prepare(request)
            decoder = SSEDecoder(MAX_EVENT)
            streamed = up.content_type == "text/event-stream"
            try:
                async for data in up.content.iter_any():
                    now = time.perf_counter_ns()
                    if streamed:
                        rec.events.extend((now, ev.raw) for ev in decoder.feed(data))
                    await resp.write(data)
                await resp.write_eof()
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                # streamfix closes its upstream request as soon as it has
                # [DONE] (or cut a loop), sometimes before the final chunk
                pass
            return resp


# -- the client ----------------------------------------------------------------


@dataclass
class Run:
    path: str  # "direct" or "streamfix"
    prompt: int
    ttft_ms: float | None = None
    chunks: int = 0
    chunks_per_s: float | None = None
    hop_ms: list[float] = field(default_factory=list)  # per matched event
    matched: int = 0
    error: str | None = None


def _has_output(data: bytes) -> bool:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    for ch in obj.get("choices") or []:
        d = ch.get("delta") or {}
        if d.get("content") or d.get("tool_calls") or d.get("reasoning_content"):
            return True
    return False


async def one_request(
    session: aiohttp.ClientSession,
    tap: Tap,
    base_url: str,
    body: dict[str, Any],
    tag: str,
    run: Run,
    headers: dict[str, str],
) -> None:
    decoder = SSEDecoder(MAX_EVENT)
    arrivals: list[tuple[int, bytes]] = []
    first_output: int | None = None
    t0 = time.perf_counter_ns()
    async with session.post(
        f"{base_url}/chat/completions", json=body, headers={**headers, HEADER: tag}
    ) as resp:
        if resp.status != 200:
            run.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
            return
        async for data in resp.content.iter_any():
            now = time.perf_counter_ns()
            for ev in decoder.feed(data):
                arrivals.append((now, ev.raw))
                if ev.data is None:
                    continue
                if ev.data.startswith(b'{"error"'):
                    run.error = ev.data.decode()[:200]
                if first_output is None and _has_output(ev.data):
                    first_output = now
    data_events = [(t, raw) for t, raw in arrivals if raw.startswith(b"data:")]
    run.chunks = len(data_events)
    if first_output is not None:
        run.ttft_ms = (first_output - t0) / 1e6
    if len(data_events) > 2:
        span = (data_events[-1][0] - data_events[0][0]) / 1e9
        run.chunks_per_s = (len(data_events) - 1) / span if span > 0 else None
    # match each event the client got to the same bytes at the tap, in order
    tapped = tap.tapped.get(tag, Tapped()).events
    j = 0
    for t_client, raw in data_events:
        k = j
        while k < len(tapped) and tapped[k][1] != raw:
            k += 1
        if k < len(tapped):
            run.hop_ms.append((t_client - tapped[k][0]) / 1e6)
            run.matched += 1
            j = k + 1


# -- the in-process chain cost ----------------------------------------------------


def chain_cost(streams: list[list[bytes]], with_tools: bool) -> list[float]:
    """Per-event ``SSESession.feed`` time in µs (the minimum over replays,
    event by event) over every recorded stream."""
    request: dict[str, Any] = {"model": "m", "messages": []}
    if with_tools:
        request["tools"] = [TOOL]
    out: list[float] = []
    perf = time.perf_counter_ns
    for events in streams:
        best = [float("inf")] * len(events)
        for _ in range(CHAIN_REPLAYS):
            s = SSESession(request)
            for i, raw in enumerate(events):
                t = perf()
                s.feed(raw)
                dt = perf() - t
                if dt < best[i]:
                    best[i] = dt
            s.close()
        out.extend(b / 1e3 for b in best)
    return out


# -- orchestration -------------------------------------------------------------


def start_proxy(upstream: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamfix",
            "serve",
            "--upstream",
            upstream,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdin=subprocess.DEVNULL,
    )


async def wait_ready(session: aiohttp.ClientSession, url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with session.get(url) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def pick_model(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str]) -> str:
    try:
        async with session.get(f"{base_url}/models", headers=headers) as r:
            data = await r.json(content_type=None)
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, KeyError, IndexError, TypeError, ValueError):
        return "default"


async def bench(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=args.read_timeout)
    began = time.monotonic()
    async with aiohttp.ClientSession(timeout=timeout) as session:
        model = args.model or await pick_model(session, base_url, headers)
        tap = Tap(base_url, session)
        runner = web.AppRunner(tap.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        tap_base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        proxy_port = free_port()
        proxy = start_proxy(tap_base, proxy_port)
        runs: list[Run] = []
        try:
            await wait_ready(session, f"http://127.0.0.1:{proxy_port}/healthz")
            proxy_base = f"http://127.0.0.1:{proxy_port}/v1"
            paths = {"direct": tap_base, "streamfix": proxy_base}
            log(f"model {model!r}; {args.requests} requests per path, max_tokens {args.max_tokens}")
            # warm-up: one request each way, not counted (model load, caches)
            for name, url in paths.items():
                warm = Run(name, -1)
                body = _body(model, PROMPTS[0], 8, args)
                await one_request(session, tap, url, body, f"warm-{name}", warm, headers)
                if warm.error:
                    raise RuntimeError(f"{name}: {warm.error}")
            total = 2 * args.requests
            for i in range(args.requests):
                prompt = i % len(PROMPTS)
                order = ["direct", "streamfix"] if i % 2 == 0 else ["streamfix", "direct"]
                for name in order:
                    if time.monotonic() - began > args.max_seconds:
                        log(f"time budget of {args.max_seconds:.0f} s reached; stopping")
                        break
                    run = Run(name, prompt)
                    body = _body(model, PROMPTS[prompt], args.max_tokens, args)
                    await one_request(session, tap, paths[name], body, f"{name}-{i}", run, headers)
                    runs.append(run)
                    ttft = f"{run.ttft_ms:.0f} ms" if run.ttft_ms is not None else "-"
                    log(
                        f"[{len(runs)}/{total}] {name:<9} {run.chunks:>4} chunks  "
                        f"ttft {ttft:>8}" + (f"  ERROR {run.error}" if run.error else "")
                    )
                else:
                    continue
                break
        finally:
            proxy.terminate()
            try:
                proxy.wait(10)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
            await runner.cleanup()
    streams = [
        [raw for _, raw in tap.tapped[f"streamfix-{i}"].events]
        for i in range(args.requests)
        if f"streamfix-{i}" in tap.tapped
    ]
    log("timing the chain in-process ...")
    cost_plain = chain_cost(streams, with_tools=False)
    cost_tools = chain_cost(streams, with_tools=True)
    return _results(args, base_url, model, runs, cost_plain, cost_tools, time.monotonic() - began)


def _body(model: str, prompt: str, max_tokens: int, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }


def _results(
    args: argparse.Namespace,
    base_url: str,
    model: str,
    runs: list[Run],
    cost_plain: list[float],
    cost_tools: list[float],
    seconds: float,
) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for name in ("direct", "streamfix"):
        rs = [r for r in runs if r.path == name and not r.error]
        hops = [h for r in rs for h in r.hop_ms]
        paths[name] = {
            "requests": len(rs),
            "errors": [r.error for r in runs if r.path == name and r.error],
            "ttft_ms": summary([r.ttft_ms for r in rs if r.ttft_ms is not None]),
            "chunk_latency_ms": summary(hops),
            "chunks_per_s": summary([r.chunks_per_s for r in rs if r.chunks_per_s]),
            "chunks": sum(r.chunks for r in rs),
            "matched_chunks": sum(r.matched for r in rs),
            "samples_ms": hops,
            "ttft_samples_ms": [r.ttft_ms for r in rs if r.ttft_ms is not None],
        }
    d, s = paths["direct"]["chunk_latency_ms"], paths["streamfix"]["chunk_latency_ms"]
    added = {
        k: (s[k] - d[k]) if s[k] is not None and d[k] is not None else None for k in ("p50", "p99")
    }
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "streamfix": streamfix.__version__,
        "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "base_url": base_url,
        "local_server": args.base_url is None,
        "model": model,
        "settings": {
            "requests": args.requests,
            "max_tokens": args.max_tokens,
            "server_threads": args.server_threads if args.base_url is None else None,
        },
        "seconds": round(seconds, 1),
        "paths": paths,
        "added_chunk_latency_ms": added,
        "chain_us_per_chunk": {"no_tools": summary(cost_plain), "tools": summary(cost_tools)},
    }


def _fmt(v: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def table(res: dict[str, Any]) -> str:
    d, s = res["paths"]["direct"], res["paths"]["streamfix"]
    rows = [
        ("", "direct", "streamfix", "added"),
        (
            "time to first token, p50",
            _fmt(d["ttft_ms"]["p50"], " ms", 1),
            _fmt(s["ttft_ms"]["p50"], " ms", 1),
            _fmt(_diff(s["ttft_ms"]["p50"], d["ttft_ms"]["p50"]), " ms", 1),
        ),
        (
            "latency per chunk, p50",
            _fmt(d["chunk_latency_ms"]["p50"], " ms", 3),
            _fmt(s["chunk_latency_ms"]["p50"], " ms", 3),
            _fmt(res["added_chunk_latency_ms"]["p50"], " ms", 3),
        ),
        (
            "latency per chunk, p99",
            _fmt(d["chunk_latency_ms"]["p99"], " ms", 3),
            _fmt(s["chunk_latency_ms"]["p99"], " ms", 3),
            _fmt(res["added_chunk_latency_ms"]["p99"], " ms", 3),
        ),
        (
            "chunks per second, mean",
            _fmt(d["chunks_per_s"]["mean"], "", 1),
            _fmt(s["chunks_per_s"]["mean"], "", 1),
            "",
        ),
        (
            "requests / chunks",
            f"{d['requests']} / {d['chunks']}",
            f"{s['requests']} / {s['chunks']}",
            "",
        ),
    ]
    c = res["chain_us_per_chunk"]
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"streamfix {res['streamfix']} - model {res['model']} at {res['base_url']}"
        f" ({res['machine']['cpus']} CPUs, {res['seconds']} s)",
        *(
            "  ".join(cell.ljust(w[i]) if i == 0 else cell.rjust(w[i]) for i, cell in enumerate(r))
            for r in rows
        ),
        "",
        "chain in-process, per chunk: "
        f"no tools p50 {_fmt(c['no_tools']['p50'], ' µs', 1)}, "
        f"p99 {_fmt(c['no_tools']['p99'], ' µs', 1)}; "
        f"with tools p50 {_fmt(c['tools']['p50'], ' µs', 1)}, "
        f"p99 {_fmt(c['tools']['p99'], ' µs', 1)}",
    ]
    return "\n".join(lines)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def plot(res: dict[str, Any], path: Path) -> bool:
    """Draw the per-chunk latency and TTFT distributions; False without matplotlib."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in ("direct", "streamfix"):
        samples = sorted(res["paths"][name]["samples_ms"])
        if samples:
            ys = [(i + 1) / len(samples) for i in range(len(samples))]
            ax1.step(samples, ys, where="post", label=name)
    ax1.set_xscale("log")
    ax1.set_xlabel("server → client, per chunk (ms, log)")
    ax1.set_ylabel("fraction of chunks")
    ax1.set_title("Latency per chunk (CDF)")
    ax1.legend()
    ax1.grid(True, alpha=0.3)
    data = [res["paths"][n]["ttft_samples_ms"] for n in ("direct", "streamfix")]
    # the table's median (nearest rank), not matplotlib's interpolated one:
    # the plot and the table must show the same number
    ax2.boxplot(data, tick_labels=["direct", "streamfix"], usermedians=[pct(d, 50) for d in data])
    ax2.set_ylabel("ms")
    ax2.set_title("Time to first token")
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"streamfix {res['streamfix']} - {res['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Time a chat server direct and through streamfix (see bench/README.md).",
    )
    p.add_argument(
        "--base-url",
        help="an OpenAI-compatible base URL ending in /v1 "
        "(default: start the local SmolLM2 server; needs streamfix[local])",
    )
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="sent as Bearer token (default: $OPENAI_API_KEY)",
    )
    p.add_argument("--requests", type=int, default=8, help="requests per path (default 8)")
    p.add_argument("--max-tokens", type=int, default=64, help="per request (default 64)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=180.0,
        help="stop sending requests after this long (default 180)",
    )
    p.add_argument("--read-timeout", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument(
        "--json",
        type=Path,
        help="where to write the results (default bench/results/run-<time>.json)",
    )
    p.add_argument("--png", type=Path, help="where to draw the plot (default next to the JSON)")
    p.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    p.add_argument(
        "--server-threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) - 1),
        help="threads of the local server (default: CPUs - 1, leaving one core for "
        "streamfix and this client, as when they share a host with the model server)",
    )
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a --base-url that is not on loopback"
    )
    args = p.parse_args(argv)
    if args.requests < 1 or args.max_tokens < 1:
        p.error("--requests and --max-tokens must be at least 1")
    if args.base_url and not is_loopback(args.base_url) and not args.allow_remote:
        p.error(
            "--base-url is not a loopback address; add --allow-remote to measure it anyway "
            "(network latency then dominates)"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    local: LocalServer | None = None
    try:
        if args.base_url is None:
            log("starting the local SmolLM2 server ...")
            try:
                local = LocalServer(n_threads=args.server_threads).start()
            except LocalServerError as exc:
                log(str(exc))
                return 2
            log(f"ready in {local.startup_seconds:.1f} s at {local.base_url}")
            base_url = local.base_url
        else:
            base_url = args.base_url.rstrip("/")
        res = asyncio.run(bench(args, base_url))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if local is not None:
            local.stop()
    print(table(res))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    json_path = args.json or RESULTS_DIR / f"run-{stamp}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(res, indent=1) + "\n")
    print(f"\nresults: {json_path}")
    if not args.no_plot:
        png = args.png or json_path.with_suffix(".png")
        if plot(res, png):
            print(f"plot:    {png}")
        else:
            print("plot:    skipped (pip install 'streamfix[bench]' to draw it)")
    errors = sum(len(res["paths"][n]["errors"]) for n in ("direct", "streamfix"))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
