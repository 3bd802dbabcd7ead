"""The doors' replies carry every field their API defines, with the right
values (issue 31, reply side): ``incomplete_details`` on every path,
unique call ids within a turn, a stop reason that matches the blocks sent,
usage details passed on (absent, not zero, when the upstream sends none),
upstream error bodies reshaped on both doors, the matched stop sequence
and a content filter reported as such. Through the real SDKs (anthropic,
openai), the proxy and a scripted loopback upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from .support.streamutil import chunk, sse, text_stream, with_usage
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

USER = [{"role": "user", "content": "hi"}]
TOOL_A: dict[str, Any] = {
    "name": "read",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
TOOL_R: dict[str, Any] = {
    "type": "function",
    "name": "read",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
DETAILED = {
    "prompt_tokens": 150,
    "completion_tokens": 30,
    "total_tokens": 180,
    "prompt_tokens_details": {"cached_tokens": 100},
    "completion_tokens_details": {"reasoning_tokens": 10},
}
PLAIN = {"prompt_tokens": 150, "completion_tokens": 30, "total_tokens": 180}

Stack = tuple[FakeUpstream, anthropic.AsyncAnthropic, openai.AsyncOpenAI]


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        ant = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=px.root, max_retries=0)
        oai = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
        try:
            yield up, ant, oai
        finally:
            await ant.close()
            await oai.close()


async def message(client: anthropic.AsyncAnthropic, stream: bool, **kw: Any) -> Any:
    kw.setdefault("model", "m")
    kw.setdefault("max_tokens", 1024)
    kw.setdefault("messages", USER)
    if stream:
        async with client.messages.stream(**kw) as s:
            return await s.get_final_message()
    return await client.messages.create(**kw)


async def response(client: openai.AsyncOpenAI, stream: bool, **kw: Any) -> Any:
    kw.setdefault("model", "m")
    kw.setdefault("input", "hi")
    if not stream:
        return await client.responses.create(**kw)
    # the object the last event carries (the SDK's get_final_response
    # reads response.completed only)
    final = None
    async with client.responses.stream(**kw) as s:
        async for ev in s:
            if ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
    assert final is not None
    return final


def push(
    up: FakeUpstream, stream: bool, chunks: list[dict[str, Any]], whole: dict[str, Any]
) -> None:
    up.push(Reply.stream(sse(chunks)) if stream else Reply.json(whole))


# -- 2. incomplete_details on every path ---------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_length_cut_says_max_output_tokens(stack: Stack, stream: bool) -> None:
    up, _, oai = stack
    if stream:
        up.push(Reply.stream(text_stream(["cut sho"], finish="length")))
    else:
        up.push(Reply.json(completion("cut sho", finish="length")))
    resp = await response(oai, stream)
    assert resp.status == "incomplete" and resp.output_text == "cut sho"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"


# -- 3. unique call ids ----------------------------------------------------------------


def _dup_calls() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    calls = [
        {"index": i, "id": "dup", "type": "function", "function": {"name": "read", "arguments": a}}
        for i, a in enumerate(['{"path": "a"}', '{"path": "b"}'])
    ]
    chunks = [chunk(role="assistant"), chunk(tool_calls=calls), chunk(finish="tool_calls")]
    whole = completion(
        None, [{k: v for k, v in c.items() if k != "index"} for c in calls], "tool_calls"
    )
    return chunks, whole


@pytest.mark.parametrize("stream", [True, False])
async def test_duplicate_call_ids_are_made_unique_messages(stack: Stack, stream: bool) -> None:
    up, ant, _ = stack
    push(up, stream, *_dup_calls())
    msg = await message(ant, stream, tools=[TOOL_A])
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert [b.input for b in uses] == [{"path": "a"}, {"path": "b"}]
    assert [b.id for b in uses] == ["dup", "dup_2"]
    assert msg.stop_reason == "tool_use"


@pytest.mark.parametrize("stream", [True, False])
async def test_duplicate_call_ids_are_made_unique_responses(stack: Stack, stream: bool) -> None:
    up, _, oai = stack
    push(up, stream, *_dup_calls())
    resp = await response(oai, stream, tools=[TOOL_R])
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [c.arguments for c in calls] == ['{"path": "a"}', '{"path": "b"}']
    assert [c.call_id for c in calls] == ["dup", "dup_2"]


# -- 8. a stop reason that matches the blocks sent ------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_calls_finish_without_a_call(stack: Stack, stream: bool) -> None:
    up, ant, oai = stack
    chunks = [chunk(role="assistant"), chunk("Nothing to run."), chunk(finish="tool_calls")]
    whole = completion("Nothing to run.", finish="tool_calls")
    push(up, stream, chunks, whole)
    msg = await message(ant, stream, tools=[TOOL_A])
    assert [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason == "end_turn"
    push(up, stream, chunks, whole)
    resp = await response(oai, stream, tools=[TOOL_R])
    assert [o.type for o in resp.output] == ["message"]
    assert resp.status == "completed" and resp.incomplete_details is None


# -- 6. usage details --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_usage_details_are_passed_on(stack: Stack, stream: bool) -> None:
    up, ant, oai = stack
    for _ in range(2):
        if stream:
            up.push(Reply.stream(with_usage(text_stream(["ok"]), DETAILED)))
        else:
            up.push(Reply.json(completion("ok", usage=DETAILED)))
    msg = await message(ant, stream)
    # Anthropic's input_tokens excludes the cache reads
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (50, 30)
    assert msg.usage.cache_read_input_tokens == 100
    resp = await response(oai, stream)
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (150, 30)
    assert resp.usage.input_tokens_details.cached_tokens == 100
    assert resp.usage.output_tokens_details.reasoning_tokens == 10


@pytest.mark.parametrize("stream", [True, False])
async def test_usage_details_absent_not_zero(stack: Stack, stream: bool) -> None:
    up, ant, oai = stack
    for _ in range(2):
        if stream:
            up.push(Reply.stream(with_usage(text_stream(["ok"]), PLAIN)))
        else:
            up.push(Reply.json(completion("ok", usage=PLAIN)))
    msg = await message(ant, stream)
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (150, 30)
    assert msg.usage.cache_read_input_tokens is None
    resp = await response(oai, stream)
    assert resp.usage is not None and resp.usage.input_tokens == 150
    assert resp.usage.input_tokens_details is None
    assert resp.usage.output_tokens_details is None
    # the upstream's own counts: not marked estimated (the in-progress
    # object, made before the usage came, once marked the whole turn)
    assert (resp.usage.model_extra or {}).get("streamfix") is None


async def test_estimated_usage_stays_marked(stack: Stack) -> None:
    up, ant, oai = stack
    up.push(Reply.stream(text_stream(["abcdefgh"])))
    up.push(Reply.json(completion("abcdefgh")))
    up.push(Reply.stream(text_stream(["abcdefgh"])))
    msg = await message(ant, True)
    assert msg.usage.output_tokens == 2 and msg.usage.cache_read_input_tokens is None
    msg = await message(ant, False)  # the mark: the SDK's stream accumulator drops it
    assert (msg.usage.model_extra or {}).get("streamfix") == {"estimated": True}
    resp = await response(oai, True)
    assert resp.usage is not None and resp.usage.output_tokens == 2
    assert (resp.usage.model_extra or {}).get("streamfix") == {"estimated": True}


# -- 7. error bodies reshaped on both doors -------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_bare_error_body_is_reshaped_on_both_doors(stack: Stack, stream: bool) -> None:
    up, ant, oai = stack
    up.push(Reply.json({"error": "model not found"}, status=400))
    with pytest.raises(anthropic.BadRequestError) as ainfo:
        await message(ant, stream)
    assert isinstance(ainfo.value.body, dict)
    assert ainfo.value.body["error"]["message"] == "model not found"
    up.push(Reply.json({"error": "model not found"}, status=400))
    with pytest.raises(openai.BadRequestError) as oinfo:
        await response(oai, stream)
    body = oinfo.value.body
    assert isinstance(body, dict), body
    assert body["message"] == "model not found"
    assert body["type"] == "invalid_request_error"
    assert "model not found" in oinfo.value.message


async def test_openai_shaped_error_keeps_its_fields(stack: Stack) -> None:
    up, _, oai = stack
    up.push(Reply.error(404, "no such model", code="model_not_found"))
    with pytest.raises(openai.NotFoundError) as info:
        await response(oai, False)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["message"] == "no such model" and body["code"] == "model_not_found"


# -- 9. stops -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_matched_stop_sequence_is_reported(stack: Stack, stream: bool) -> None:
    up, ant, _ = stack
    end = chunk(finish="stop")
    end["choices"][0]["stop_reason"] = "END"  # vLLM / SGLang: which stop matched
    whole = completion("done ")
    whole["choices"][0]["stop_reason"] = "END"
    push(up, stream, [chunk(role="assistant"), chunk("done "), end], whole)
    msg = await message(ant, stream, stop_sequences=["END"])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"


@pytest.mark.parametrize("stream", [True, False])
async def test_stop_token_id_is_end_turn(stack: Stack, stream: bool) -> None:
    up, ant, _ = stack
    end = chunk(finish="stop")
    end["choices"][0]["stop_reason"] = 151645  # a stop token id, not a sequence
    whole = completion("done")
    whole["choices"][0]["stop_reason"] = 151645
    push(up, stream, [chunk(role="assistant"), chunk("done"), end], whole)
    msg = await message(ant, stream, stop_sequences=["END"])
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None


@pytest.mark.parametrize("stream", [True, False])
async def test_content_filter_is_a_refusal(stack: Stack, stream: bool) -> None:
    up, ant, oai = stack
    chunks = [chunk(role="assistant"), chunk("I can"), chunk(finish="content_filter")]
    whole = completion("I can", finish="content_filter")
    push(up, stream, chunks, whole)
    msg = await message(ant, stream)
    assert msg.stop_reason == "refusal"
    push(up, stream, chunks, whole)
    resp = await response(oai, stream)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "content_filter"
