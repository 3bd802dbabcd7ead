"""vLLM's ``finish_reason: "repetition"`` (its ``repetition_detection``
cut a loop) through every door, streamed and whole: each door's own
loop-cut ending, as when streamfix's cutter cuts (``length`` and the
``streamfix`` cut note on chat, ``max_tokens`` on Messages, an
``incomplete`` response on Responses), counted as ``loop_cut``. Through
the real SDKs, the proxy and a scripted loopback upstream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from .support.streamutil import assemble, text_stream, with_usage
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

USER = [{"role": "user", "content": "hi"}]
LOOP = ["Ok. ", "ok ok ", "ok ok "]
USAGE = {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}
NOTE = {"cut": "repetition", "by": "upstream"}

Stack = tuple[FakeUpstream, AppServer]


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        yield up, px


def vllm_cut(up: FakeUpstream, stream: bool) -> None:
    """What vLLM sends when its repetition detection ends a stream."""
    if stream:
        up.push(Reply.stream(with_usage(text_stream(LOOP, finish="repetition"), USAGE)))
    else:
        whole = completion("".join(LOOP), finish="repetition")
        up.push(Reply.json({**whole, "usage": USAGE}))


async def loop_cuts(px: AppServer) -> float:
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        text = await r.text()
    m = re.search(r'^streamfix_repairs_total\{kind="loop_cut"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize("stream", [True, False])
async def test_chat_ends_with_length_and_the_cut_note(stack: Stack, stream: bool) -> None:
    up, px = stack
    vllm_cut(up, stream)
    body = {"model": "m", "messages": USER, "stream": stream}
    async with aiohttp.ClientSession() as s, s.post(px.url + "/chat/completions", json=body) as r:
        assert r.status == 200
        raw = await r.read()
    if stream:
        got = assemble(raw)
        finish, note, content = got.finish_reason, got.ext, got.content
    else:
        [choice] = orjson.loads(raw)["choices"]
        finish, note = choice["finish_reason"], choice.get("streamfix")
        content = choice["message"]["content"]
    assert finish == "length" and note == NOTE
    assert content == "".join(LOOP)  # vLLM already stopped: nothing more is cut
    assert b'"repetition",' not in raw.replace(b'"cut":"repetition",', b"")
    assert await loop_cuts(px) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_chat_through_the_openai_sdk(stack: Stack, stream: bool) -> None:
    up, px = stack
    vllm_cut(up, stream)
    async with openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0) as oai:
        if stream:
            finishes = [
                ch.finish_reason
                async for ev in await oai.chat.completions.create(
                    model="m",
                    messages=USER,
                    stream=True,  # type: ignore[arg-type]
                )
                for ch in ev.choices
                if ch.finish_reason
            ]
        else:
            reply = await oai.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            finishes = [ch.finish_reason for ch in reply.choices]
    assert finishes == ["length"]


@pytest.mark.parametrize("stream", [True, False])
async def test_messages_ends_with_max_tokens(stack: Stack, stream: bool) -> None:
    up, px = stack
    vllm_cut(up, stream)
    async with anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=px.root, max_retries=0
    ) as ant:
        kw: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
        if stream:
            async with ant.messages.stream(**kw) as s:
                msg = await s.get_final_message()
        else:
            msg = await ant.messages.create(**kw)
    assert msg.stop_reason == "max_tokens"  # the door's loop-cut ending, not end_turn
    assert msg.content[0].type == "text" and msg.content[0].text == "".join(LOOP)
    assert await loop_cuts(px) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_responses_ends_incomplete(stack: Stack, stream: bool) -> None:
    up, px = stack
    vllm_cut(up, stream)
    async with openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0) as oai:
        if stream:
            last = None
            async for ev in await oai.responses.create(model="m", input="hi", stream=True):
                last = ev
            assert last is not None and last.type == "response.incomplete"
            resp = last.response
        else:
            resp = await oai.responses.create(model="m", input="hi")
    assert resp.status == "incomplete"  # not "completed"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == "".join(LOOP)
    assert await loop_cuts(px) == 1


def test_the_library_maps_it_without_the_cutter() -> None:
    """``repetition=False`` (streamfix's own cutter off): vLLM's verdict is
    still a loop cut, not a finish reason no client knows."""
    from .support.streamutil import run_sse

    got = assemble(run_sse(text_stream(LOOP, finish="repetition"), None, repetition=False))
    assert got.finish_reason == "length" and got.ext == NOTE
