"""Make ``tests/recordings``: real recordings of replies that needed streamfix.

Each scenario is a scripted loopback upstream that misbehaves as small
models and their servers do (``tests/upstream_fake.py``), with the real
proxy in front of it run with ``--record``; the file the recorder writes
is kept under the scenario's name. With ``--real``, a few more come from
llama.cpp's server with SmolLM2-135M (``streamfix.tools.local``)::

    python -m tests.make_recordings [--real]

``tests/test_replay.py`` replays every file here through today's chain.
Run this again only when the recording format changes: a recording is
evidence of what a reply was, and of what the client got then.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from streamfix.server.record import RECORDER

from .e2e.common import GET_WEATHER, LOOP_REQUEST, TOOL_AS_TEXT_MESSAGES
from .support.streamutil import SHAPES_TOOLS, chunk, sse, text_stream
from .support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Reply,
    call_chunks,
    completion,
    proxy_app,
)

HERE = Path(__file__).resolve().parent / "recordings"
ASK = [{"role": "user", "content": "Where is order A1?"}]


def _tools(stream: bool = True, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": ASK, "tools": SHAPES_TOOLS, "stream": stream, **kw}


#: name -> (the upstream's replies in order, the client's request)
SCENARIOS: dict[str, tuple[list[Reply], dict[str, Any]]] = {
    "text-call-hermes-split-mid-tag": (
        [
            Reply.events(
                text_stream(
                    [
                        *("<", "tool", "_call", ">\n", '{"name": "lookup_order", '),
                        *('"arguments": {"order_id": ', '"A1"}}', "\n</", "tool_call", ">"),
                    ]
                ),
                delay=0.002,
            )
        ],
        _tools(),
    ),
    "text-call-qwen-xml": (
        [
            Reply.events(
                text_stream(
                    [
                        "I'll look.\n<function=lookup_order>",
                        "<parameter=order_id>A1",
                        "</parameter></function>",
                    ]
                ),
                delay=0.002,
            )
        ],
        _tools(),
    ),
    "text-call-code-line-not-streamed": (
        [Reply.json(completion('create_ticket({"title": "Broken", "priority": "2"})'))],
        _tools(stream=False),
    ),
    "structured-call-repeated-name-python-args": (
        # llama-cpp-python: id, type and name in every piece; a Python dict
        [
            Reply.events(
                call_chunks("lookup_order", "{'order_id': 'A1',}", repeat_name=True),
                delay=0.002,
            )
        ],
        _tools(),
    ),
    "think-in-content-then-call": (
        [
            Reply.events(
                text_stream(
                    [
                        *("<think>", "The user wants an order;", " call the tool.", "</think>\n\n"),
                        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}',
                        "</tool_call>",
                    ]
                ),
                delay=0.002,
            )
        ],
        _tools(),
    ),
    "loop-cut": (
        [Reply.events(text_stream(["Here:\n"] + ["the cat sat on the mat.\n"] * 80, "length"))],
        {"model": "m", "messages": ASK, "stream": True},
    ),
    "unrecognised-markup": (
        [
            Reply.events(
                text_stream(
                    ["Checking.", "<tool_call>", "lookup the order A1 please", "</tool_call>"]
                )
            )
        ],
        _tools(),
    ),
    "missed-call-unknown-shape": (
        [
            Reply.events(
                text_stream(
                    ["Let me look. ", "@@call lookup_order ", '{"order_id": "A1"}', " @@end"]
                )
            )
        ],
        _tools(),
    ),
    "empty-after-strip-asked-again": (
        [
            Reply.events(text_stream(["<|im_end|>"])),
            Reply.events(text_stream(["Order A1 ", "ships today."])),
        ],
        _tools(),
    ),
    "cut-off-call-asked-again": (
        [
            Reply.events(
                text_stream(['<tool_call>{"name": "lookup_order", "arguments": {"order'], "length")
            ),
            Reply.events(
                text_stream(
                    ['<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}']
                )
            ),
        ],
        _tools(max_tokens=16),
    ),
    "upstream-died-mid-call": (
        [
            Reply.stream(
                sse(
                    [chunk(role="assistant"), chunk("<tool_call>"), chunk('{"name": "lookup')],
                    False,
                ),
                end="abort",
            )
        ],
        _tools(),
    ),
    "upstream-500-then-text-call": (
        [
            Reply.error(503, "loading model"),
            Reply.events(
                text_stream(['<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>'])
            ),
        ],
        _tools(),
    ),
    "json-for-a-stream": (
        [Reply.json(completion('{"name": "lookup_order", "arguments": {"order_id": "A1"}}'))],
        _tools(),
    ),
}


async def _record_one(
    name: str, replies: list[Reply], request: dict[str, Any], base: str, out: Path
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with AppServer(proxy_app(base, record=tmp, retries=1)) as px:
            async with (
                aiohttp.ClientSession() as s,
                s.post(px.url + "/chat/completions", data=orjson.dumps(request)) as r,
            ):
                await r.read()
            assert await asyncio.to_thread(px.app[RECORDER].flush, 10.0)
        found = sorted(Path(tmp).glob("*.json"))
        if len(found) != 1:
            raise SystemExit(f"{name}: expected one recording, got {len(found)}")
        shutil.copyfile(found[0], out / f"{name}.json")
        print(f"{name}: {found[0].name}", file=sys.stderr)


async def scripted(out: Path) -> None:
    for name, (replies, request) in SCENARIOS.items():
        async with FakeUpstream() as up:
            up.push(*replies)
            await _record_one(name, replies, request, up.url, out)


#: Requests to the real model: a call written as text, and a loop.
REAL: dict[str, dict[str, Any]] = {
    "smollm2-text-call": {
        "model": "smollm2",
        "messages": TOOL_AS_TEXT_MESSAGES,
        "tools": [GET_WEATHER],
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
    },
    "smollm2-loop": {**LOOP_REQUEST, "stream": True},
}


async def real(out: Path) -> None:
    from streamfix.tools.local import LocalServer

    with LocalServer() as server:
        for name, request in REAL.items():
            await _record_one(name, [], request, server.base_url, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="also record from SmolLM2")
    args = parser.parse_args()
    HERE.mkdir(exist_ok=True)
    asyncio.run(scripted(HERE))
    if args.real:
        asyncio.run(real(HERE))


if __name__ == "__main__":
    main()
