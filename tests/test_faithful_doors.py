"""Faithful replies through the proxy: a line of code in prose stays text
on ``/v1/messages``; ``tool_choice: "none"`` and one call only
(``parallel_tool_calls: false``, Anthropic's ``disable_parallel_tool_use``)
on chat and the front doors. Real SDKs as clients, a scripted upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from .support.streamutil import SHAPES_TOOLS, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

USER: list[Any] = [{"role": "user", "content": "Clean up the build"}]
BASH: dict[str, Any] = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
BASH_LINE = 'To clean up you would run: `Bash(command="rm -rf build/")` but I have not run it'
#: Call markup inside inline code, not right after its backtick.
CODE_SPAN = (
    'Claude-style agents would write `then <tool_call>{"name": "Bash", "arguments": '
    '{"command": "rm -rf build/"}}</tool_call>` but I have not run it'
)
CALL = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
CALL2 = '<tool_call>{"name": "Bash", "arguments": {"command": "pwd"}}</tool_call>'

Servers = tuple[FakeUpstream, AppServer]


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        yield up, px


async def _messages(px: AppServer, stream: bool, **kw: Any) -> Any:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=px.root, max_retries=0)
    kw = {"model": "m", "max_tokens": 100, "messages": USER, "tools": [BASH], **kw}
    try:
        if not stream:
            return await client.messages.create(**kw)
        async with client.messages.stream(**kw) as s:
            return await s.get_final_message()
    finally:
        await client.close()


def _push(up: FakeUpstream, text: str, stream: bool) -> None:
    if stream:
        up.push(Reply.stream(text_stream([text[i : i + 7] for i in range(0, len(text), 7)])))
    else:
        up.push(Reply.json(completion(text)))


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("text", [BASH_LINE, CODE_SPAN])
async def test_a_line_of_code_in_prose_stays_text_on_messages(
    servers: Servers, stream: bool, text: str
) -> None:
    up, px = servers
    _push(up, text, stream)
    msg = await _messages(px, stream)
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == text
    assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_choice_none_on_messages(servers: Servers, stream: bool) -> None:
    up, px = servers
    text = "I would run:\n" + CALL
    _push(up, text, stream)
    msg = await _messages(px, stream, tool_choice={"type": "none"})
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == text and msg.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [True, False])
async def test_one_call_on_messages(servers: Servers, stream: bool) -> None:
    up, px = servers
    _push(up, CALL + "\n" + CALL2, stream)
    msg = await _messages(
        px, stream, tool_choice={"type": "auto", "disable_parallel_tool_use": True}
    )
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert [u.input for u in uses] == [{"command": "ls"}]
    assert not [b for b in msg.content if b.type == "text" and b.text.strip()]
    assert msg.stop_reason == "tool_use"


CHAT_CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
CHAT_CALL2 = '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>'


async def _chat(px: AppServer, stream: bool, **kw: Any) -> tuple[str, list[str], str | None]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
    kw = {"model": "m", "messages": USER, "tools": SHAPES_TOOLS, **kw}
    try:
        if not stream:
            out = await client.chat.completions.create(**kw)
            m = out.choices[0].message
            names = [c.function.name for c in m.tool_calls or []]  # type: ignore[union-attr]
            return m.content or "", names, out.choices[0].finish_reason
        text, names, finish = [], [], None
        async for ev in await client.chat.completions.create(stream=True, **kw):
            for ch in ev.choices:
                text.append(ch.delta.content or "")
                names += [c.function.name for c in ch.delta.tool_calls or [] if c.function]
                finish = ch.finish_reason or finish
        return "".join(text), [n for n in names if n], finish
    finally:
        await client.close()


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_choice_none_on_chat(servers: Servers, stream: bool) -> None:
    up, px = servers
    _push(up, "Sure.\n" + CHAT_CALL + "<|im_end|>", stream)
    got = await _chat(px, stream, tool_choice="none")
    assert got == ("Sure.\n" + CHAT_CALL, [], "stop")


@pytest.mark.parametrize("stream", [True, False])
async def test_one_call_on_chat(servers: Servers, stream: bool) -> None:
    up, px = servers
    _push(up, CHAT_CALL + "\n" + CHAT_CALL2, stream)
    got = await _chat(px, stream, parallel_tool_calls=False)
    assert got == ("", ["lookup_order"], "tool_calls")


async def test_tool_choice_none_on_responses(servers: Servers) -> None:
    up, px = servers
    text = "Sure.\n" + CHAT_CALL
    _push(up, text, True)
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
    tools: list[Any] = [{"type": "function", **t["function"]} for t in SHAPES_TOOLS]
    try:
        async with client.responses.stream(
            model="m", input="hi", tools=tools, tool_choice="none"
        ) as s:
            resp = await s.get_final_response()
    finally:
        await client.close()
    assert [o.type for o in resp.output] == ["message"]
    assert resp.output_text == text
