"""A server that refuses ``response_format: json_schema`` (llama-cpp-python's
answers 500 with a validation error naming the field; it takes only
``text`` and ``json_object``): the OpenAI SDK's ``.parse()`` fails against
it. The proxy learns the refusal for that model on that row, sends the
request as ``json_object`` with the schema stated to the model, and still
holds the reply to the schema (``reask.AskAgain.format_refused``,
``plan.json_fallback_step``). Through the real SDK and a loopback upstream."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest
from pydantic import BaseModel

from .support.streamutil import text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, completion, proxy_app

#: What llama-cpp-python 0.3's server answers to a json_schema format.
REFUSAL = {
    "error": {
        "message": "1 validation error: {'type': 'literal_error', 'loc': ('body', "
        "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
        "type": "internal_server_error",
    }
}
FENCED = '```json\n{"name": "Ada", "age": "36",}\n```'


class Person(BaseModel):
    name: str
    age: int


def refusing_server(rec: Received) -> Reply:
    """JSON mode only; the reply fenced, with a trailing comma and a
    number as a string (json_object keeps no schema)."""
    fmt = rec.body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Reply.json(REFUSAL, status=500)
    if rec.body.get("stream"):
        return Reply.stream(text_stream([FENCED[:9], FENCED[9:]]))
    return Reply.json(completion(FENCED))


async def metric(px: AppServer, line: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        text = await r.text()
    return next((row for row in text.splitlines() if row.startswith(line)), "")


@pytest.mark.parametrize("stream", [False, True])
async def test_parse_works_against_a_server_that_refuses_json_schema(stream: bool) -> None:
    async with (
        FakeUpstream(handler=refusing_server) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        client = openai.AsyncOpenAI(api_key="k", base_url=px.url, max_retries=0)
        messages: Any = [{"role": "user", "content": "Who wrote the first program?"}]
        for _ in range(2):
            if stream:
                async with client.chat.completions.stream(
                    model="m", messages=messages, response_format=Person
                ) as s:
                    got = (await s.get_final_completion()).choices[0].message.parsed
            else:
                done = await client.chat.completions.parse(
                    model="m", messages=messages, response_format=Person
                )
                got = done.choices[0].message.parsed
            assert got == Person(name="Ada", age=36)
        await client.close()
        reasked = await metric(px, 'streamfix_reasks_total{reason="format"}')
    first, second, third = (r.body for r in up.chat_requests)  # learned: no third refusal
    assert first["response_format"]["type"] == "json_schema"
    for body in (second, third):
        assert body["response_format"] == {"type": "json_object"}
        system = body["messages"][0]
        assert system["role"] == "system" and '"age"' in system["content"]
    assert reasked.endswith(" 1.0")


async def test_another_500_is_relayed_and_learns_nothing() -> None:
    """A 500 that does not name ``response_format`` is the server's own
    failure: relayed as before, the next request still asks json_schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": fmt}
    async with (
        FakeUpstream(Reply.json(completion("{}"))) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        up.push(Reply.error(500, "CUDA out of memory"))
        async with s.post(px.url + "/chat/completions", json=body) as r:
            assert r.status == 500
        async with s.post(px.url + "/chat/completions", json=body) as r:
            assert r.status == 200
    assert [r.body["response_format"]["type"] for r in up.chat_requests] == [
        "json_schema",
        "json_schema",
    ]


async def test_the_refusal_is_learned_per_model() -> None:
    """One model's server refusing json_schema says nothing of another
    model on the same catch-all row."""

    def handler(rec: Received) -> Reply:
        if rec.body["model"] == "old":
            return refusing_server(rec)
        return Reply.json(completion('{"name": "Ada", "age": 36}'))

    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}}
    async with (
        FakeUpstream(handler=handler) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        for model in ("old", "new"):
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(
                px.url + "/chat/completions", json={**body, "response_format": fmt}
            ) as r:
                assert r.status == 200, await r.text()
    sent = [(r.body["model"], r.body["response_format"]["type"]) for r in up.chat_requests]
    assert sent == [("old", "json_schema"), ("old", "json_object"), ("new", "json_schema")]
