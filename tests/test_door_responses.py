"""The Responses door (``/v1/responses``) with the real OpenAI SDK as the
client (``responses.create``, ``responses.stream``), through the proxy,
against scripted loopback chat upstreams: the request as the upstream gets
it, and what the SDK's accumulator makes of the reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from .support.streamutil import chunk, sse, text_stream, with_usage
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

EXEC_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a shell command",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
    },
}
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}
NAMESPACE: dict[str, Any] = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
        }
    ],
}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def hermes(name: str, arguments: dict[str, Any]) -> str:
    return (
        "<tool_call>\n"
        + orjson.dumps({"name": name, "arguments": arguments}).decode()
        + "\n</tool_call>"
    )


Stack = tuple[FakeUpstream, AppServer, openai.AsyncOpenAI]


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
        try:
            yield up, px, client
        finally:
            await client.close()


async def stream_final(client: openai.AsyncOpenAI, **kw: Any) -> tuple[Any, list[str]]:
    kw.setdefault("model", "qwen3-coder")
    kw.setdefault("input", "hi")
    types = []
    async with client.responses.stream(**kw) as stream:
        async for ev in stream:
            types.append(ev.type)
        return await stream.get_final_response(), types


# -- replies -----------------------------------------------------------------


async def test_stream_plain_answer(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(with_usage(text_stream(["Hel", "lo ", "wörld 🌍"]), USAGE)))
    resp, types = await stream_final(client)
    assert resp.output_text == "Hello wörld 🌍" and resp.status == "completed"
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (11, 7)
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


async def test_sequence_numbers_count_up(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(text_stream(["a", "b"])))
    stream = await client.responses.create(model="m", input="hi", stream=True)
    numbers = [ev.sequence_number async for ev in stream]
    assert numbers == list(range(len(numbers))) and len(numbers) == 10


async def test_create_plain_answer(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.json(completion("Hello", usage=USAGE)))
    resp = await client.responses.create(model="m", input="hi", max_output_tokens=50)
    assert resp.output_text == "Hello" and resp.status == "completed"
    assert resp.usage is not None and resp.usage.total_tokens == 18
    sent = up.chat_requests[0].body
    assert sent["stream"] is False and sent["max_tokens"] == 50


@pytest.mark.parametrize("stream", [True, False])
async def test_text_tool_call_becomes_a_function_call_item(stack: Stack, stream: bool) -> None:
    up, _, client = stack
    call = hermes("exec_command", {"cmd": "ls"})
    kw: dict[str, Any] = {"model": "m", "input": "list files", "tools": [EXEC_TOOL]}
    if stream:
        up.push(Reply.stream(text_stream(["Running it.\n", call[:25], call[25:]])))
        resp, types = await stream_final(client, **kw)
        assert "response.function_call_arguments.delta" in types
        assert "response.function_call_arguments.done" in types
    else:
        up.push(Reply.json(completion("Running it.\n" + call)))
        resp = await client.responses.create(**kw)
    assert [o.type for o in resp.output] == ["message", "function_call"]
    assert resp.output_text.strip() == "Running it."
    fc = resp.output[1]
    assert fc.name == "exec_command" and orjson.loads(fc.arguments) == {"cmd": "ls"}
    assert fc.call_id and fc.status == "completed"


async def test_fenced_json_and_two_calls(stack: Stack) -> None:
    up, _, client = stack
    two = (
        '```json\n[{"name": "exec_command", "arguments": {"cmd": "ls"}},'
        ' {"name": "exec_command", "arguments": {"cmd": "pwd"}}]\n```'
    )
    up.push(Reply.stream(text_stream([two[:10], two[10:50], two[50:]])))
    resp, _ = await stream_final(client, tools=[EXEC_TOOL])
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [orjson.loads(c.arguments)["cmd"] for c in calls] == ["ls", "pwd"]
    assert len({c.call_id for c in calls}) == 2
    assert resp.output_text == ""


async def test_custom_tool_call(stack: Stack) -> None:
    up, _, client = stack
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    up.push(Reply.stream(text_stream([hermes("apply_patch", {"input": patch})])))
    resp, types = await stream_final(client, tools=[APPLY_PATCH])
    [item] = resp.output
    assert item.type == "custom_tool_call"
    assert item.name == "apply_patch" and item.input == patch
    assert "response.custom_tool_call_input.done" in types
    [tool] = up.chat_requests[0].body["tools"]
    assert tool["function"]["parameters"]["required"] == ["input"]
    assert "*** Begin Patch" in tool["function"]["description"]


async def test_namespace_tool_maps_back(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.stream(text_stream([hermes("multi_agent_v1__spawn_agent", {"task": "x"})])))
    resp, _ = await stream_final(client, tools=[NAMESPACE, EXEC_TOOL])  # type: ignore[list-item]
    [item] = resp.output
    assert item.type == "function_call" and item.name == "spawn_agent"
    assert item.namespace == "multi_agent_v1"
    names = [t["function"]["name"] for t in up.chat_requests[0].body["tools"]]
    assert names == ["multi_agent_v1__spawn_agent", "exec_command"]


async def test_reasoning_becomes_a_reasoning_item(stack: Stack) -> None:
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
    resp, types = await stream_final(client, reasoning={"effort": "high"})
    assert [o.type for o in resp.output] == ["reasoning", "message"]
    assert resp.output[0].content[0].text == "Let me think."
    assert resp.output_text == "Answer."
    assert types.count("response.reasoning_text.delta") == 2
    assert up.chat_requests[0].body["reasoning_effort"] == "high"


async def test_loop_cut_is_incomplete(stack: Stack) -> None:
    up, _, client = stack
    head = sse([chunk(role="assistant")], done=False)
    up.push(
        Reply.stream(head, delay=0.001, repeat=sse([chunk("the cat sat on the mat. ")], done=False))
    )
    stream = await client.responses.create(model="m", input="hi", stream=True)
    last = None
    async for ev in stream:
        last = ev
    assert last is not None and last.type == "response.incomplete"
    resp = last.response
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text.startswith("the cat sat on the mat.")


async def test_token_limit_is_incomplete_when_not_streamed(stack: Stack) -> None:
    up, _, client = stack
    up.push(Reply.json(completion("cut sho", finish="length")))
    resp = await client.responses.create(model="m", input="hi", max_output_tokens=3)
    assert resp.status == "incomplete" and resp.output_text == "cut sho"


async def test_upstream_dying_mid_stream_raises_in_the_sdk(stack: Stack) -> None:
    up, _, client = stack
    raw = sse([chunk(role="assistant"), chunk("partial")], done=False)
    up.push(Reply.stream(raw, end="abort"))
    types: list[str] = []
    with pytest.raises(openai.APIError) as info:
        async with client.responses.stream(model="m", input="hi") as stream:
            async for ev in stream:
                types.append(ev.type)
    assert "failed mid-stream" in str(info.value)
    assert types[-1] == "response.failed"


async def test_bad_request_is_a_400_openai_error(stack: Stack) -> None:
    up, _, client = stack
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=42)  # type: ignore[arg-type]
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input="hi", previous_response_id="resp_1")
    assert "stores no responses" in info.value.message
    assert not up.chat_requests


# -- the request as the upstream gets it ------------------------------------------


async def test_request_translation_codex_shape(stack: Stack) -> None:
    """Turn 2 of Codex: developer messages, a call and its output, a
    reasoning item, a namespace tool, web_search, fields it cannot use."""
    up, px, _ = stack
    up.push(Reply.stream(text_stream(["Done."])))
    body = {
        "model": "qwen3-coder",
        "stream": True,
        "instructions": "Be careful.",
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "client_metadata": {"x-codex-turn-metadata": "{}"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": None},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "exec_command",
                "arguments": '{"cmd":"ls"}',
                "status": "completed",
            },
            {
                "type": "function_call",
                "call_id": "call_2",
                "name": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": "{}",
            },
            {"type": "function_call_output", "id": "o1", "call_id": "call_1", "output": "a.txt"},
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "spawned"}],
            },
            {"type": "custom_tool_call", "call_id": "call_3", "name": "apply_patch", "input": "P"},
            {"type": "custom_tool_call_output", "call_id": "call_3", "output": "applied"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Listed."}],
            },
            {"type": "item_reference", "id": "x"},
        ],
        "tools": [
            EXEC_TOOL,
            NAMESPACE,
            APPLY_PATCH,
            {"type": "web_search", "external_web_access": True},
            {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}},
        ],
    }
    async with aiohttp.ClientSession() as s, s.post(px.url + "/responses", json=body) as r:
        assert r.status == 200
        await r.read()
    chat = up.chat_requests[0].body
    assert chat["messages"] == [
        {"role": "system", "content": "Be careful.\n\nYou are Codex."},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "spawned"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": '{"input":"P"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "applied"},
        {"role": "assistant", "content": "Listed."},
    ]
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch", "tool_search"]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is True
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}},
    }
    assert chat["stream_options"] == {"include_usage": True}
    for key in ("store", "include", "prompt_cache_key", "client_metadata", "reasoning_effort"):
        assert key not in chat
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        text = await r.text()
    assert 'streamfix_repairs_total{kind="dropped_tool"} 1.0' in text
    assert 'streamfix_repairs_total{kind="dropped_input_item"} 1.0' in text
    assert (
        'streamfix_requests_total{endpoint="responses",model="*",status="200",stream="true",'
        'tenant="-"} 1.0' in text
    )


async def test_additional_tools_and_tool_search(stack: Stack) -> None:
    """Tools that arrive as input items (Codex's code-mode catalog models,
    tool_search results) are offered; a tool_search call maps back."""
    up, _, client = stack
    up.push(Reply.stream(text_stream([hermes("tool_search", {"query": "calendar"})])))
    tools: Any = [{"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}]
    extra = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [
            {
                "type": "namespace",
                "name": "functions",
                "tools": [{"type": "custom", "name": "exec", "description": "run JS"}],
            }
        ],
    }
    resp, _ = await stream_final(
        client, input=[{"role": "user", "content": "hi"}, extra], tools=tools
    )  # type: ignore[list-item]
    [item] = resp.output
    assert item.type == "tool_search_call"
    data = item.model_dump()
    assert data["arguments"] == {"query": "calendar"} and data["execution"] == "client"
    names = [t["function"]["name"] for t in up.chat_requests[0].body["tools"]]
    assert names == ["tool_search", "functions__exec"]


async def test_tool_choice_function() -> None:
    """Translated to chat's named form; with ``--required off`` it is sent
    upstream as is."""
    async with FakeUpstream() as up, AppServer(proxy_app(up.url, required="off")) as px:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
        up.push(Reply.json(completion("ok")))
        await client.responses.create(
            model="m",
            input="hi",
            tools=[EXEC_TOOL],  # type: ignore[list-item]
            tool_choice={"type": "function", "name": "exec_command"},
            parallel_tool_calls=False,
        )
        await client.close()
    chat = up.chat_requests[0].body
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "exec_command"}}
    assert chat["parallel_tool_calls"] is False


async def test_tool_choice_function_is_narrowed_by_default(stack: Stack) -> None:
    """``--required soft`` (the default) reaches a door's named tool too:
    only that tool goes upstream, with ``auto``; a reply without a call is
    asked once more."""
    up, _, client = stack
    up.push(Reply.json(completion("I would rather chat.")))
    up.push(Reply.json(completion(hermes("exec_command", {"cmd": "ls"}))))
    other = {**EXEC_TOOL, "name": "write_stdin"}
    resp = await client.responses.create(
        model="m",
        input="hi",
        tools=[other, EXEC_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "exec_command"},
    )
    first, second = (r.body for r in up.chat_requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["exec_command"]
    assert first["tool_choice"] == second["tool_choice"] == "auto"
    assert [item.type for item in resp.output] == ["function_call"]
    assert resp.output[0].name == "exec_command"  # type: ignore[union-attr]


async def test_max_output_tokens_is_clamped_to_the_window() -> None:
    routes = {"/v1/models": {"data": [{"id": "m", "max_model_len": 4096}]}}
    async with (
        FakeUpstream(Reply.json(completion("ok")), routes=routes) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        client = openai.AsyncOpenAI(api_key="k", base_url=px.url, max_retries=0)
        await client.responses.create(model="m", input="hi", max_output_tokens=65536)
        await client.close()
    assert up.chat_requests[0].body["max_tokens"] < 4096


async def test_keepalive_while_a_call_is_held_is_an_event() -> None:
    """The proxy holds a call written as text until it is whole; meanwhile
    the client sees in_progress events (not comments, which idle timers
    of clients such as Codex do not count)."""
    call = hermes("exec_command", {"cmd": "ls"})
    slow = Reply.events(text_stream([call[i : i + 8] for i in range(0, len(call), 8)]), delay=0.01)
    async with (
        FakeUpstream(slow) as up,
        AppServer(proxy_app(up.url, keepalive_interval=0.02)) as px,
    ):
        client = openai.AsyncOpenAI(api_key="k", base_url=px.url, max_retries=0)
        resp, types = await stream_final(client, tools=[EXEC_TOOL])
        await client.close()
    assert types.count("response.in_progress") >= 3
    assert [o.type for o in resp.output] == ["function_call"]
