"""Split invariance through the real proxy: however the upstream's bytes
are cut into network writes (inside a UTF-8 sequence, inside a marker),
the client assembles the same reply as from one write."""

from __future__ import annotations

import asyncio

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from .support.streamutil import SHAPES_TOOLS, assemble, split_at, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

STREAMS = [
    text_stream(["Voilà ", "— ça ", "marche 🌍", " très bien."]),
    text_stream(
        [
            "Checking. ",
            "<tool_call>",
            '{"name": "lookup_order", ',
            '"arguments": {"order_id": "Ä1"}}',
            "</tool_call>",
        ]
    ),
]


async def _through_proxy(parts: list[bytes]) -> bytes:
    async with (
        FakeUpstream(Reply(parts=parts, delay=0.0005)) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        req = {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
            "tools": SHAPES_TOOLS,
        }
        async with s.post(px.url + "/chat/completions", json=req) as r:
            return await r.read()


def _expected(raw: bytes) -> tuple[str, list[tuple[str, str]], str | None]:
    a = assemble(asyncio.run(_through_proxy([raw])))
    return (
        a.content,
        [(c["function"]["name"], c["function"]["arguments"]) for c in a.tool_calls],
        a.finish_reason,
    )


EXPECTED = [_expected(raw) for raw in STREAMS]


@settings(max_examples=12)
@given(which=st.sampled_from(range(len(STREAMS))), data=st.data())
def test_any_network_split_gives_the_same_reply(which: int, data: st.DataObject) -> None:
    raw = STREAMS[which]
    cuts = data.draw(st.lists(st.integers(1, len(raw) - 1), max_size=10))
    a = assemble(asyncio.run(_through_proxy(split_at(raw, cuts))))
    got = (
        a.content,
        [(c["function"]["name"], c["function"]["arguments"]) for c in a.tool_calls],
        a.finish_reason,
    )
    assert got == EXPECTED[which]
    assert a.done and not a.errors


def test_expected_replies_are_repaired() -> None:
    assert EXPECTED[0][0] == "Voilà — ça marche 🌍 très bien."
    content, calls, finish = EXPECTED[1]
    assert [name for name, _ in calls] == ["lookup_order"] and finish == "tool_calls"
    assert "<tool_call>" not in content
