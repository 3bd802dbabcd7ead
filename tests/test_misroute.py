"""A path that would be right with ``/v1`` added or removed: a 404 that
says so, in the door's error shape (``server/routes/misroute.py``), seen
by the real OpenAI and Anthropic SDKs given the wrong base URL."""

from __future__ import annotations

import aiohttp
import anthropic
import openai
import orjson
import pytest

from .support.upstream_fake import AppServer, FakeUpstream, proxy_app

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_an_openai_client_without_v1_gets_a_404_naming_v1() -> None:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.root, max_retries=0)
        try:
            with pytest.raises(openai.NotFoundError) as exc:
                await client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            with pytest.raises(openai.NotFoundError) as models:
                await client.models.list()
        finally:
            await client.close()
    assert "/v1/chat/completions is one" in exc.value.message
    assert "base URL should end in /v1" in exc.value.message
    assert isinstance(exc.value.body, dict) and exc.value.body["code"] == "unknown_url"
    assert "/v1/models is one" in models.value.message
    assert [r for r in up.requests if "chat" in r.path] == []  # nothing sent upstream


async def test_an_anthropic_client_adding_v1_twice_gets_anthropics_404() -> None:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        client = anthropic.AsyncAnthropic(api_key="sk-test", base_url=px.url, max_retries=0)
        try:
            with pytest.raises(anthropic.NotFoundError) as exc:
                await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)  # type: ignore[arg-type]
        finally:
            await client.close()
    body = exc.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "/v1/messages is one" in body["error"]["message"]
    assert "should not end in /v1" in body["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "said"),
    [
        ("POST", "/responses", "/v1/responses is one"),
        ("POST", "/v1/v1/chat/completions", "/v1/chat/completions is one"),
        ("GET", "/v1/nowhere", None),  # no route either way: aiohttp's plain 404
        ("POST", "/models", None),  # /v1/models is GET only
        ("GET", "/v1/healthz", None),  # not an API route under /v1
    ],
)
async def test_only_a_route_with_v1_added_or_removed_is_named(
    method: str, path: str, said: str | None
) -> None:
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.request(method, px.root + path, json={}) as r,
    ):
        body = orjson.loads(await r.read())
    assert r.status in (404, 405)
    message = body["error"]["message"]
    if said is None:
        assert "is one" not in message
    else:
        assert r.status == 404 and said in message and "error" in body
