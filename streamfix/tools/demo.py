"""``streamfix demo``: a misbehaving upstream, side by side with streamfix.

Starts, in this process and on loopback only, a scripted upstream that
replays small-model failures (one scenario per ``model`` name), the proxy
in front of it, and a client that asks each scenario twice: directly and
through the proxy. It prints what the client assembles each way (the
OpenAI SDK's merge rules: strings of a tool-call delta are concatenated by
``index``). No model, no network, a second or two.

The scenarios are scripted from real captures (``llama-cpp-python`` with
SmolLM2, see ``tests/captures``) and from shapes reported by users; what
the right-hand column shows is whatever the chain in this install does.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
from aiohttp import web

from ..seen import TOOLS, Seen, assemble, describe
from ..session import chunk_event


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return chunk_event(delta, finish, "demo")


def _text(pieces: list[str], finish: str = "stop") -> list[bytes]:
    out = [_chunk({"role": "assistant", "content": ""})]
    out += [_chunk({"content": p}) for p in pieces]
    out.append(_chunk({}, finish))
    out.append(b"data: [DONE]\n\n")
    return out


def _repeated_name_call() -> list[bytes]:
    # llama.cpp (capture b2): every delta repeats id, type and name
    out = [_chunk({"role": "assistant", "content": None})]
    for frag in ['{ "city"', ': "Par', 'is" }']:
        call = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": frag},
        }
        out.append(_chunk({"tool_calls": [call]}))
    out.append(_chunk({}, "tool_calls"))
    out.append(b"data: [DONE]\n\n")
    return out


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    parts: list[bytes]
    tools: bool = True
    request: dict[str, Any] = field(default_factory=dict)


SCENARIOS = [
    Scenario(
        "text-call",
        "A tool call written as text (Hermes/Qwen <tool_call> tags, split mid-tag)",
        _text(
            [
                "<",
                "tool",
                "_",
                "call",
                ">\n",
                '{"name": "get_weather", ',
                '"arguments": {"city": ',
                '"Paris"}}',
                "\n</",
                "tool_call",
                ">",
            ]
        ),
    ),
    Scenario(
        "repeated-name",
        "Tool-call deltas that repeat id and name in every chunk (llama.cpp)",
        _repeated_name_call(),
    ),
    Scenario(
        "loop",
        "A repetition loop (SmolLM2 at temperature 0: 'the cat sat on the mat')",
        _text(["Here is the poem:\n"] + ["the cat sat on the mat.\n"] * 80, "length"),
        tools=False,
    ),
    Scenario(
        "think",
        "Reasoning written into content (<think>…</think>, no reasoning parser on the server)",
        _text(
            [
                "<think>",
                "The user wants the",
                " weather; I should",
                " call the tool.",
                "</think>",
                "\n\n",
                "<tool_call>",
                '{"name": "get_weather", "arguments": {"city": "Paris"}}',
                "</tool_call>",
            ]
        ),
    ),
    Scenario(
        "markup",
        "Leftover template markup after the answer",
        _text(["It is sunny", " in Paris.", "</tool_call>", "<|im_end|>"]),
    ),
]


# -- the scripted upstream ---------------------------------------------------


async def _upstream(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    scenario = next((s for s in SCENARIOS if s.key == body.get("model")), None)
    if scenario is None:
        return web.json_response({"error": {"message": "unknown scenario"}}, status=404)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        for part in scenario.parts:
            await resp.write(part)
            await asyncio.sleep(0.001)  # one network read per chunk
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the proxy cut the loop and hung up: exactly what it should do
    return resp


async def _models(request: web.Request) -> web.Response:
    data = [{"id": s.key, "object": "model", "owned_by": "demo"} for s in SCENARIOS]
    return web.json_response({"object": "list", "data": data})


# -- running it ----------------------------------------------------------------


async def _start(app: web.Application, **kw: Any) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, **kw)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = runner.addresses[0][1]
    return runner, port


async def collect(scenarios: list[Scenario]) -> list[tuple[Scenario, Seen, Seen]]:
    from ..server.app import create_app
    from ..server.config import ServerConfig, parse_upstream

    up_app = web.Application()
    up_app.router.add_post("/v1/chat/completions", _upstream)
    up_app.router.add_get("/v1/models", _models)
    up_runner, up_port = await _start(up_app, handler_cancellation=True)
    up_url = f"http://127.0.0.1:{up_port}/v1"
    cfg = ServerConfig(upstreams=[parse_upstream(up_url)], probe_interval=0, retries=0)
    px_runner, px_port = await _start(create_app(cfg), handler_cancellation=True)
    px_url = f"http://127.0.0.1:{px_port}/v1"
    results = []
    try:
        async with aiohttp.ClientSession() as session:
            for sc in scenarios:
                req: dict[str, Any] = {
                    "model": sc.key,
                    "stream": True,
                    "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                    **sc.request,
                }
                if sc.tools:
                    req["tools"] = TOOLS
                seen = []
                for base in (up_url, px_url):
                    async with session.post(base + "/chat/completions", json=req) as r:
                        seen.append(assemble(await r.read()))
                results.append((sc, seen[0], seen[1]))
    finally:
        await px_runner.cleanup()
        await up_runner.cleanup()
    return results


def render(results: list[tuple[Scenario, Seen, Seen]], width: int, out: TextIO) -> None:
    col = max(30, (width - 3) // 2)
    rule = "─" * (col * 2 + 3)
    print(
        "streamfix demo: the same scripted upstream, read directly and through streamfix", file=out
    )
    for sc, direct, fixed in results:
        print(rule, file=out)
        print(sc.title, file=out)
        print(f"{'directly':<{col}} │ through streamfix", file=out)
        left = [w for line in describe(direct) for w in textwrap.wrap(line, col) or [""]]
        right = [w for line in describe(fixed) for w in textwrap.wrap(line, col) or [""]]
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            print(f"{a:<{col}} │ {b}", file=out)
    print(rule, file=out)


def run_demo(
    width: int | None = None, scenarios: list[str] | None = None, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    chosen = [s for s in SCENARIOS if not scenarios or s.key in scenarios]
    if not chosen:
        keys = ", ".join(s.key for s in SCENARIOS)
        print(f"no such scenario; choose from: {keys}", file=sys.stderr)
        return 2
    results = asyncio.run(collect(chosen))
    render(results, width or shutil.get_terminal_size((120, 24)).columns, out)
    return 0
