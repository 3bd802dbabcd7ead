"""Structured output end to end: real clients (the OpenAI SDK's ``.parse()``
on chat and the Responses API, LangChain's ``with_structured_output``,
plain Pydantic) through the proxy, against a scripted loopback upstream
that fences, prefixes and breaks its JSON (``transforms/jsonout.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from .support.streamutil import text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

MESSAGES: list[Any] = [{"role": "user", "content": "Who wrote the first program?"}]


class Person(BaseModel):
    name: str
    age: int


ADA = Person(name="Ada", age=36)
FENCED = 'Here you go:\n```json\n{"name": "Ada", "age": 36,}\n```\nAnything else?'
PYTHONISH = "Sure, the person is {'name': 'Ada', 'age': 36} as asked."


@pytest.fixture
async def stack() -> AsyncIterator[tuple[FakeUpstream, openai.AsyncOpenAI, str]]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
        try:
            yield up, client, px.url
        finally:
            await client.close()


Stack = tuple[FakeUpstream, openai.AsyncOpenAI, str]


async def test_sdk_parse_fenced_whole(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.json(completion(FENCED)))
    out = await client.chat.completions.parse(model="m", messages=MESSAGES, response_format=Person)
    assert out.choices[0].message.parsed == ADA
    assert up.chat_requests[0].body["response_format"]["type"] == "json_schema"


async def test_sdk_parse_streamed_python_literal(stack: Stack) -> None:
    up, client, _ = stack
    pieces = [PYTHONISH[i : i + 5] for i in range(0, len(PYTHONISH), 5)]
    up.push(Reply.events(text_stream(pieces)))
    async with client.chat.completions.stream(
        model="m", messages=MESSAGES, response_format=Person
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    assert final.choices[0].message.parsed == ADA


async def test_sdk_parse_asks_again_with_the_error(stack: Stack) -> None:
    """The SDK sends ``strict: true``: the reply is held to its end, and a
    value that does not validate is asked once more, with the reason."""
    up, client, _ = stack
    up.push(Reply.events(text_stream(['{"name": ', '"Ada"}'])))
    up.push(Reply.events(text_stream(['{"name": "Ada", ', '"age": 36}'])))
    async with client.chat.completions.stream(
        model="m", messages=MESSAGES, response_format=Person
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    assert final.choices[0].message.parsed == ADA
    assert len(up.chat_requests) == 2
    instruction = up.chat_requests[1].body["messages"][0]["content"]
    assert "'age' is a required property" in instruction


async def test_second_failure_gets_the_note(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.json(completion('{"name": "Ada"}')))
    up.push(Reply.json(completion('{"name": "Ada"}')))
    fmt: Any = {
        "type": "json_schema",
        "json_schema": {"name": "p", "schema": Person.model_json_schema()},
    }
    out = await client.chat.completions.create(model="m", messages=MESSAGES, response_format=fmt)
    assert len(up.chat_requests) == 2
    extra = out.choices[0].model_extra or {}
    assert extra["streamfix"]["json"] == "invalid"
    assert out.choices[0].message.content == '{"name": "Ada"}'


async def test_responses_parse_text_format(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.json(completion(FENCED)))
    out = await client.responses.parse(model="m", input="Who?", text_format=Person)
    assert out.output_parsed == ADA
    assert up.chat_requests[0].body["response_format"]["type"] == "json_schema"


async def test_langchain_with_structured_output(stack: Stack) -> None:
    from langchain_openai import ChatOpenAI

    up, _, url = stack
    up.push(Reply.json(completion(FENCED)))
    llm = ChatOpenAI(model="m", api_key="sk-test", base_url=url, max_retries=0)  # type: ignore[arg-type]
    out = await llm.with_structured_output(Person).ainvoke("Who?")
    assert out == ADA


async def test_pydantic_model_validate_json_streamed(stack: Stack) -> None:
    up, client, _ = stack
    broken = '<think>a person</think>{"name": "Ada", // the name\n "age": 36'
    up.push(Reply.events(text_stream([broken[i : i + 3] for i in range(0, len(broken), 3)])))
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, response_format={"type": "json_object"}, stream=True
    )
    content = ""
    async for ev in stream:
        if ev.choices:
            content += ev.choices[0].delta.content or ""
    assert Person.model_validate_json(content) == ADA


async def test_plain_request_is_not_touched(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.json(completion(FENCED)))
    out = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert out.choices[0].message.content == FENCED


async def test_responses_echoes_the_format_it_was_asked_for(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.json(completion(FENCED)))
    out = await client.responses.parse(model="m", input="Who?", text_format=Person)
    assert out.status == "completed"
    assert out.text is not None and out.text.format is not None
    assert out.text.format.type == "json_schema"
    assert (out.model_extra or {}).get("streamfix") is None


def _invalid_twice(up: FakeUpstream) -> None:
    up.push(Reply.json(completion('{"name": "Ada"}')))
    up.push(Reply.json(completion('{"name": "Ada"}')))


PERSON_FORMAT: Any = {"type": "json_schema", "name": "p", "schema": Person.model_json_schema()}


async def test_responses_marks_an_invalid_value_incomplete(stack: Stack) -> None:
    """A value that still fails the schema after the second asking: the
    response is ``incomplete`` (no API reason fits: ``incomplete_details``
    has a null reason) with the ``streamfix`` note saying why."""
    up, client, _ = stack
    _invalid_twice(up)
    out = await client.responses.create(model="m", input="Who?", text={"format": PERSON_FORMAT})
    assert len(up.chat_requests) == 2
    assert out.status == "incomplete"
    assert out.incomplete_details is not None and out.incomplete_details.reason is None
    note = (out.model_extra or {})["streamfix"]
    assert note["json"] == "invalid" and "'age' is a required property" in note["error"]
    assert out.output_text == '{"name": "Ada"}'
    assert out.text is not None and out.text.format is not None
    assert out.text.format.type == "json_schema"


async def test_responses_streamed_invalid_value_ends_incomplete(stack: Stack) -> None:
    up, client, _ = stack
    up.push(Reply.events(text_stream(['{"name": ', '"Ada"}'])))
    kinds = []
    final: Any = None
    stream = await client.responses.create(
        model="m", input="Who?", text={"format": PERSON_FORMAT}, stream=True
    )
    async for ev in stream:
        kinds.append(ev.type)
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert kinds[-1] == "response.incomplete"
    assert final.status == "incomplete"
    assert (final.model_extra or {})["streamfix"]["json"] == "invalid"


async def test_messages_carries_the_note_on_an_invalid_value(stack: Stack) -> None:
    """Anthropic has no stop reason for it: the message, and streamed its
    ``message_delta`` event, carry the ``streamfix`` note."""
    import aiohttp

    up, _, url = stack
    _invalid_twice(up)
    body = {
        "model": "m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Who?"}],
        "output_config": {"format": {"type": "json_schema", "schema": Person.model_json_schema()}},
    }
    base = url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/messages", json=body) as r:
            msg = await r.json()
        assert msg["stop_reason"] == "end_turn"
        assert msg["streamfix"]["json"] == "invalid"
        up.push(Reply.events(text_stream(['{"name": ', '"Ada"}'])))
        async with http.post(f"{base}/v1/messages", json={**body, "stream": True}) as r:
            raw = (await r.read()).decode()
    delta = next(line for line in raw.splitlines() if '"message_delta"' in line and "data:" in line)
    assert '"streamfix":{"json":"invalid"' in delta
    # a valid reply carries no note
    up.push(Reply.json(completion('{"name": "Ada", "age": 36}')))
    async with aiohttp.ClientSession() as http, http.post(f"{base}/v1/messages", json=body) as r:
        assert "streamfix" not in await r.json()
