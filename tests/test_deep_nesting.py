"""A model's reply nested thousands of levels deep never crashes the chain
(issue 37, defect 3): call arguments (structured or written as text) and
JSON replies past ``jsoncodec.MAX_DEPTH`` are passed on as text or with the
invalid note, streamed and whole, never an ``internal_error`` or a 500.

The proxy is the real app on loopback in front of a scripted upstream.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from streamfix import jsoncodec, toolargs

from .support.streamutil import assemble, chunk, sse, stream_of, tc, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

N = 3000
DEEP = '{"a": ' + "[" * N + "]" * N + "}"
TOOLS = [
    {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {}}}},
    }
]
MESSAGES = [{"role": "user", "content": "hi"}]


async def post(up: FakeUpstream, reply: Reply, body: dict[str, Any]) -> tuple[int, bytes]:
    async with AppServer(proxy_app(up.url, retries=0)) as px:
        up.default = reply
        async with (
            aiohttp.ClientSession() as s,
            s.post(px.root + "/v1/chat/completions", json=body) as r,
        ):
            return r.status, await r.read()


def test_loads_refuses_past_the_bound() -> None:
    ok = "[" * jsoncodec.MAX_DEPTH + "]" * jsoncodec.MAX_DEPTH
    assert jsoncodec.loads(ok) is not None
    for depth in (jsoncodec.MAX_DEPTH + 1, 999, N):
        with pytest.raises(orjson.JSONDecodeError, match="nested deeper"):
            jsoncodec.loads("[" * depth + "]" * depth)
    assert toolargs.parse_object(DEEP) == (None, False)
    assert toolargs.parse_value(DEEP) is toolargs.INVALID
    assert toolargs.too_deep(DEEP) and not toolargs.too_deep('{"a": "' + "[" * N + '"}')


@pytest.mark.parametrize("stream", [True, False])
async def test_structured_call_arguments_pass_as_sent(stream: bool) -> None:
    if stream:
        reply = Reply.stream(stream_of([tc(0, "call_1", "f", "")], [tc(0, args=DEEP)]))
    else:
        call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": DEEP}}
        reply = Reply.json(completion(None, tool_calls=[call], finish="tool_calls"))
    async with FakeUpstream() as up:
        status, raw = await post(
            up, reply, {"model": "m", "messages": MESSAGES, "tools": TOOLS, "stream": stream}
        )
    assert status == 200
    if stream:
        got = assemble(raw)
        assert got.errors == [] and got.done
        assert [c["function"] for c in got.tool_calls] == [{"name": "f", "arguments": DEEP}]
    else:
        msg = orjson.loads(raw)["choices"][0]["message"]
        assert msg["tool_calls"][0]["function"]["arguments"] == DEEP


@pytest.mark.parametrize("stream", [True, False])
async def test_a_deep_call_written_as_text_is_no_crash(stream: bool) -> None:
    text = '<tool_call>{"name": "f", "arguments": ' + DEEP + "}</tool_call>"
    if stream:
        reply = Reply.stream(text_stream([text[i : i + 500] for i in range(0, len(text), 500)]))
    else:
        reply = Reply.json(completion(text))
    async with FakeUpstream() as up:
        status, raw = await post(
            up, reply, {"model": "m", "messages": MESSAGES, "tools": TOOLS, "stream": stream}
        )
    assert status == 200
    if stream:
        got = assemble(raw)
        assert got.errors == [] and got.done and got.tool_calls == []
    else:
        choice = orjson.loads(raw)["choices"][0]
        assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("kind", ["json_object", "json_schema", "strict"])
async def test_a_deep_json_reply_gets_the_note(stream: bool, kind: str) -> None:
    fmt: dict[str, Any] = {"type": kind}
    if kind != "json_object":
        schema = {"name": "x", "schema": {"type": "object"}, "strict": kind == "strict"}
        fmt = {"type": "json_schema", "json_schema": schema}
    if stream:
        reply = Reply.stream(sse([chunk(role="assistant"), chunk(DEEP), chunk(finish="stop")]))
    else:
        reply = Reply.json(completion(DEEP))
    async with FakeUpstream() as up:
        body = {"model": "m", "messages": MESSAGES, "response_format": fmt, "stream": stream}
        status, raw = await post(up, reply, body)
    assert status == 200
    if stream:
        got = assemble(raw)
        assert got.errors == [] and got.done and got.content.startswith('{"a":')
        ext = got.ext or {}
    else:
        choice = orjson.loads(raw)["choices"][0]
        assert choice["message"]["content"].startswith('{"a":')
        ext = choice["streamfix"]
    assert ext.get("json") == "invalid"
