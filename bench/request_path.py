"""One streamed chat request through the proxy, followed and profiled.

    python -m bench.request_path [--profile N] [--tools]

Starts, in this process on loopback, a scripted upstream and the proxy in
front of it, and sends one streamed chat request:

- **The path**: ``sys.setprofile`` notes every function call in
  ``streamfix/server/``; the files entered are printed in order, with
  repeats of the file just left folded. Following a request from the
  route to the upstream and back should enter each file once on the way
  out; on the way back, per read, the exchange and the caller's stream
  alternate.
- **Time to the first byte** (``--profile N``): N requests under
  ``cProfile``, stopping each at the first body byte the client reads;
  the functions where that time goes, by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

import streamfix.server
from streamfix.server import ServerConfig, create_app
from streamfix.server.config import UpstreamConfig

SERVER = Path(streamfix.server.__file__).resolve().parent

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]

WORDS = [
    "The",
    "order",
    "left",
    "the",
    "warehouse",
    "on",
    "Monday",
    "and",
    "should",
    "arrive",
    "within",
    "three",
    "days",
]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def _upstream(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_chunk({"role": "assistant", "content": ""}))
    for w in WORDS:
        await resp.write(_chunk({"content": w + " "}))
    await resp.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
    return resp


async def _start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1"


async def _first_byte(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(url + "/chat/completions", json=body) as r:
        await r.content.readany()


async def _whole(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(url + "/chat/completions", json=body) as r:
        await r.read()


def _path(calls: list[str]) -> list[str]:
    out: list[str] = []
    for f in calls:
        if not out or out[-1] != f:
            out.append(f)
    return out


async def main_async(args: argparse.Namespace) -> int:
    up_app = web.Application()
    up_app.router.add_post("/v1/chat/completions", _upstream)
    up_runner, up_url = await _start(up_app)
    app = create_app(ServerConfig(upstreams=[UpstreamConfig(url=up_url)], probe_interval=0))
    runner, url = await _start(app)
    body: dict[str, Any] = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "Where is my order?"}],
    }
    if args.tools:
        body["tools"] = TOOLS
    try:
        async with aiohttp.ClientSession() as session:
            await _whole(session, url, body)  # warm: imports, the matcher, the pool
            files: list[str] = []

            def note(frame: Any, event: str, arg: Any) -> None:
                if event == "call":
                    name = frame.f_code.co_filename
                    if name.startswith(str(SERVER)):
                        files.append(str(Path(name).relative_to(SERVER)))

            sys.setprofile(note)
            try:
                await _whole(session, url, body)
            finally:
                sys.setprofile(None)
            path = _path(files)
            if args.verbose:
                print("files of streamfix/server entered, in order (repeats folded):")
                for f in path:
                    print("  " + f)
            # The way out: from the route to the first read of the reply.
            ends = [i for i, f in enumerate(path) if f.endswith("body.py")]
            out = path[: ends[0]] if ends else path
            for name, part in (("to the upstream", out), ("whole request", path)):
                seen: set[str] = set()
                returns = 0
                for f in part:
                    returns += f in seen
                    seen.add(f)
                print(
                    f"{name}: {len(part)} stops in {len(seen)} files of streamfix/server, "
                    f"{returns} returns to a file already left"
                )
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.profile):
                    await _first_byte(session, url, body)
                prof.disable()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
                print(out.getvalue())
    finally:
        await runner.cleanup()
        await up_runner.cleanup()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=int, default=0, help="profile N requests to the first byte")
    p.add_argument("--tools", action="store_true", help="offer a tool (the whole chain runs)")
    p.add_argument("-v", "--verbose", action="store_true", help="print the files in order")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
