"""A named ``tool_choice``, narrowed or forwarded: calls per 100 turns.

A scripted model on loopback calls the tool a turn names with one
probability when it is shown many tools (``--p-many``, default 0.16) and
another when it is shown only that one (``--p-one``, default 0.70): the
rates a gateway in front of self-hosted models reported before and after
narrowing. The same turns (a seeded draw per request) go through
``streamfix serve``'s app twice: with ``--required soft`` (the default:
only the named tool, ``tool_choice: "auto"``, an instruction, one more ask
if the reply has no call) and with ``--required off`` (forwarded as is).

    python -m bench.named_tool [--turns 100] [--rounds 5]

Prints calls per 100 turns for each, median over rounds, and the upstream
requests per turn that the narrowing costs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from streamfix.server.app import create_app
from streamfix.server.config import ServerConfig, parse_upstream
from streamfix.tools.local import free_port

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    for name, desc in (
        ("search_docs", "Search the product documentation. Returns the best passages."),
        ("create_ticket", "Open a support ticket for the customer's problem."),
        ("lookup_order", "Look an order up by its id."),
        ("refund_order", "Refund an order that was paid."),
        ("send_email", "Send an email to the customer."),
        ("escalate", "Hand the conversation to a human agent."),
    )
]
NAMED = {"type": "function", "function": {"name": "search_docs"}}
PROSE = "I can help with that. The documentation covers setup, billing and troubleshooting."


def scripted_model(p_many: float, p_one: float, seed: int, seen: list[int]) -> web.Application:
    """The model; each request's tool count is appended to ``seen``."""
    rng = random.Random(seed)

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(len(body.get("tools") or []))
        tools = body.get("tools") or []
        p = p_one if len(tools) == 1 else p_many
        if rng.random() < p:
            name = tools[0]["function"]["name"] if len(tools) == 1 else "search_docs"
            args = {"query": "reset password"}
            content = f"<tool_call>{orjson.dumps({'name': name, 'arguments': args}).decode()}"
            content += "</tool_call>"
        else:
            content = PROSE
        return web.json_response(completion({"role": "assistant", "content": content}))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def completion(msg: dict[str, Any]) -> dict[str, Any]:
    """A scripted model's non-streamed reply carrying ``msg``."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}  # fmt: skip


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """``app`` on a free loopback port: its runner and its ``/v1`` URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/v1"


async def one_round(
    turns: int, required: str, p_many: float, p_one: float, seed: int
) -> tuple[float, float]:
    """Calls per 100 turns, and upstream requests per turn."""
    seen: list[int] = []
    up_runner, up_url = await serve(scripted_model(p_many, p_one, seed, seen))
    cfg = ServerConfig(upstreams=[parse_upstream(up_url)], required=required, probe_interval=0)
    px_runner, px_url = await serve(create_app(cfg))
    calls = 0
    body = {"model": "m", "messages": [{"role": "user", "content": "How do I reset my password?"}],
            "tools": TOOLS, "tool_choice": NAMED}  # fmt: skip
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(turns):
                async with s.post(px_url + "/chat/completions", json=body) as r:
                    msg = (await r.json())["choices"][0]["message"]
                calls += bool(msg.get("tool_calls"))
    finally:
        await px_runner.cleanup()
        await up_runner.cleanup()
    return calls * 100 / turns, len(seen) / turns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--p-many", type=float, default=0.16)
    p.add_argument("--p-one", type=float, default=0.70)
    args = p.parse_args()
    print(
        f"scripted model: p(call | many tools) = {args.p_many}, p(call | one tool) = {args.p_one}"
    )
    print(f"{'--required':<12}{'calls per 100 turns':>20}{'range':>10}{'requests per turn':>20}")
    for required in ("soft", "off"):
        runs = [
            asyncio.run(one_round(args.turns, required, args.p_many, args.p_one, seed))
            for seed in range(args.rounds)
        ]
        rates = [rate for rate, _ in runs]
        cost = statistics.median(per for _, per in runs)
        spread = f"{min(rates):.0f}-{max(rates):.0f}"
        print(f"{required:<12}{statistics.median(rates):>20.0f}{spread:>10}{cost:>20.2f}")


if __name__ == "__main__":
    main()
