"""A named ``tool_choice`` under ``--required soft``: only that tool is sent,
with ``tool_choice: "auto"`` and an instruction in the tool's own words; a
reply without a call is asked once more (``server/attempts.py``)."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server.plan import named_tool, narrow_to_tool

from .support.streamutil import SHAPES_TOOLS, assemble, text_stream, tool
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, proxy_app

NAMED = {"type": "function", "function": {"name": "create_ticket"}}


def turn(stream: bool, **kw: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "The printer is on fire."}],
        "tools": SHAPES_TOOLS,
        "tool_choice": NAMED,
        "stream": stream,
        **kw,
    }


def picky_model(rec: Received) -> Reply:
    """Answers in prose when it sees several tools, calls the one it sees
    when it sees one (as text, the way small models write calls)."""
    tools = rec.body.get("tools") or []
    if len(tools) == 1:
        name = tools[0]["function"]["name"]
        text = f'<tool_call>{{"name": "{name}", "arguments": {{"title": "Fire"}}}}</tool_call>'
    else:
        text = "You should call facilities about the printer."
    if rec.body.get("stream"):
        return Reply.stream(text_stream([text[: len(text) // 2], text[len(text) // 2 :]]))
    msg = {"role": "assistant", "content": text}
    return Reply.json(
        {"id": "x", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
    )


async def send(px: AppServer, body: dict[str, Any]) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.url + "/chat/completions", json=body) as r,
    ):
        return r.status, await r.read()


def calls_in(data: bytes, stream: bool) -> list[str]:
    if stream:
        return [c["function"]["name"] for c in assemble(data).tool_calls]
    msg = orjson.loads(data)["choices"][0]["message"]
    return [c["function"]["name"] for c in msg.get("tool_calls") or ()]


def test_named_tool_is_the_offered_tool_tool_choice_names() -> None:
    assert named_tool(turn(False)) == "create_ticket"
    assert named_tool({**turn(False), "tool_choice": "required"}) is None
    other = {"type": "function", "function": {"name": "not_offered"}}
    assert named_tool({**turn(False), "tool_choice": other}) is None
    assert named_tool({**turn(False), "tool_choice": {"type": "function"}}) is None


def test_narrowing_keeps_one_tool_and_quotes_its_first_sentence() -> None:
    described = tool("create_ticket", {"title": {"type": "string"}})
    described["function"]["description"] = "Open a support ticket. Use it for any outage."
    body = {**turn(False), "tools": [*SHAPES_TOOLS[:1], described]}
    out = narrow_to_tool(body, "create_ticket")
    assert out["tools"] == [described] and out["tool_choice"] == "auto"
    assert out["messages"][0] == {
        "role": "system",
        "content": "Answer this turn by calling the tool create_ticket (Open a support ticket). "
        "Reply with the call only.",
    }
    assert out["messages"][1:] == body["messages"]
    assert body["tools"] != out["tools"]  # the client's body is not changed
    system = {**body, "messages": [{"role": "system", "content": "Be brief."}, *body["messages"]]}
    merged = narrow_to_tool(system, "create_ticket")["messages"][0]["content"]
    assert merged.startswith("Be brief.\n\nAnswer this turn by calling the tool create_ticket")


@pytest.mark.parametrize("stream", [True, False])
async def test_soft_narrows_and_the_model_calls(stream: bool) -> None:
    async with (
        FakeUpstream(handler=picky_model) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, data = await send(px, turn(stream))
        async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
            text = await r.text()
    assert status == 200 and calls_in(data, stream) == ["create_ticket"]
    (sent,) = up.chat_requests
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["create_ticket"]
    assert sent.body["tool_choice"] == "auto"
    assert 'streamfix_named_tool_total{outcome="called"} 1.0' in text


@pytest.mark.parametrize("stream", [True, False])
async def test_a_reply_without_a_call_is_asked_once_more(stream: bool) -> None:
    prose = "I am not sure which form to use."
    call = '<tool_call>{"name": "create_ticket", "arguments": {"title": "Fire"}}</tool_call>'
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        for text in (prose, call):
            if stream:
                up.push(Reply.stream(text_stream([text])))
            else:
                msg = {"role": "assistant", "content": text}
                up.push(Reply.json({"choices": [{"index": 0, "message": msg}]}))
        status, data = await send(px, turn(stream))
    assert status == 200 and calls_in(data, stream) == ["create_ticket"]
    _, second = up.chat_requests
    assert [t["function"]["name"] for t in second.body["tools"]] == ["create_ticket"]
    assert "create_ticket" in second.body["messages"][0]["content"]
    if stream:
        assert prose not in assemble(data).content  # the first reply never reached the client


async def test_a_call_to_a_tool_not_shown_is_not_lifted() -> None:
    """The chain lifts only the one tool the model was shown."""
    other = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}</tool_call>'
    async with (
        FakeUpstream(Reply.stream(text_stream([other]))) as up,
        AppServer(proxy_app(up.url, max_reasks=0)) as px,
    ):
        status, data = await send(px, turn(True))
    assert status == 200 and calls_in(data, True) == []


async def test_calls_per_100_turns_with_and_without_narrowing() -> None:
    """The scripted model of the issue: prose when it sees many tools, a
    call when it sees one. 100 turns each way."""
    counts = {}
    for required in ("soft", "off"):
        async with (
            FakeUpstream(handler=picky_model) as up,
            AppServer(proxy_app(up.url, required=required)) as px,
        ):
            made = 0
            for i in range(100):
                _, data = await send(px, turn(stream=i % 2 == 0))
                made += bool(calls_in(data, i % 2 == 0))
        counts[required] = made
    assert counts == {"soft": 100, "off": 0}
