"""The Messages door (``/v1/messages``) with the real Anthropic SDK as the
client, through the proxy, against scripted loopback chat upstreams: the
request as the upstream gets it, and what ``messages.create`` and
``messages.stream`` make of the reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from .support.streamutil import chunk, sse, text_stream, with_usage
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

WRITE_TOOL: dict[str, Any] = {
    "name": "Write",
    "description": "Write a file",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
    },
}
USER: list[Any] = [{"role": "user", "content": "Write hi to /tmp/a"}]
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
HERMES_CALL = (
    '<tool_call>\n{"name": "Write", "arguments": {"file_path": "/tmp/a", "content": "hi"}}'
    "\n</tool_call>"
)


Stack = tuple[FakeUpstream, AppServer, anthropic.AsyncAnthropic]


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=px.root, max_retries=0)
        try:
            yield up, px, client
        finally:
            await client.close()


async def stream_final(client: anthropic.AsyncAnthropic, **kw: Any) -> Any:
    kw.setdefault("model", "qwen3-coder")
    kw.setdefault("max_tokens", 1024)
    kw.setdefault("messages", USER)
    async with client.messages.stream(**kw) as stream:
        return await stream.get_final_message()


# -- replies -----------------------------------------------------------------


async def test_stream_plain_answer(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(with_usage(text_stream(["Hel", "lo ", "wörld 🌍"]), USAGE)))
    msg = await stream_final(client)
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "Hello wörld 🌍"
    assert msg.stop_reason == "end_turn" and msg.role == "assistant"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (11, 7)
    assert msg.model == "qwen3-coder" and msg.id.startswith("msg_")


async def test_create_plain_answer(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.json(completion("Hello", usage=USAGE)))
    msg = await client.messages.create(model="m", max_tokens=100, messages=USER)
    assert msg.content[0].type == "text" and msg.content[0].text == "Hello"
    assert msg.stop_reason == "end_turn" and msg.usage.output_tokens == 7
    assert up.chat_requests[0].body["stream"] is False


@pytest.mark.parametrize("stream", [True, False])
async def test_text_tool_call_becomes_a_tool_use_block(stack: Stack, stream: bool) -> None:
    up, _, client = stack
    if stream:
        up.push(Reply.stream(text_stream(["I'll write it.\n", HERMES_CALL[:30], HERMES_CALL[30:]])))
        msg = await stream_final(client, tools=[WRITE_TOOL])
    else:
        up.push(Reply.json(completion("I'll write it.\n" + HERMES_CALL)))
        msg = await client.messages.create(
            model="m", max_tokens=100, messages=USER, tools=[WRITE_TOOL]
        )
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[0].text.strip() == "I'll write it."
    call = msg.content[1]
    assert call.name == "Write" and call.input == {"file_path": "/tmp/a", "content": "hi"}
    assert call.id
    assert msg.stop_reason == "tool_use"


async def test_fenced_json_call_and_two_calls(stack: Stack) -> None:
    up, _, client = stack
    two = (
        '```json\n[{"name": "Write", "arguments": {"file_path": "/a", "content": "1"}},'
        ' {"name": "Write", "arguments": {"file_path": "/b", "content": "2"}}]\n```'
    )
    up.push(Reply.stream(text_stream([two[:17], two[17:60], two[60:]])))
    msg = await stream_final(client, tools=[WRITE_TOOL])
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert [c.input["file_path"] for c in calls] == ["/a", "/b"]
    assert len({c.id for c in calls}) == 2
    assert not [b for b in msg.content if b.type == "text" and b.text.strip()]
    assert msg.stop_reason == "tool_use"


async def test_thinking_becomes_a_thinking_block(stack: Stack) -> None:
    up, _, client = stack
    up.push(
        Reply.stream(
            sse(
                [
                    chunk(role="assistant"),
                    chunk(reasoning="Let me "),
                    chunk(reasoning="think."),
                    chunk("Answer."),
                    chunk(finish="stop"),
                ]
            )
        )
    )
    msg = await stream_final(client, thinking={"type": "enabled", "budget_tokens": 4000})
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == "Let me think."
    assert msg.content[1].text == "Answer."
    assert up.chat_requests[0].body["reasoning_effort"] == "medium"


async def test_think_tags_in_content_become_a_thinking_block(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(text_stream(["<think>hmm", "</think>", "Done."])))
    msg = await stream_final(client, tools=[WRITE_TOOL])
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == "hmm" and msg.content[1].text == "Done."


async def test_loop_cut_ends_with_max_tokens(stack: Stack) -> None:
    up, _, client = stack
    head = sse([chunk(role="assistant")], done=False)
    up.push(
        Reply.stream(head, delay=0.001, repeat=sse([chunk("the cat sat on the mat. ")], done=False))
    )
    msg = await stream_final(client)
    assert msg.stop_reason == "max_tokens"
    assert msg.content[0].text.startswith("the cat sat on the mat.")


async def test_token_limit_is_max_tokens(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(text_stream(["cut sho"], finish="length")))
    msg = await stream_final(client)
    assert msg.stop_reason == "max_tokens" and msg.content[0].text == "cut sho"


async def test_upstream_dying_mid_stream_raises_in_the_sdk(stack: Stack) -> None:
    up, _, client = stack
    raw = sse([chunk(role="assistant"), chunk("partial")], done=False)
    up.push(Reply.stream(raw, end="abort"))
    with pytest.raises(anthropic.APIStatusError) as info:
        await stream_final(client)
    assert "failed mid-stream" in str(info.value)


async def test_bad_request_is_a_400_in_anthropic_shape(stack: Stack) -> None:
    up, px, client = stack
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(model="m", max_tokens=10, messages=[])
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "messages" in body["error"]["message"]
    async with aiohttp.ClientSession() as s:
        async with s.post(px.url + "/messages", data=b"{nope") as r:
            assert r.status == 400 and (await r.json())["type"] == "error"
        async with s.get(px.root + "/metrics") as r:
            text = await r.text()
    assert (
        'streamfix_requests_total{endpoint="messages",model="-",status="400",stream="false",'
        'tenant="-"} 2.0' in text
    )
    assert not up.chat_requests


async def test_upstream_error_status_in_anthropic_shape(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.error(400, "model 'x' not found"))
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(model="x", max_tokens=10, messages=USER)
    body = info.value.body
    assert isinstance(body, dict) and body["error"]["message"] == "model 'x' not found"


# -- the request as the upstream gets it ------------------------------------------


async def test_request_translation_claude_code_shape(stack: Stack) -> None:
    """Turn 2 of Claude Code with an unknown model: system blocks with
    cache_control, a system message in the middle, a tool_use and its
    tool_result, adaptive thinking, fields that cannot be used."""
    up, px, _ = stack
    up.push(Reply.stream(text_stream(["Done."])))
    body = {
        "model": "qwen3-coder",
        "max_tokens": 32000,
        "stream": True,
        "metadata": {"user_id": '{"a": 1}'},
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "write it"}]},
            {"role": "system", "content": "Environment: linux"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "s"},
                    {"type": "text", "text": "Writing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "ok",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                ],
            },
        ],
        "tools": [
            WRITE_TOOL,
            {"name": "DeferredToolPlaceholder", "input_schema": {}, "defer_loading": True},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "tool_choice": {"type": "any"},
        "stop_sequences": ["###"],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    headers = {
        "x-api-key": "sk-client",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
    }
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.url + "/messages?beta=true", json=body, headers=headers) as r,
    ):
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        await r.read()
    sent = up.chat_requests[0]
    chat = sent.body
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code.\nBe brief.\n\nEnvironment: linux"},
        {"role": "user", "content": "write it"},
        {
            "role": "assistant",
            "content": "Writing.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "Write", "arguments": '{"a":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "ok"},
        {
            "role": "user",
            # the row does not say it takes images (vision): a note in its
            # place (tests/test_door_requests.py has the vision row)
            "content": "[an image was omitted here: this model does not take images]",
        },
    ]
    assert [t["function"]["name"] for t in chat["tools"]] == ["Write", "DeferredToolPlaceholder"]
    assert chat["tools"][0]["function"]["parameters"] == WRITE_TOOL["input_schema"]
    assert chat["tools"][1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert chat["tool_choice"] == "auto"  # "any" is "required": soft mode sends auto
    assert chat["stop"] == ["###"] and chat["max_tokens"] == 32000
    assert chat["reasoning_effort"] == "high"
    assert chat["stream_options"] == {"include_usage": True}
    for key in ("metadata", "system", "context_management", "thinking", "output_config"):
        assert key not in chat
    assert sent.headers["Authorization"] == "Bearer sk-client"
    assert "x-api-key" not in {k.lower() for k in sent.headers}
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        text = await r.text()
    assert 'streamfix_repairs_total{kind="dropped_tool"} 1.0' in text
    assert (
        'streamfix_requests_total{endpoint="messages",model="*",status="200",stream="true",'
        'tenant="-"} 1.0' in text
    )


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "Write"}, {"type": "function", "function": {"name": "Write"}}),
    ],
)
async def test_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    async with (
        FakeUpstream(Reply.json(completion("ok"))) as up,
        AppServer(proxy_app(up.url, required="off")) as px,
    ):
        client = anthropic.AsyncAnthropic(api_key="k", base_url=px.root, max_retries=0)
        await client.messages.create(
            model="m",
            max_tokens=10,
            messages=USER,
            tools=[WRITE_TOOL],
            tool_choice=choice,  # type: ignore[arg-type]
        )
        await client.close()
    assert up.chat_requests[0].body["tool_choice"] == expected


async def test_max_tokens_is_clamped_to_the_window() -> None:
    routes = {"/v1/models": {"data": [{"id": "m", "max_model_len": 4096}]}}
    async with (
        FakeUpstream(Reply.json(completion("ok")), routes=routes) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        client = anthropic.AsyncAnthropic(api_key="k", base_url=px.root, max_retries=0)
        await client.messages.create(model="m", max_tokens=20000, messages=USER)
        await client.close()
    assert up.chat_requests[0].body["max_tokens"] < 4096


async def test_x_api_key_is_accepted_as_the_inbound_key() -> None:
    async with (
        FakeUpstream(Reply.json(completion("ok"))) as up,
        AppServer(proxy_app(up.url, api_keys=["k1"])) as px,
    ):
        good = anthropic.AsyncAnthropic(api_key="k1", base_url=px.root, max_retries=0)
        bad = anthropic.AsyncAnthropic(api_key="nope", base_url=px.root, max_retries=0)
        msg = await good.messages.create(model="m", max_tokens=10, messages=USER)
        with pytest.raises(anthropic.AuthenticationError) as info:
            await bad.messages.create(model="m", max_tokens=10, messages=USER)
        await good.close()
        await bad.close()
    assert msg.content[0].text == "ok"
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "authentication_error"
    sent = up.chat_requests[0].headers
    assert "Authorization" not in sent and "x-api-key" not in {k.lower() for k in sent}


async def test_count_tokens(stack: Stack) -> None:
    up, _, client = stack
    long = [{"role": "user", "content": "word " * 70}]
    plain = await client.messages.count_tokens(model="m", messages=long)  # type: ignore[arg-type]
    tooled = await client.messages.count_tokens(
        model="m",
        messages=long,  # type: ignore[arg-type]
        tools=[WRITE_TOOL],  # type: ignore[list-item]
    )
    assert 80 <= plain.input_tokens <= 200  # 350 characters, about 3.5 per token
    assert tooled.input_tokens > plain.input_tokens
    assert not up.chat_requests


async def test_beta_client(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(text_stream(["beta ok"])))
    async with client.beta.messages.stream(
        model="m", max_tokens=10, messages=USER, betas=["interleaved-thinking-2025-05-14"]
    ) as stream:
        msg = await stream.get_final_message()
    assert msg.content[0].text == "beta ok"  # type: ignore[union-attr]
    assert up.chat_requests[0].path == "/v1/chat/completions"


async def test_raw_event_sequence(stack: Stack) -> None:
    up, px, _ = stack
    up.push(Reply.stream(text_stream(["I'll write it.\n", HERMES_CALL])))
    body = {"model": "m", "max_tokens": 100, "stream": True, "messages": USER}
    body["tools"] = [WRITE_TOOL]
    async with aiohttp.ClientSession() as s, s.post(px.url + "/messages", json=body) as r:
        data = await r.read()
    names = [line[7:].decode() for line in data.split(b"\n") if line.startswith(b"event: ")]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    events = [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]
    assert [e["type"] for e in events] == names
    assert events[5]["content_block"]["type"] == "tool_use"
    assert events[6]["delta"]["type"] == "input_json_delta"


# -- the proxy's paths, through the door ------------------------------------------


async def test_a_reply_asked_again_reaches_the_client_once(stack: Stack) -> None:
    """The first reply is empty after repair (only markup): the proxy asks
    again; the encoder sees only the reply that was sent."""
    up, px, _ = stack
    up.push(Reply.stream(text_stream(["<tool_call>", "</tool_call>"])))
    up.push(Reply.stream(text_stream(["second"])))
    body = {"model": "m", "max_tokens": 50, "stream": True, "messages": USER}
    body["tools"] = [WRITE_TOOL]
    async with aiohttp.ClientSession() as s, s.post(px.url + "/messages", json=body) as r:
        data = await r.read()
    assert len(up.chat_requests) == 2
    assert data.count(b"event: message_start") == 1 and data.count(b"event: message_stop") == 1
    assert b'"text":"second"' in data


async def test_upstream_ignoring_stream_is_encoded_as_a_stream(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.json(completion("I'll write it.\n" + HERMES_CALL)))
    msg = await stream_final(client, tools=[WRITE_TOOL])
    assert [b.type for b in msg.content] == ["text", "tool_use"]


async def test_no_upstream_is_a_502_in_anthropic_shape() -> None:
    from .support.upstream_fake import refusing_url

    async with AppServer(proxy_app(refusing_url(), retries=0)) as px:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=px.root, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream_final(client)
        await client.close()
    assert info.value.status_code == 502
    body = info.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "api_error"
