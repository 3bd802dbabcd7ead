"""Bad requests at the proxy: each gets a clear 4xx with an OpenAI-shaped
error body, and nothing else (no upstream request, no 500, no hang); odd but
valid requests (unknown fields, huge tool lists, odd schemas) are served.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import random
import string
import time
from typing import Any

import aiohttp
import orjson
import pytest

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream, tool
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

MESSAGES = [{"role": "user", "content": "hi"}]
BODY_LIMIT = 64 * 1024


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, "stream": True, **kw}


async def post_raw(
    url: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    async def go() -> tuple[int, bytes]:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with (
            aiohttp.ClientSession() as s,
            s.post(url + "/chat/completions", data=io.BytesIO(data), headers=hdrs) as r,
        ):
            return r.status, await r.read()

    return await asyncio.wait_for(go(), 5)


def openai_error(data: bytes) -> dict[str, Any]:
    obj = orjson.loads(data)
    assert set(obj) == {"error"}
    err = obj["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return err  # type: ignore[no-any-return]


def deep(n: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * n + b"]" * n + b"}"


BAD: list[tuple[str, bytes, str | None]] = [
    ("empty", b"", None),
    ("not json", b"model=m&messages=hi", None),
    ("truncated json", b'{"model": "m", "messages": [{"role": "user"', None),
    ("trailing garbage", orjson.dumps(body()) + b" x", None),
    ("json array", b"[1, 2]", None),
    ("json string", b'"hello"', None),
    ("json null", b"null", None),
    ("no messages", orjson.dumps({"model": "m"}), "messages"),
    ("messages not array", orjson.dumps({"model": "m", "messages": "hi"}), "messages"),
    ("empty messages", orjson.dumps({"model": "m", "messages": []}), "messages"),
    ("message not object", orjson.dumps({"model": "m", "messages": [1]}), "messages"),
    ("stream not bool", orjson.dumps(body(stream="true")), "stream"),
    ("tools not array", orjson.dumps(body(tools={"a": 1})), "tools"),
    ("tool not object", orjson.dumps(body(tools=["lookup_order"])), "tools[0]"),
    (
        "tool without function",
        orjson.dumps(body(tools=[{"type": "function"}])),
        "tools[0].function",
    ),
    (
        "tool name not string",
        orjson.dumps(body(tools=[*SHAPES_TOOLS, {"type": "function", "function": {"name": 5}}])),
        "tools[3].function",
    ),
    (
        "parameters not a schema object",
        orjson.dumps(
            body(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}])
        ),
        "tools[0].function.parameters",
    ),
    ("max_tokens negative", orjson.dumps(body(max_tokens=-5)), "max_tokens"),
    ("max_tokens string", orjson.dumps(body(max_tokens="100")), "max_tokens"),
    ("max_tokens bool", orjson.dumps(body(max_tokens=True)), "max_tokens"),
    (
        "invalid utf-8",
        b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        None,
    ),
    (
        "overlong utf-8",
        b'{"model": "m", "messages": [{"role": "user", "content": "\xc0\xaf"}]}',
        None,
    ),
    ("utf-16 body", orjson.dumps(body()).decode().encode("utf-16"), None),
    ("nested too deep", deep(5000), None),
    ("nan", b'{"model": "m", "messages": [{"role": "user"}], "temperature": NaN}', None),
]


@pytest.mark.parametrize(("raw", "param"), [(r, p) for _, r, p in BAD], ids=[n for n, _, _ in BAD])
async def test_bad_request_is_a_clear_400_and_nothing_else(raw: bytes, param: str | None) -> None:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url, body_limit=BODY_LIMIT)) as px:
        status, data = await post_raw(px.url, raw)
    assert status == 400, data
    err = openai_error(data)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert not up.chat_requests  # nothing went upstream


@pytest.mark.parametrize("size", [BODY_LIMIT + 1, 4 * BODY_LIMIT, 64 * BODY_LIMIT])
async def test_huge_body_is_413(size: int) -> None:
    big = orjson.dumps(body(messages=[{"role": "user", "content": "x" * size}]))
    async with FakeUpstream() as up, AppServer(proxy_app(up.url, body_limit=BODY_LIMIT)) as px:
        status, data = await post_raw(px.url, big)
    assert status == 413
    err = openai_error(data)
    assert str(BODY_LIMIT) in err["message"]
    assert not up.chat_requests


async def test_huge_chunked_body_without_length_is_413() -> None:
    async def gen() -> Any:
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(200):
            yield b"x" * 8192
        yield b'"}]}'

    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, body_limit=BODY_LIMIT)) as px,
        aiohttp.ClientSession() as s,
    ):
        try:
            async with s.post(px.url + "/chat/completions", data=gen()) as r:
                status, data = r.status, await r.read()
        except aiohttp.ClientError:
            status, data = 413, b""  # the proxy may cut the upload short
    assert status == 413
    if data:
        openai_error(data)
    assert not up.chat_requests


async def test_huge_tools_array_over_the_limit_is_413() -> None:
    tools = [tool(f"tool_{i}", {"x": {"type": "string"}}) for i in range(5000)]
    async with FakeUpstream() as up, AppServer(proxy_app(up.url, body_limit=BODY_LIMIT)) as px:
        status, data = await post_raw(px.url, orjson.dumps(body(tools=tools)))
    assert status == 413
    openai_error(data)


async def test_more_tools_than_max_tools_is_400() -> None:
    from streamfix.server.caller.validate import MAX_TOOLS

    tools = [tool(f"t{i}") for i in range(MAX_TOOLS + 1)]
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post_raw(px.url, orjson.dumps(body(tools=tools)))
    assert status == 400
    err = openai_error(data)
    assert err["param"] == "tools" and str(MAX_TOOLS) in err["message"]
    assert not up.chat_requests


async def test_tool_name_longer_than_the_limit_is_400() -> None:
    from streamfix.server.caller.validate import MAX_TOOL_NAME_CHARS

    tools = [*SHAPES_TOOLS, tool("n" * (MAX_TOOL_NAME_CHARS + 1))]
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post_raw(px.url, orjson.dumps(body(tools=tools)))
    assert status == 400
    assert openai_error(data)["param"] == "tools[3].function.name"
    assert not up.chat_requests


async def test_max_tools_with_the_longest_names_are_served() -> None:
    from streamfix.server.caller.validate import MAX_TOOL_NAME_CHARS, MAX_TOOLS

    # the longest names (the detector's trie recursed once per character:
    # ~1000-character names overflowed the stack) and the most tools
    long_name = "x" * (MAX_TOOL_NAME_CHARS - 4)
    tools = [tool(f"{long_name}{i:04d}") for i in range(4)]
    tools += [tool(f"tool_{i}") for i in range(MAX_TOOLS - 4)]
    call = f'<tool_call>{{"name": "{long_name}0003", "arguments": {{}}}}</tool_call>'
    reply = Reply.stream(text_stream([call[:20], call[20:]]))
    async with FakeUpstream(reply) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post_raw(px.url, orjson.dumps(body(tools=tools)))
    assert status == 200
    a = assemble(data)
    assert a.done and not a.errors
    assert [c["function"]["name"] for c in a.tool_calls] == [f"{long_name}0003"]
    assert len(up.chat_requests[0].body["tools"]) == MAX_TOOLS


async def test_a_new_large_tool_set_does_not_stall_other_streams() -> None:
    # The most fresh names of the longest length the proxy takes: the
    # detector's matcher for them is built on the event loop (a few ms, see
    # ``transforms.detect``), so a stream already running keeps flowing.
    # (It took 45 s of CPU before, in a thread.)
    from streamfix.server.caller.validate import MAX_TOOL_NAME_CHARS, MAX_TOOLS

    rnd = random.Random(7)
    letters = string.ascii_letters
    fresh = [
        tool("".join(rnd.choice(letters) for _ in range(MAX_TOOL_NAME_CHARS - 6)) + f"_{i:05d}")
        for i in range(MAX_TOOLS)
    ]
    paced = Reply.stream(
        [sse([chunk(role="assistant", content="")], done=False)]
        + [sse([chunk(f"w{i} ")], done=False) for i in range(150)]
        + [sse([chunk(finish="stop")])],
        delay=0.01,
    )
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        up.push(paced)
        arrivals: list[float] = []

        async def watch() -> None:
            async with (
                aiohttp.ClientSession() as s,
                s.post(px.url + "/chat/completions", json=body()) as r,
            ):
                async for _ in r.content.iter_any():
                    arrivals.append(time.monotonic())

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        status, _ = await post_raw(px.url, orjson.dumps(body(tools=fresh)))
        built = time.monotonic() - t0
        await asyncio.wait_for(task, 10)
    assert status == 200
    # The stream's gaps from the request on (half a second at least: the
    # request itself now takes milliseconds) stay at its pace, plus
    # scheduling noise on two busy cores (0.26-0.34 s seen under load).
    # A stall the size of the old build would show as one long gap.
    until = t0 + max(built, 0.5)
    during = [t for t in arrivals if t0 <= t <= until]
    gaps = [b - a for a, b in itertools.pairwise(arrivals) if t0 <= b <= until]
    assert len(during) >= 3, (built, len(arrivals))
    assert max(gaps, default=0) < 0.6, (max(gaps), built)


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": 5},
        {"type": "object", "properties": []},
        {"type": "object", "properties": {"x": "string"}},
        {"type": "object", "properties": {"x": {"type": ["string", 7]}}, "required": "x"},
        {"type": "object", "required": [1, None, {"a": 1}]},
        {"$ref": "#/nowhere"},
        {"type": "object", "properties": {"x": {"enum": 5, "items": 3}}},
        {"anyOf": "nope", "additionalProperties": "maybe"},
    ],
)
async def test_invalid_json_schema_is_passed_on_and_the_chain_survives(
    parameters: dict[str, Any],
) -> None:
    # An object that is not a valid JSON Schema is the upstream's to judge
    # (engines differ); the proxy passes it on and must not crash when the
    # model then calls that tool, as text or as a structured call.
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    text_call = '<tool_call>{"name": "f", "arguments": {"x": "1", "y": [1]}}</tool_call>'
    structured = sse(
        [
            chunk(role="assistant"),
            chunk(
                tool_calls=[
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1'},
                    }
                ]
            ),
            chunk(tool_calls=[{"index": 0, "function": {"arguments": "}"}}]),
            chunk(finish="tool_calls"),
        ]
    )
    for raw in (text_stream([text_call]), structured):
        async with FakeUpstream(Reply.stream(raw)) as up, AppServer(proxy_app(up.url)) as px:
            status, data = await post_raw(px.url, orjson.dumps(body(tools=tools)))
        assert status == 200
        a = assemble(data)
        assert a.done and not a.errors
        assert up.chat_requests[0].body["tools"][0]["function"]["parameters"] == parameters


async def test_unknown_fields_are_passed_through() -> None:
    extra = {
        "x_custom": {"nested": [1, 2, {"a": None}]},
        "top_k": 40,
        "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {"type": "json_object"},
    }
    msgs = [{"role": "user", "content": "hi", "x_msg_field": 1, "name": "bob"}]
    async with (
        FakeUpstream(Reply.stream(text_stream(["ok"]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, data = await post_raw(px.url, orjson.dumps(body(messages=msgs, **extra)))
    assert status == 200 and assemble(data).content == "ok"
    sent = up.chat_requests[0].body
    for k, v in extra.items():
        assert sent[k] == v
    assert sent["messages"] == msgs


async def test_non_ascii_and_escaped_text_is_passed_through_intact() -> None:
    content = "héllo 世界 🦜 \u2028 \\u0000 \x00 \t"
    msgs = [{"role": "user", "content": content}]
    async with (
        FakeUpstream(Reply.stream(text_stream(["ok"]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, _ = await post_raw(px.url, orjson.dumps(body(messages=msgs)))
    assert status == 200
    assert up.chat_requests[0].body["messages"][0]["content"] == content


async def test_lone_surrogate_escape_is_a_400() -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}'
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post_raw(px.url, raw)
    assert status == 400
    openai_error(data)
    assert not up.chat_requests


async def test_wrong_content_type_is_still_read_as_json() -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["ok"]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, data = await post_raw(px.url, orjson.dumps(body()), {"Content-Type": "text/plain"})
    assert status == 200 and assemble(data).content == "ok"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/chat/completions", 405),
        ("PUT", "/v1/chat/completions", 405),
        ("POST", "/v1/images/generations", 404),
        ("GET", "/v1/../etc/passwd", 404),
        ("POST", "/v2/chat/completions", 404),
    ],
)
async def test_wrong_method_or_path_is_an_openai_error(method: str, path: str, status: int) -> None:
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.request(method, px.root + path, data=b"{}") as r,
    ):
        got, data = r.status, await r.read()
    assert got == status
    openai_error(data)
    assert not up.chat_requests
