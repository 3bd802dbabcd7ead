"""The real OpenAI Python SDK as a client through the proxy, against a
scripted loopback upstream: streaming, non-streaming, the streaming helper
that accumulates tool calls, and text tool calls of several shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from .support.streamutil import SHAPES_TOOLS, chunk, sse, text_stream
from .support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Reply,
    call_chunks,
    completion,
    proxy_app,
)

MESSAGES: list[Any] = [{"role": "user", "content": "Where is order A1?"}]


@pytest.fixture
async def stack() -> AsyncIterator[tuple[FakeUpstream, openai.AsyncOpenAI]]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
        try:
            yield up, client
        finally:
            await client.close()


async def test_streaming(stack: tuple[FakeUpstream, openai.AsyncOpenAI]) -> None:
    up, client = stack
    up.push(Reply.stream(text_stream(["Hel", "lo ", "wörld 🌍"])))
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    parts = []
    finish = None
    async for ev in stream:
        if ev.choices:
            parts.append(ev.choices[0].delta.content or "")
            finish = ev.choices[0].finish_reason or finish
    assert "".join(parts) == "Hello wörld 🌍" and finish == "stop"
    assert up.chat_requests[0].headers["Authorization"] == "Bearer sk-test"


async def test_non_streaming(stack: tuple[FakeUpstream, openai.AsyncOpenAI]) -> None:
    up, client = stack
    up.push(
        Reply.json(
            completion(
                "Hello", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            )
        )
    )
    out = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert out.choices[0].message.content == "Hello"
    assert out.usage is not None and out.usage.total_tokens == 2


async def _helper_calls(
    client: openai.AsyncOpenAI,
) -> tuple[list[tuple[str, dict[str, Any]]], str | None, str]:
    import json

    async with client.chat.completions.stream(
        model="m",
        messages=MESSAGES,
        tools=SHAPES_TOOLS,  # type: ignore[arg-type]
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    choice = final.choices[0]
    calls = [
        (c.function.name, json.loads(c.function.arguments))  # type: ignore[union-attr]
        for c in choice.message.tool_calls or []
    ]
    return calls, choice.finish_reason, choice.message.content or ""


@pytest.mark.parametrize("repeat_name", [False, True])
async def test_stream_helper_accumulates_structured_calls(
    stack: tuple[FakeUpstream, openai.AsyncOpenAI], repeat_name: bool
) -> None:
    up, client = stack
    if repeat_name:  # llama.cpp: every delta repeats id, type and name
        chunks = [chunk(role="assistant")]
        for frag in ['{ "order_id"', ': "A', '1" }']:
            call = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": frag},
            }
            chunks.append(chunk(tool_calls=[call]))
        chunks.append(chunk(finish="tool_calls"))
        up.push(Reply.stream(sse(chunks)))
    else:
        up.push(Reply.stream(call_chunks("lookup_order", '{"order_id": "A1"}', pieces=5)))
    calls, finish, _ = await _helper_calls(client)
    assert calls == [("lookup_order", {"order_id": "A1"})]
    assert finish == "tool_calls"


TEXT_CALLS = {
    "hermes": [
        "<tool",
        '_call>\n{"name": "lookup_order", "argu',
        'ments": {"order_id": "A1"}}\n</tool_call>',
    ],
    "hermes-fenced": [
        '```xml\n<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}',
        "</tool_call>\n```",
    ],
    "qwen-xml": ["<function=lookup_order>\n<parameter=order_id>\nA1\n</parameter>\n</function>"],
    "bare-json": ['{"name": "lookup_order", ', '"parameters": {"order_id": "A1"}}'],
    "code-call": ['lookup_order({"order_id": ', '"A1"})'],
    "mistral": ['[TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "A1"}}]'],
}


@pytest.mark.parametrize("shape", sorted(TEXT_CALLS))
async def test_stream_helper_on_text_tool_calls(
    stack: tuple[FakeUpstream, openai.AsyncOpenAI], shape: str
) -> None:
    up, client = stack
    up.push(Reply.stream(text_stream(TEXT_CALLS[shape])))
    calls, finish, content = await _helper_calls(client)
    assert calls == [("lookup_order", {"order_id": "A1"})]
    assert finish == "tool_calls"
    assert "lookup_order" not in content and "<" not in content


async def test_non_streaming_text_tool_call(stack: tuple[FakeUpstream, openai.AsyncOpenAI]) -> None:
    up, client = stack
    text = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}</tool_call>'
    up.push(Reply.json(completion(text)))
    out = await client.chat.completions.create(model="m", messages=MESSAGES, tools=SHAPES_TOOLS)  # type: ignore[arg-type]
    msg = out.choices[0].message
    assert msg.tool_calls and msg.tool_calls[0].function.name == "lookup_order"  # type: ignore[union-attr]
    assert out.choices[0].finish_reason == "tool_calls"


async def test_upstream_death_raises_in_the_sdk(
    stack: tuple[FakeUpstream, openai.AsyncOpenAI],
) -> None:
    up, client = stack
    up.push(Reply.stream(sse([chunk(role="assistant"), chunk("part")], done=False), end="abort"))
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_bad_request_raises_bad_request_error(
    stack: tuple[FakeUpstream, openai.AsyncOpenAI],
) -> None:
    _, client = stack
    with pytest.raises(openai.BadRequestError) as exc:
        await client.chat.completions.create(model="m", messages=[])
    assert exc.value.status_code == 400
    assert not stack[0].chat_requests
