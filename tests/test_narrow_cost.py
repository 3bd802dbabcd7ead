"""Narrowing a large new tool set does not hold the event loop (issue 37,
defect 5): the index of a set over ``narrow.INLINE_TOOLS`` tools is made,
and the turn scored, on the ranker's own thread; the set is kept (by a
hash of the tools as sent), and the ranking is the same as on the loop.

The proxy is the real app on loopback; where each index is made is
watched (the thread's name).
"""

from __future__ import annotations

import asyncio
import io
import random
import string
import threading
from typing import Any

import aiohttp
import orjson

from streamfix import narrow
from streamfix.server import narrowing

from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app


def big_tools(seed: int, n: int = 512) -> list[dict[str, Any]]:
    """``n`` tools never seen before, each with its own words."""
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
                "description": text(40),
                "parameters": {
                    "type": "object",
                    "properties": {
                        word(): {"type": "string", "description": text(25)} for _ in range(6)
                    },
                },
            },
        }
        for i in range(n)
    ]


async def post(root: str, body: dict[str, Any]) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            root + "/v1/chat/completions",
            data=io.BytesIO(orjson.dumps(body)),
            headers={"Content-Type": "application/json"},
        ) as r,
    ):
        assert r.status == 200, await r.text()
        out: dict[str, Any] = orjson.loads(await r.read())
        return out


async def test_large_new_tool_sets_are_ranked_off_the_loop() -> None:
    sets = [big_tools(seed) for seed in range(4)]
    threads: set[str] = set()
    real = narrow.LexicalIndex.__init__

    def spy(self: narrow.LexicalIndex, tools: Any) -> None:
        threads.add(threading.current_thread().name)
        real(self, tools)

    async with FakeUpstream() as up, AppServer(proxy_app(up.url, narrow_tools="auto")) as px:
        up.default = Reply.json(completion("done"))
        narrow.LexicalIndex.__init__ = spy  # type: ignore[method-assign]
        try:
            hostile = [
                post(
                    px.root,
                    {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": t},
                )
                for t in sets
            ]
            plain = post(px.root, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            got = await asyncio.gather(plain, *hostile)
        finally:
            narrow.LexicalIndex.__init__ = real  # type: ignore[method-assign]
    assert all(g["choices"][0]["message"]["content"] == "done" for g in got)
    assert len(up.chat_requests) >= 5
    # Every index was made on the ranker's thread, none on the loop's (where
    # each of these sets held every client for 0.5-1.5 s on a loaded
    # two-core machine). What other clients feel is measured, not asserted
    # here: ``python -m bench.hostile``.
    assert len(threads) == 1 and threads.pop().startswith("streamfix-narrow")


async def test_the_thread_ranks_as_the_loop_does_and_keeps_the_set() -> None:
    tools = big_tools(7, n=40)
    turn = "please run " + tools[3]["function"]["name"]
    expect = narrow.rank_lexical(tools, turn, None, turn)

    class Proxy:
        tool_sets = narrow.VectorCache()

    class Scope:
        proxy = Proxy()

    scope: Any = Scope()
    assert await narrowing._rank_lexical(scope, tools, turn, turn) == expect
    assert len(Proxy.tool_sets) == 1
    assert await narrowing._rank_lexical(scope, tools, turn, turn) == expect
    assert len(Proxy.tool_sets) == 1
    assert narrow.LexicalIndex.key(tools) == narrow.LexicalIndex.key(
        orjson.loads(orjson.dumps(tools))
    )
